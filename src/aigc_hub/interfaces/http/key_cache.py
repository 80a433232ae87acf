"""Live API keys remembered for a few seconds, so a request does not look its key up.

Every authenticated request used to run one SELECT for its key. :class:`KeyCache` keeps the
principal of a *live* key for ``ttl_s`` seconds (default :data:`DEFAULT_TTL_S`) under the
key's SHA-256 (never the key itself); unknown and revoked keys are not remembered, so a new
key works at once and a stream of wrong keys cannot push live ones out. The price: a key
revoked by another process (another API worker, a CLI, SQL) is still accepted by this
process for up to ``ttl_s``. A revocation through this app's own admin route
(``POST /admin/api-keys/{key_id}/revoke``) forgets the key here at once. ``ttl_s = 0``
turns the cache off.

One cache per app (``app.state.key_cache``), used from the event loop's thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cachetools import TTLCache
from fastapi import Request

from aigc_hub.tenancy import Principal

DEFAULT_TTL_S = 5.0
#: Keys remembered at most; the least recently used goes first (tenants have few keys).
DEFAULT_MAX_ENTRIES = 10_000


class KeyCache:
    """Principals of live keys by key hash, each for ``ttl_s`` seconds, at most
    ``max_entries`` of them (least recently used out first)."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self._entries: TTLCache[str, Principal] | None = (
            TTLCache(maxsize=max_entries, ttl=ttl_s, timer=clock) if ttl_s > 0 else None
        )

    def get(self, key_hash: str) -> Principal | None:
        """The principal remembered for ``key_hash`` while fresh; else None."""
        return None if self._entries is None else self._entries.get(key_hash)

    def put(self, key_hash: str, principal: Principal) -> None:
        """Remember a live key's principal for ``ttl_s`` (nothing when the cache is off)."""
        if self._entries is not None:
            self._entries[key_hash] = principal

    def forget(self, key_id: str) -> None:
        """Drop every entry of key ``key_id`` (it was revoked): its next request asks again."""
        if self._entries is None:
            return
        for key_hash in [h for h, p in self._entries.items() if p.key_id == key_id]:
            self._entries.pop(key_hash, None)


def key_cache_of(request: Request) -> KeyCache:
    """The app's cache (``app.state.key_cache``), made with the defaults on first use."""
    found = getattr(request.app.state, "key_cache", None)
    if not isinstance(found, KeyCache):
        found = request.app.state.key_cache = KeyCache()
    return found
