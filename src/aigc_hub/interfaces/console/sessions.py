"""Console sessions: HMAC-signed, expiring tokens naming an admin key, and their CSRF tokens.

A session token is ``<payload>.<mac>``: the payload is base64url JSON ``{"kid", "exp"}`` (the
admin key's id, never the key itself, and the expiry in epoch seconds), the MAC is
HMAC-SHA256 over the payload with the console secret. The CSRF token of a session is another
HMAC of the session token, so it needs no storage and dies with the session. Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: How long a console login lasts.
DEFAULT_TTL_S = 8 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    """A verified session: the admin key it was opened with and when it ends."""

    key_id: str
    expires_at: int


@dataclass(frozen=True)
class Sessions:
    """Issues and verifies session and CSRF tokens; thread- and task-safe (immutable).

    The default secret is random per process: a restart (or another API process) logs
    operators out, which is the safe failure.
    """

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    ttl_s: int = DEFAULT_TTL_S
    now: Callable[[], float] = time.time

    def _mac(self, purpose: str, message: str) -> str:
        digest = hmac.new(self.secret, f"{purpose}|{message}".encode(), hashlib.sha256)
        return _b64(digest.digest())

    def issue(self, key_id: str) -> str:
        """A token for a session of ``key_id`` that ends ``ttl_s`` from now."""
        payload = {"kid": key_id, "exp": int(self.now()) + self.ttl_s}
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{self._mac('session', body)}"

    def verify(self, token: str | None) -> Session | None:
        """The session of a well-signed, unexpired token; None for anything else."""
        if not token or token.count(".") != 1:
            return None
        body, mac = token.split(".")
        if not hmac.compare_digest(mac, self._mac("session", body)):
            return None
        try:
            payload = json.loads(_unb64(body))
            key_id, expires_at = str(payload["kid"]), int(payload["exp"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires_at <= self.now():
            return None
        return Session(key_id=key_id, expires_at=expires_at)

    def csrf(self, token: str) -> str:
        """The CSRF token that forms of the session ``token`` must carry."""
        return self._mac("csrf", token)

    def check_csrf(self, token: str, presented: str | None) -> bool:
        """True when ``presented`` is the CSRF token of the session ``token``."""
        return bool(presented) and hmac.compare_digest(self.csrf(token), presented or "")
