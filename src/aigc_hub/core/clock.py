"""The clock seam: real time in production, a controllable clock in tests.

Everything that waits or stamps time (retry back-off, delayed redelivery, leases,
scanners) asks a :class:`Clock`, so fault tests advance time instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time in epoch milliseconds plus an awaitable sleep."""

    def now_ms(self) -> int:
        """Current epoch time in milliseconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the caller for ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock: ``time.time`` and ``asyncio.sleep``."""

    def now_ms(self) -> int:
        """Current epoch time in milliseconds."""
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        """Sleep for real."""
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that only moves when told to; sleepers wake when time passes their deadline.

    ``advance()`` wakes every sleeper whose deadline is reached, in deadline order, and
    yields to the event loop so woken tasks run before it returns.
    """

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:
        self._now_ms = start_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        """Current time of this clock, epoch milliseconds."""
        return self._now_ms

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced past now + ``seconds``."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline = self._now_ms + int(seconds * 1000)
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline_ms(self) -> int | None:
        """The earliest pending sleeper's deadline, or None when nobody sleeps."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and let every due sleeper run."""
        target = self._now_ms + int(seconds * 1000)
        while True:
            nxt = self.next_deadline_ms()
            if nxt is None or nxt > target:
                break
            self._now_ms = max(self._now_ms, nxt)
            while self._sleepers and self._sleepers[0][0] <= self._now_ms:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now_ms = target
        for _ in range(5):
            await asyncio.sleep(0)
