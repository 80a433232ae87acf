"""Leader leases for scanners on the cache seam (Redis at scale, memory in one process).

:class:`~aigc_hub.reliability.scanners.ScannerRunner` asks for ``acquire(name, owner, ttl)``
each tick and ``release(name, owner)`` on the way out; the cache's :class:`Leases` renews and
releases by :class:`Lease` value, so this adapter remembers the lease it holds per name.
"""

from __future__ import annotations

from aigc_hub.cache.base import Lease, Leases


class CacheLeaderLeases:
    """Take-or-renew leader leases over a cache :class:`Leases` engine."""

    def __init__(self, leases: Leases) -> None:
        self.leases = leases
        self._held: dict[tuple[str, str], Lease] = {}

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Renew the lease this owner holds, or take ``name`` if it is free; None if taken."""
        held = self._held.get((name, owner))
        lease = await self.leases.renew(held) if held is not None else None
        if lease is None:
            lease = await self.leases.acquire(name, owner, ttl_ms)
        if lease is None:
            self._held.pop((name, owner), None)
        else:
            self._held[(name, owner)] = lease
        return lease

    async def release(self, name: str, owner: str) -> bool:
        """Release ``name`` if this owner holds it."""
        held = self._held.pop((name, owner), None)
        return await self.leases.release(held) if held is not None else False

    async def holder(self, name: str) -> tuple[str, int] | None:
        """The current (owner, fencing token), or None."""
        return await self.leases.holder(name)
