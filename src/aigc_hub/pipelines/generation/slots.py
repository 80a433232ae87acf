"""Concurrency slots at four levels — platform, tenant, provider, model (seed 004 §3.5.4).

A level with limit N is N permit leases ``slot:<level>:<n>`` in the cache seam; an attempt
holds one permit per level, owned by its attempt id, with a TTL. The slot scanner renews
the permits of every attempt the database says is active and re-takes any the cache lost,
so a cache restart or a crashed worker corrects itself within one TTL: the database is the
fact, the cache only admits.
"""

from __future__ import annotations

from dataclasses import dataclass

from aigc_hub.cache.base import Lease, Leases


@dataclass(frozen=True)
class Level:
    """One slot level: its lease name prefix and how many permits it has."""

    prefix: str
    limit: int


@dataclass(frozen=True)
class Refusal:
    """Which level had no free permit."""

    level: str


class Slots:
    """Takes, renews and gives back permits; every call is safe to repeat."""

    def __init__(
        self,
        leases: Leases,
        *,
        platform: int,
        tenant: int,
        provider: int,
        model: int,
        ttl_ms: int,
    ) -> None:
        self.leases = leases
        self.limits = {"platform": platform, "tenant": tenant, "provider": provider, "model": model}
        self.ttl_ms = ttl_ms

    def levels(self, tenant_id: str, provider: str, model: str) -> list[Level]:
        return [
            Level("slot:platform", self.limits["platform"]),
            Level(f"slot:tenant:{tenant_id}", self.limits["tenant"]),
            Level(f"slot:provider:{provider}", self.limits["provider"]),
            Level(f"slot:model:{provider}:{model}", self.limits["model"]),
        ]

    async def acquire(
        self, owner: str, tenant_id: str, provider: str, model: str
    ) -> list[str] | Refusal:
        """One permit per level for ``owner``, or a Refusal naming the full level (none kept)."""
        taken: list[str] = []
        for level in self.levels(tenant_id, provider, model):
            name = await self._take_one(level, owner)
            if name is None:
                await self.release(owner, taken)
                return Refusal(level.prefix.split(":")[1])
            taken.append(name)
        return taken

    async def _take_one(self, level: Level, owner: str) -> str | None:
        for n in range(level.limit):
            name = f"{level.prefix}:{n}"
            if await self.leases.acquire(name, owner, self.ttl_ms) is not None:
                return name
        return None

    async def renew(self, owner: str, names: list[str]) -> list[str]:
        """Keep ``owner``'s permits alive; a permit lost to another owner is replaced by a free
        one of the same level if there is one (else the level runs over by one until it frees).
        Returns the names now held."""
        held: list[str] = []
        for name in names:
            if await self.leases.acquire(name, owner, self.ttl_ms) is not None:
                held.append(name)
                continue
            prefix, _, _ = name.rpartition(":")
            limit = self._limit_of(prefix)
            replacement = await self._take_one(Level(prefix, limit), owner) if limit else None
            held.append(replacement or name)
        return held

    def _limit_of(self, prefix: str) -> int:
        kind = prefix.split(":")[1] if prefix.count(":") >= 1 else ""
        return self.limits.get(kind, 0)

    async def release(self, owner: str, names: list[str]) -> None:
        """Give back ``owner``'s permits (compare-and-delete: never someone else's)."""
        for name in names:
            holder = await self.leases.holder(name)
            if holder is not None and holder[0] == owner:
                await self.leases.release(Lease(name, owner, holder[1], 0, self.ttl_ms))
