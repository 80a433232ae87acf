"""Console session tokens: signed, expiring, bound to their secret; CSRF tokens per session."""

from __future__ import annotations

from aigc_hub.interfaces.console.sessions import Sessions


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def test_a_token_names_its_key_until_it_expires() -> None:
    clock = Clock()
    sessions = Sessions(secret=b"s" * 32, ttl_s=60, now=clock)
    token = sessions.issue("key-1")
    session = sessions.verify(token)
    assert session is not None and session.key_id == "key-1"
    assert session.expires_at == 1_000_060
    clock.t += 59
    assert sessions.verify(token) is not None
    clock.t += 1
    assert sessions.verify(token) is None


def test_forged_or_foreign_tokens_are_refused() -> None:
    sessions = Sessions(secret=b"s" * 32)
    token = sessions.issue("key-1")
    body, mac = token.split(".")
    other = Sessions(secret=b"t" * 32).issue("key-1")
    forged_body = Sessions(secret=b"s" * 32).issue("key-2").split(".")[0]
    # the last character changed to one it is not (a fixed "A" equals it 1 time in 64)
    tampered = f"{body}.{mac[:-1]}{'B' if mac.endswith('A') else 'A'}"
    for bad in (None, "", "x", "a.b.c", tampered, other, f"{forged_body}.{mac}"):
        assert sessions.verify(bad) is None, bad
    assert Sessions().verify(token) is None  # a new process has a new random secret


def test_csrf_tokens_belong_to_one_session() -> None:
    sessions = Sessions(secret=b"s" * 32)
    one, two = sessions.issue("key-1"), sessions.issue("key-2")
    assert sessions.check_csrf(one, sessions.csrf(one))
    assert not sessions.check_csrf(one, sessions.csrf(two))
    assert not sessions.check_csrf(one, None)
    assert not sessions.check_csrf(one, "")
    assert sessions.csrf(one) != one
