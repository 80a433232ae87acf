"""The API key cache: fresh entries only, bounded, forgotten on revocation."""

from __future__ import annotations

from aigc_hub.interfaces.http.key_cache import KeyCache
from aigc_hub.tenancy import Principal


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def principal(key_id: str) -> Principal:
    return Principal(tenant_id="t-1", role="tenant", key_id=key_id)


def test_an_entry_is_served_until_its_ttl_then_asked_again() -> None:
    clock = Clock()
    cache = KeyCache(ttl_s=5.0, clock=clock)
    cache.put("h1", principal("k1"))
    clock.now += 4.9
    assert cache.get("h1") == principal("k1")
    clock.now += 0.1
    assert cache.get("h1") is None
    assert cache.get("unknown") is None


def test_the_least_recently_used_entry_goes_first_when_full() -> None:
    cache = KeyCache(ttl_s=5.0, max_entries=2, clock=Clock())
    cache.put("h1", principal("k1"))
    cache.put("h2", principal("k2"))
    assert cache.get("h1") is not None  # h2 is now the least recently used
    cache.put("h3", principal("k3"))
    assert [cache.get(h) is not None for h in ("h1", "h2", "h3")] == [True, False, True]


def test_forget_drops_every_entry_of_a_key_and_a_zero_ttl_keeps_nothing() -> None:
    cache = KeyCache(ttl_s=5.0, clock=Clock())
    cache.put("h1", principal("k1"))
    cache.put("h2", principal("k2"))
    cache.forget("k1")
    assert cache.get("h1") is None and cache.get("h2") == principal("k2")
    off = KeyCache(ttl_s=0, clock=Clock())
    off.put("h1", principal("k1"))
    assert off.get("h1") is None
