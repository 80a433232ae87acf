"""Per-key lanes served by a bounded pool of worker tasks.

Items of one key run one at a time, in the order they were put; items of different keys run
concurrently on at most ``workers`` tasks. A worker is started when a key gets its first item
and no more than ``workers`` are running; otherwise the key waits in a ready queue. A worker
that empties its key's lane takes the next ready key, and ends when none is left, so an idle
group holds no task and a busy one reuses the same few instead of starting one per key.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Lanes(Generic[T]):
    """Run ``serve(item)`` for every item put, in order per key, on at most ``workers`` tasks.

    ``serve`` returning marks the item done; an ``Exception`` from it is logged and leaves the
    key blocked for good (its later items never run, so nothing passes an unfinished record).
    After :meth:`halt` no item is marked done or started. Not thread-safe: use from the event
    loop's thread only.
    """

    def __init__(self, serve: Callable[[T], Awaitable[None]], *, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError("a lane pool needs at least one worker")
        self._serve = serve
        self.workers = workers
        self.name = name
        self._lanes: dict[str, deque[T]] = {}
        self._ready: deque[str] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        # Counted by the workers themselves: a worker that decided to end no longer counts,
        # even before its task's done-callback runs, so a key put meanwhile gets a worker.
        self._live = 0
        self._halted = False

    def put(self, key: str, item: T) -> None:
        """Queue ``item`` behind the key's earlier items; start a worker if one may start."""
        lane = self._lanes.get(key)
        if lane is not None:
            lane.append(item)
            return
        self._lanes[key] = deque([item])
        if self._halted:
            return
        if self._live < self.workers:
            self._live += 1
            task = asyncio.get_running_loop().create_task(self._work(key), name=self.name)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._ready.append(key)

    def pending(self) -> int:
        """Items put and not yet done (blocked keys' items included)."""
        return sum(len(lane) for lane in self._lanes.values())

    def tasks(self) -> set[asyncio.Task[None]]:
        """The worker tasks running now."""
        return set(self._tasks)

    async def join(self, timeout: float) -> bool:
        """Wait until every worker has ended (no ready key left); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks:  # put() may start another worker while we wait
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    def halt(self) -> None:
        """Stop as a killed process would: items being served stay queued, none starts."""
        self._halted = True

    def cancel(self) -> None:
        """Halt, and cancel every worker (items in flight are abandoned)."""
        # Halted for good: a worker cancelled before its first step never runs its finally.
        self._halted = True
        for task in self._tasks:
            task.cancel()

    async def _work(self, key: str) -> None:
        try:
            while True:
                await self._drain(key)
                if self._halted or not self._ready:
                    return
                key = self._ready.popleft()
        finally:
            self._live -= 1

    async def _drain(self, key: str) -> None:
        lane = self._lanes[key]
        try:
            while lane:
                await self._serve(lane[0])
                if self._halted:
                    return
                lane.popleft()
        except Exception:
            log.exception("lane %r of %s failed; the key stays blocked", key, self.name)
            return
        del self._lanes[key]
