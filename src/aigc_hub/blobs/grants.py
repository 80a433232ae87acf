"""Signed, expiring grants on a key prefix: what a player holds to read many objects.

One presigned URL covers one object; a streaming manifest (HLS, DASH) names many. A grant
token names a *prefix* of keys and an expiry, signed with HMAC-SHA256: a hub route that
receives ``<token>/<relative path>`` verifies it and serves or redirects to the object under
that prefix, without an API key and without a database read.

Token: ``<base64url(prefix)>.<exp epoch s>.<base64url(sig)>``. Every API process must sign
with the same secret; without one configured, a random secret of this process is used
(tokens then verify only where they were made).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import posixpath
import secrets
from typing import Final

from aigc_hub.core.errors import PermanentError

_PROCESS_SECRET: Final = secrets.token_bytes(32)


class GrantRefused(PermanentError):
    """A token tampered with, expired or malformed, or a path outside its prefix."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PrefixGrants:
    """Signs and verifies grants on key prefixes with one secret."""

    def __init__(self, secret: str = "") -> None:
        self._secret = secret.encode() if secret else _PROCESS_SECRET

    def _sig(self, prefix: str, exp_s: int) -> str:
        mac = hmac.new(self._secret, f"{prefix}\n{exp_s}".encode(), hashlib.sha256)
        return _b64(mac.digest())

    def sign(self, prefix: str, exp_s: int) -> str:
        """The token granting reads under ``prefix`` (ending with ``/``) until ``exp_s``."""
        if not prefix.endswith("/"):
            raise ValueError(f"a grant's prefix ends with '/': {prefix!r}")
        return f"{_b64(prefix.encode())}.{exp_s}.{self._sig(prefix, exp_s)}"

    def verify(self, token: str, now_ms: int) -> str:
        """The prefix of a genuine, unexpired ``token``; GrantRefused otherwise."""
        encoded, _, rest = token.partition(".")
        exp_text, _, sig = rest.partition(".")
        if not (encoded and exp_text.isdigit() and sig):
            raise GrantRefused("malformed grant token")
        try:
            prefix = _unb64(encoded).decode()
        except (ValueError, UnicodeDecodeError):
            raise GrantRefused("malformed grant token") from None
        exp_s = int(exp_text)
        if not hmac.compare_digest(self._sig(prefix, exp_s).encode(), sig.encode()):
            raise GrantRefused("grant token refused")
        if now_ms >= exp_s * 1000:
            raise GrantRefused("grant token expired")
        return prefix

    @staticmethod
    def key_under(prefix: str, path: str) -> str:
        """The key of ``path`` under ``prefix``; GrantRefused for a path that climbs out."""
        normal = posixpath.normpath(path)
        if not path or normal.startswith(("..", "/")) or normal == "." or "\\" in path:
            raise GrantRefused(f"path {path!r} is outside the grant")
        return prefix + normal
