"""The in-process cache engine: the same semantics as Redis, for one process and for tests.

State lives in dicts; every method runs without awaiting anything, so each call is atomic
under asyncio, as a Lua script is on Redis. Expiry is judged against the given
:class:`Clock` (a :class:`ManualClock` in tests). Floating-point bucket arithmetic is done
in the same order as the Redis script, so both engines give the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aigc_hub.cache import base
from aigc_hub.cache.base import DueTimer, Lease, RateDecision
from aigc_hub.core.clock import Clock, SystemClock

#: Every this many calls, counters and buckets that expired are dropped (bounded memory).
SWEEP_EVERY = 1024


class MemoryLeases:
    """Leases in a dict; a fencing counter outlives its lease until the time floor passes it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._held: dict[str, Lease] = {}
        self._fence: dict[str, int] = {}
        self._calls = 0

    def _live(self, name: str, now: int) -> Lease | None:
        lease = self._held.get(name)
        if lease is not None and lease.expires_at_ms <= now:
            del self._held[name]
            return None
        return lease

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Take or renew ``name``; None while another owner holds it."""
        base.check_ttl(ttl_ms)
        now = self.clock.now_ms()
        current = self._live(name, now)
        if current is not None and current.owner != owner:
            return None
        if current is None:
            floor = now * base.FENCE_SLOTS_PER_MS
            token = self._fence[name] = max(self._fence.get(name, 0) + 1, floor)
            self._calls += 1
            if self._calls % SWEEP_EVERY == 0:  # a counter below the floor is superseded
                self._fence = {k: v for k, v in self._fence.items() if v >= floor}
        else:
            token = current.token
        lease = Lease(name, owner, token, now + ttl_ms, ttl_ms)
        self._held[name] = lease
        return lease

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend this tenure by its ttl; None when it is over."""
        now = self.clock.now_ms()
        current = self._live(lease.name, now)
        if current is None or (current.owner, current.token) != (lease.owner, lease.token):
            return None
        renewed = dataclasses.replace(current, expires_at_ms=now + lease.ttl_ms)
        self._held[lease.name] = renewed
        return renewed

    async def release(self, lease: Lease) -> bool:
        """Delete the lease if this tenure holds it; True when it was live."""
        now = self.clock.now_ms()
        current = self._held.get(lease.name)
        if current is None or (current.owner, current.token) != (lease.owner, lease.token):
            return False
        del self._held[lease.name]
        return current.expires_at_ms > now

    async def holder(self, name: str) -> tuple[str, int] | None:
        """The live ``(owner, token)`` of ``name``, or None."""
        current = self._live(name, self.clock.now_ms())
        return (current.owner, current.token) if current else None


@dataclass
class _Entry:
    score: int
    payload: bytes
    claimed_by: str | None = None


class MemoryTimers:
    """Timer queues as dicts of member -> entry; due members are found by a sort."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._queues: dict[str, dict[str, _Entry]] = {}
        self._counters: dict[str, tuple[int, int]] = {}
        self._calls = 0

    def _due(self, queue: str, now_ms: int, limit: int) -> list[tuple[str, _Entry]]:
        if limit <= 0:
            return []
        entries = self._queues.get(queue, {})
        ready = [(e.score, m) for m, e in entries.items() if e.score <= now_ms]
        return [(m, entries[m]) for _, m in sorted(ready)[:limit]]

    async def schedule(self, queue: str, member: str, due_ms: int, payload: bytes) -> None:
        """Insert or replace ``member`` at ``due_ms``; drops its claim."""
        self._queues.setdefault(queue, {})[member] = _Entry(int(due_ms), bytes(payload))

    async def due(self, queue: str, now_ms: int, limit: int) -> list[DueTimer]:
        """Due members, earliest first (ties by member); removes none."""
        return [DueTimer(m, e.payload, e.score) for m, e in self._due(queue, now_ms, limit)]

    async def claim(
        self, queue: str, now_ms: int, limit: int, owner: str, visibility_ms: int
    ) -> list[DueTimer]:
        """Take due members and hide them until ``now_ms + visibility_ms``."""
        if not owner:
            raise ValueError("claim needs a non-empty owner")
        taken = []
        for member, entry in self._due(queue, now_ms, limit):
            taken.append(DueTimer(member, entry.payload, entry.score))
            entry.score = now_ms + visibility_ms
            entry.claimed_by = owner
        return taken

    async def complete(self, queue: str, member: str, *, owner: str | None = None) -> bool:
        """Remove ``member`` (only while ``owner``'s claim stands, when given)."""
        entries = self._queues.get(queue, {})
        entry = entries.get(member)
        if entry is None or (owner is not None and entry.claimed_by != owner):
            return False
        del entries[member]
        if not entries:
            self._queues.pop(queue, None)
        return True

    async def next_due(self, queue: str) -> int | None:
        """The earliest score, or None when the queue is empty."""
        entries = self._queues.get(queue)
        return min((e.score, m) for m, e in entries.items())[0] if entries else None

    async def attempts(self, key: str, ttl_ms: int) -> int:
        """Increment ``key``; a first increment (or one after expiry) starts a new life."""
        base.check_ttl(ttl_ms)
        now = self.clock.now_ms()
        self._calls += 1
        if self._calls % SWEEP_EVERY == 0:
            self._counters = {k: v for k, v in self._counters.items() if v[1] > now}
        count, expires_at = self._counters.get(key, (0, 0))
        if expires_at <= now:
            count, expires_at = 0, now + ttl_ms
        self._counters[key] = (count + 1, expires_at)
        return count + 1


class MemoryRateLimiter:
    """Token buckets as (tokens, last refill time, time it is full again) triples."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._buckets: dict[str, tuple[float, int, float]] = {}  # tokens, stamp, full again at
        self._calls = 0

    async def acquire(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1
    ) -> RateDecision:
        """Take ``cost`` tokens if there are that many; else say when there will be."""
        base.check_bucket(rate_per_s, burst, cost)
        now = self.clock.now_ms()
        rate, cap, need = float(rate_per_s), float(burst), float(cost)
        self._calls += 1
        if self._calls % SWEEP_EVERY == 0:  # a bucket full again by now is as good as none
            self._buckets = {k: v for k, v in self._buckets.items() if v[2] > now}
        tokens, stamp = cap, now
        if key in self._buckets:
            tokens, stamp, _ = self._buckets[key]
            if now > stamp:  # a clock behind the last stamp refills nothing
                tokens = min(cap, tokens + (now - stamp) * rate / 1000)
                stamp = now
        if tokens >= need:
            tokens -= need
            decision = RateDecision(True, 0.0, tokens)
        else:
            decision = RateDecision(False, (need - tokens) / rate, tokens)
        self._buckets[key] = (tokens, stamp, stamp + (cap - tokens) / rate * 1000)
        return decision

    async def reset(self, key: str) -> None:
        """Forget the bucket of ``key``."""
        self._buckets.pop(key, None)


class MemoryProgress:
    """Values with their expiry time; an expired one counts as absent."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._values: dict[str, tuple[float, int]] = {}  # key -> value, expires at (ms)
        self._calls = 0

    async def raise_to(self, key: str, value: float, ttl_ms: int) -> bool:
        """Store ``value`` unless a live value at least as high is there."""
        base.check_ttl(ttl_ms)
        now = self.clock.now_ms()
        self._calls += 1
        if self._calls % SWEEP_EVERY == 0:
            self._values = {k: v for k, v in self._values.items() if v[1] > now}
        current = self._values.get(key)
        if current is not None and current[1] > now and current[0] >= value:
            return False
        self._values[key] = (float(value), now + ttl_ms)
        return True

    async def read(self, keys: Sequence[str]) -> dict[str, float]:
        """The live values of ``keys``."""
        now = self.clock.now_ms()
        found = ((k, self._values.get(k)) for k in keys)
        return {k: v[0] for k, v in found if v is not None and v[1] > now}


class MemoryCache(base.Cache):
    """All four parts in process memory, on one clock; nothing to close."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        super().__init__(
            leases=MemoryLeases(self.clock),
            timers=MemoryTimers(self.clock),
            limiter=MemoryRateLimiter(self.clock),
            progress=MemoryProgress(self.clock),
            features=base.CacheFeatures(cross_process=False, time_source="clock"),
        )
