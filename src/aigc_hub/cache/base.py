"""The cache seam: leases with fencing tokens, delayed-redelivery timers, token-bucket limits.

Everything here is a coordination aid, never a source of truth (the database is): a lost
cache loses leases (their holders are fenced out by token), timers (scanners re-park stuck
work from the database) and buckets (they start full). Engines: ``memory.py`` (one
process) and ``redis.py`` (shared by every process); both pass ``tests/contract``'s suite.

Time: every expiry is judged against one clock. The memory engine uses the :class:`Clock`
it is given; the Redis engine uses either the given clock (its ``now`` is passed into each
script) or, without one, the Redis server's ``TIME`` so hosts with skewed clocks agree.
Timer due times are always the caller's (``schedule``/``due``/``claim`` take them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, Self


@dataclass(frozen=True)
class CacheFeatures:
    """What a cache engine guarantees, declared as data (read by tests and the runtime)."""

    #: Several processes (and hosts) see the same leases, timers and buckets.
    cross_process: bool = False
    #: Where "now" comes from for lease, attempt-counter and bucket expiry.
    time_source: Literal["clock", "server"] = "clock"


# -- leases ----------------------------------------------------------------------------------


#: A new holder's token is at least ``now_ms * FENCE_SLOTS_PER_MS``: tokens keep growing even
#: when the engine forgot its counters (Redis flushed or failed over, a process restarted),
#: as long as a name changes holder fewer than 1000 times per millisecond, and the per-name
#: counters can expire with their lease instead of living forever.
FENCE_SLOTS_PER_MS = 1000


@dataclass(frozen=True)
class Lease:
    """One tenure of a named lease: who holds it, its fencing token, until when.

    ``token`` identifies the tenure: it is the same across renewals and strictly greater
    for every later tenure of the same name, so storage can refuse writes carrying an older
    one (:func:`aigc_hub.store.fencing.fenced_update`). ``expires_at_ms`` is on the engine's
    time source; ``ttl_ms`` is what :meth:`Leases.renew` extends by.
    """

    name: str
    owner: str
    token: int
    expires_at_ms: int
    ttl_ms: int


class Leases(Protocol):
    """Named, expiring, exclusive leases with monotonic fencing tokens."""

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Take ``name`` for ``ttl_ms``, or None while another owner holds it.

        The same owner acquiring a live lease renews it (same token). A lease that is free,
        released or expired gets a new, larger token, even for its previous owner: the
        name's counter plus one, raised to ``now_ms * FENCE_SLOTS_PER_MS`` if below it.
        """
        ...

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend ``lease`` by its ttl from now; None when the tenure is over (lease lost)."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if this tenure still holds it (compare-and-delete); True if so."""
        ...

    async def holder(self, name: str) -> tuple[str, int] | None:
        """The live holder's ``(owner, token)``, or None when nobody holds ``name``."""
        ...


# -- timers ----------------------------------------------------------------------------------


class DueTimer(NamedTuple):
    """A scheduled member with its payload and score (due time, or end of its last claim)."""

    member: str
    payload: bytes
    due_ms: int


class Timers(Protocol):
    """Delayed redelivery queues (seed 002's retry ZSET) and per-key attempt counters.

    Delivery is at-least-once: a member leaves its queue only through :meth:`complete`,
    which the dispatcher calls *after* it re-published the payload. A crash between the
    two re-publishes it again on the next scan; consumers deduplicate (inbox). Several
    dispatchers share a queue safely through :meth:`claim`, never through :meth:`due`.
    """

    async def schedule(self, queue: str, member: str, due_ms: int, payload: bytes) -> None:
        """Put ``member`` in ``queue`` at ``due_ms`` with ``payload``; replaces an earlier entry.

        Replacing also drops any claim on the member, so a dispatcher finishing the old
        entry with ``complete(..., owner=...)`` cannot remove the new one.
        """
        ...

    async def due(self, queue: str, now_ms: int, limit: int) -> list[DueTimer]:
        """Up to ``limit`` members due by ``now_ms``, earliest first (ties by member); kept."""
        ...

    async def claim(
        self, queue: str, now_ms: int, limit: int, owner: str, visibility_ms: int
    ) -> list[DueTimer]:
        """Atomically take up to ``limit`` due members, hiding them for ``visibility_ms``.

        A claimed member's score moves to ``now_ms + visibility_ms``: no other claimer gets
        it before then. If the claimer dies without :meth:`complete`, it becomes due again.
        """
        ...

    async def complete(self, queue: str, member: str, *, owner: str | None = None) -> bool:
        """Remove ``member`` (after its re-publish succeeded); True when something was removed.

        With ``owner``, only while that owner's claim stands: not after the member was
        rescheduled or claimed by someone else once the visibility window ran out.
        """
        ...

    async def next_due(self, queue: str) -> int | None:
        """The earliest score in ``queue`` (claimed members included), or None when empty."""
        ...

    async def attempts(self, key: str, ttl_ms: int) -> int:
        """Increment counter ``key`` and return it; the first increment starts a ``ttl_ms`` life.

        Seed 002: ``attempts:transcode:{id}`` with a 24 h TTL, give up past 7.
        """
        ...


# -- rate limits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RateDecision:
    """The verdict of a bucket: allowed or not, how long to wait if not, tokens left."""

    allowed: bool
    retry_after_s: float
    remaining: float


class RateLimiter(Protocol):
    """Token buckets: ``burst`` tokens, refilled at ``rate_per_s``, one bucket per key."""

    async def acquire(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1
    ) -> RateDecision:
        """Take ``cost`` tokens if present (all or none); else how long until they will be."""
        ...

    async def reset(self, key: str) -> None:
        """Forget the bucket of ``key`` (it starts full again)."""
        ...


def check_bucket(rate_per_s: float, burst: float, cost: float) -> None:
    """Refuse bucket parameters no request could ever pass (shared by every engine)."""
    if rate_per_s <= 0 or burst <= 0:
        raise ValueError(f"rate_per_s and burst must be > 0, got {rate_per_s} and {burst}")
    if cost < 0 or cost > burst:
        raise ValueError(f"cost must be within 0..burst ({burst}), got {cost}")


def check_ttl(ttl_ms: int) -> None:
    """Refuse a lease or counter ttl that could never hold."""
    if ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be > 0, got {ttl_ms}")


# -- hot progress ----------------------------------------------------------------------------


class Progress(Protocol):
    """Hot progress values: a number per key that only rises, kept for ``ttl_ms``.

    Seed 004 §3.6.4: a non-terminal change (a provider's 37 %) updates hot progress in the
    cache; only key stages are written to the database. A lost value costs nothing but
    freshness: readers fall back to the database's last key-stage figure.
    """

    async def raise_to(self, key: str, value: float, ttl_ms: int) -> bool:
        """Store ``value`` unless a live value at least as high is there; True when stored."""
        ...

    async def read(self, keys: Sequence[str]) -> dict[str, float]:
        """The live values of ``keys`` (missing and expired keys are left out)."""
        ...


# -- the aggregate ---------------------------------------------------------------------------


@dataclass
class Cache:
    """The cache seam as the composition root hands it out: one engine's four parts."""

    leases: Leases
    timers: Timers
    limiter: RateLimiter
    progress: Progress
    features: CacheFeatures

    async def close(self) -> None:
        """Release the engine's connections; the parts must not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
