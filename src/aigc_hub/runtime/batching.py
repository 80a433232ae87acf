"""Gathers a batch consumer group's records into calls of its batch handler.

Every record still runs its own middleware chain (metrics, tracing, dead letter, retry,
timeout) and commits its own inbox mark with its own writes; only the handler call in the
middle is shared. A record's terminal hands ``(envelope, ctx)`` to :meth:`Batcher.handle`
and waits; one gathering task cuts a batch when ``max_records`` are waiting or the first has
waited ``max_wait_s``, and runs at most ``concurrency`` handler calls at once (records keep
gathering meanwhile, so batches grow under load). The handler's result per record goes back
to that record's terminal: its events, or its own exception.

With a priority (``Batching.priority``) a batch is cut from the highest-ranked records
waiting, in arrival order among equals: records gather while every call is busy, so under
load an urgent record overtakes the others fetched with it.

A record whose handling failed before (an in-process retry or a delayed redelivery) is
handled alone, as a batch of one: a poison record then fails only itself, and the others of
the batch it spoiled succeed on their own retry (Spring Kafka's fallback from a failed batch
to record-by-record handling, without re-running the good records' commits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aigc_hub.core.envelope import Envelope
from aigc_hub.observability import metrics
from aigc_hub.pipeline import Batching, BatchResults
from aigc_hub.runtime.context import HandlerContext

log = logging.getLogger(__name__)

_Waiting = tuple[Envelope, HandlerContext, "asyncio.Future[list[Envelope]]"]


def _rank(priority: Callable[[Envelope], int]) -> Callable[[_Waiting], int]:
    """The sort key putting higher-ranked records first."""
    return lambda waiting: -priority(waiting[0])


class Batcher:
    """Runs one batch group's handler over gathered records (see the module docstring)."""

    def __init__(self, batching: Batching, *, concurrency: int, group: str) -> None:
        if batching.max_records < 1 or batching.max_wait_s < 0 or concurrency < 1:
            raise ValueError("a batch group needs max_records >= 1, max_wait_s >= 0, slots >= 1")
        self.batching = batching
        self.group = group
        self._slots = asyncio.Semaphore(concurrency)
        self._waiting: list[_Waiting] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._gatherer: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[None]] = set()

    async def handle(self, envelope: Envelope, ctx: HandlerContext) -> list[Envelope]:
        """The events ``envelope`` emits once its batch was handled; its own error raised."""
        if ctx.attempt > 1 or ctx.redelivery is not None:
            (result,) = _one(await self.batching.handler([(envelope, ctx)]), 1)
            if isinstance(result, Exception):
                raise result
            return result
        future: asyncio.Future[list[Envelope]] = asyncio.get_running_loop().create_future()
        self._waiting.append((envelope, ctx, future))
        metrics.BATCH_WAITING.labels(self.group).set(len(self._waiting))
        self._arrived.set()
        if len(self._waiting) >= self.batching.max_records:
            self._full.set()
        if self._gatherer is None or self._gatherer.done():
            self._gatherer = asyncio.create_task(self._gather(), name=f"{self.group}-batches")
        return await future

    async def close(self) -> None:
        """Stop gathering; calls under way are cancelled (their records were not committed)."""
        tasks = [t for t in (self._gatherer, *self._calls) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for _env, _ctx, future in self._waiting:
            future.cancel()
        self._waiting.clear()
        metrics.BATCH_WAITING.labels(self.group).set(0)

    async def _gather(self) -> None:
        while True:
            if not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            if len(self._waiting) < self.batching.max_records:
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.batching.max_wait_s):
                        await self._full.wait()
            await self._slots.acquire()
            if self.batching.priority is not None:  # list.sort is stable: equals keep order
                self._waiting.sort(key=_rank(self.batching.priority))
            # Records that came while every slot was busy join this batch.
            batch = [w for w in self._waiting[: self.batching.max_records] if not w[2].done()]
            del self._waiting[: self.batching.max_records]
            metrics.BATCH_WAITING.labels(self.group).set(len(self._waiting))
            if not batch:
                self._slots.release()
                continue
            call = asyncio.create_task(self._run(batch), name=f"{self.group}-batch")
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def _run(self, batch: list[_Waiting]) -> None:
        try:
            metrics.BATCH_SIZE.labels(self.group).observe(len(batch))
            try:
                items = [(env, ctx) for env, ctx, _ in batch]
                results = _one(await self.batching.handler(items), len(batch))
            except asyncio.CancelledError:
                for _env, _ctx, future in batch:
                    future.cancel()
                raise
            except BaseException as exc:  # the whole call failed: each record fails with it
                # (a failpoint's Crash included: every waiter then dies as the process would)
                log.info("batch of %d in %s failed: %r", len(batch), self.group, exc)
                for _env, _ctx, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
            for (_env, _ctx, future), result in zip(batch, results, strict=True):
                if future.done():  # its waiter gave up (a timeout): it will be tried again
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
        finally:
            self._slots.release()


def _one(results: BatchResults, expected: int) -> list[list[Envelope] | Exception]:
    """The handler's results, checked: one per record."""
    if len(results) != expected:
        raise TypeError(f"a batch handler returned {len(results)} results for {expected} records")
    return list(results)
