"""Concurrency slots: permit leases at several levels, taken all or none.

A pipeline names its levels and their limits (generation: platform, tenant, provider,
model). A level with limit N, at one scope (``tenant`` of ``t-1``), is N permit leases
``slot:<level>[:<scope>]:<n>`` in the cache seam; an owner (say, an attempt id) holds one
permit per level, with a TTL. The database keeps which permits an owner holds; a scanner
renews them with :meth:`Slots.renew`, which re-takes any the cache lost, so a cache restart or
a crashed worker corrects itself within one TTL: the database is the fact, the cache only
admits. Every call is safe to repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aigc_hub.cache.base import Lease, Leases
from aigc_hub.core.errors import ConfigurationError

#: The first part of every permit's lease name.
NAMESPACE = "slot"


@dataclass(frozen=True)
class Refusal:
    """Which level had no free permit."""

    level: str


class Slots:
    """Takes, renews and gives back permits at the levels of ``limits`` (level name → permits
    per scope); a level name is a non-empty word without ``:``, a limit at least 0."""

    def __init__(self, leases: Leases, limits: Mapping[str, int], *, ttl_ms: int) -> None:
        for level, limit in limits.items():
            if not level or ":" in level or limit < 0:
                raise ConfigurationError(
                    f"slot level {level!r}: the name must be a word without ':' and the "
                    f"limit at least 0 (got {limit})"
                )
        if ttl_ms <= 0:
            raise ConfigurationError(f"slot TTL must be positive, got {ttl_ms} ms")
        self.leases = leases
        self.limits = dict(limits)
        self.ttl_ms = ttl_ms

    def prefix(self, level: str, scope: str = "") -> str:
        """The lease name of ``level``'s permits at ``scope`` without the permit number
        (``""``: the level has one scope); ConfigurationError for a level not configured."""
        if level not in self.limits:
            raise ConfigurationError(f"no slot level {level!r}; configured: {sorted(self.limits)}")
        return f"{NAMESPACE}:{level}:{scope}" if scope else f"{NAMESPACE}:{level}"

    async def acquire(self, owner: str, scopes: Sequence[tuple[str, str]]) -> list[str] | Refusal:
        """One permit per ``(level, scope)``, in order, for ``owner``; or a Refusal naming the
        first full level, with none kept. Returns the permit names to store for renew/release."""
        prefixes = [(level, self.prefix(level, scope)) for level, scope in scopes]
        taken: list[str] = []
        for level, prefix in prefixes:
            name = await self._take_one(prefix, self.limits[level], owner)
            if name is None:
                await self.release(owner, taken)
                return Refusal(level)
            taken.append(name)
        return taken

    async def _take_one(self, prefix: str, limit: int, owner: str) -> str | None:
        for n in range(limit):
            name = f"{prefix}:{n}"
            if await self.leases.acquire(name, owner, self.ttl_ms) is not None:
                return name
        return None

    async def renew(self, owner: str, names: Sequence[str]) -> list[str]:
        """Keep ``owner``'s permits alive; a permit lost to another owner is replaced by a free
        one of the same level and scope if there is one (else the level runs over by one until
        it frees). Returns the names now held, in order."""
        held: list[str] = []
        for name in names:
            if await self.leases.acquire(name, owner, self.ttl_ms) is not None:
                held.append(name)
                continue
            prefix = name.rpartition(":")[0]
            limit = self.limits.get(prefix.split(":")[1] if ":" in prefix else "", 0)
            replacement = await self._take_one(prefix, limit, owner)
            held.append(replacement or name)
        return held

    async def release(self, owner: str, names: Sequence[str]) -> None:
        """Give back ``owner``'s permits (compare-and-delete: never someone else's)."""
        for name in names:
            holder = await self.leases.holder(name)
            if holder is not None and holder[0] == owner:
                await self.leases.release(Lease(name, owner, holder[1], 0, self.ttl_ms))
