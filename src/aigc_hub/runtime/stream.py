"""A stream group's runtime: the telemetry road's consumer (raw records in batches).

One loop per member: fill a batch from the group's consumer until it holds ``max_records``
or its first record has waited ``max_wait_s``, hand it to the handler, then commit, per
partition, the offset after the last record handled. An idle ``max_wait_s`` hands over an
empty batch (a tick, for handlers that close time windows). A failing handler gets the same
batch again after an exponential back-off: a stream group never skips records, its lag grows
instead and the lag alert says so. There is no envelope, inbox or dead letter here: records
are counted per batch, not per record, because the road carries ~100,000 records/s.

Rebalances need no bookkeeping: a partition revoked while its records are handled is simply
not committed (the broker refuses a partition the member no longer owns), and its next owner
reads again from the committed offset; stream handlers are idempotent per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Sequence

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.failpoints import NONE, Failpoints
from aigc_hub.core.retry import RetryPolicy
from aigc_hub.messaging.base import Broker, Consumer, Record, TopicPartition
from aigc_hub.observability import metrics
from aigc_hub.pipeline import StreamSpec

log = logging.getLogger(__name__)

#: Back-off between tries of a failing batch: 0.2 s doubling, capped at 30 s, never giving up
#: (a stream group does not skip records; the lag alert is what calls for a person).
STREAM_BACKOFF = RetryPolicy(base=0.2, factor=2.0, cap=30.0, max_retries=sys.maxsize)

#: The longest single fetch while a batch fills: how long a set ``stop`` can go unnoticed
#: when a group waits several seconds per batch.
FETCH_SLICE_S = 0.1

#: How long a stopping member lets the handler finish the batch in hand before abandoning
#: it uncommitted (its records are read again by the next member).
STOP_GRACE_S = 10.0


class StreamRuntime:
    """Runs one :class:`StreamSpec` as a member of its consumer group until stopped.

    Offsets are committed only after the handler returned for the batch holding them; a
    batch whose handler raised is handed over again, never skipped. Not safe to ``run``
    twice at once: each run is one group member.
    """

    def __init__(
        self,
        spec: StreamSpec,
        broker: Broker,
        *,
        clock: Clock | None = None,
        failpoints: Failpoints = NONE,
        grace_s: float = STOP_GRACE_S,
        backoff: RetryPolicy = STREAM_BACKOFF,
    ) -> None:
        if spec.max_records < 1:
            raise ValueError(f"stream group {spec.group!r}: max_records must be at least 1")
        self.spec = spec
        self.group = spec.group
        self.broker = broker
        self.clock = clock or SystemClock()
        self.failpoints = failpoints
        self.grace_s = grace_s
        self.backoff = backoff
        #: Offsets handled but not yet committed (a commit failed): sent with the next commit.
        self._pending: dict[TopicPartition, int] = {}
        # Children looked up once: ``labels()`` takes a lock on every call.
        self._records = metrics.STREAM_RECORDS.labels(spec.group)
        self._batches = metrics.STREAM_BATCHES.labels(spec.group)
        self._seconds = metrics.STREAM_BATCH_SECONDS.labels(spec.group)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then fetch nothing more, let the batch in hand
        finish within the grace, commit what was handled and leave the group.

        A :class:`~aigc_hub.core.failpoints.Crash` ends the run at once without committing,
        as a killed process would; an error of the consumer itself (fetch) propagates.
        """
        consumer = self.broker.consumer(self.group, list(self.spec.topics))
        stopping = asyncio.create_task(_until(stop), name=f"{self.group}-stop")
        try:
            while not stop.is_set():
                batch = await self._collect(consumer, stop)
                if not batch and stop.is_set():
                    break  # no tick on the way out: there is nothing to finish
                if not await self._hand_over(batch, stop, stopping):
                    break  # stopped before the handler finished: the batch stays uncommitted
                self._note_handled(batch)
                await self._commit(consumer)
            await self._commit(consumer)  # what a failed commit left, one last time
        finally:
            stopping.cancel()
            await consumer.close()

    async def _collect(self, consumer: Consumer, stop: asyncio.Event) -> list[Record]:
        """A batch: until ``max_records`` are in hand, or ``max_wait_s`` after the first one
        arrived (or after the start, when none did: then the batch is empty, a tick)."""
        loop = asyncio.get_running_loop()
        batch: list[Record] = []
        deadline = loop.time() + self.spec.max_wait_s
        while not stop.is_set():
            room = self.spec.max_records - len(batch)
            remaining = deadline - loop.time()
            if room <= 0 or remaining <= 0:
                break
            got = await consumer.fetch(room, timeout=min(remaining, FETCH_SLICE_S))
            if got:
                if not batch:
                    deadline = loop.time() + self.spec.max_wait_s  # the first record's wait
                batch += got
        return batch

    async def _hand_over(
        self, batch: list[Record], stop: asyncio.Event, stopping: asyncio.Future[None]
    ) -> bool:
        """Call the handler until it returns for ``batch`` (True), backing off between
        failures; False when stopped first (the batch is then left uncommitted)."""
        tries = 0
        while True:
            error = await self._call(batch, stopping)
            if error is None:
                return True
            if isinstance(error, _Abandoned):
                return False
            tries += 1
            delay = self.backoff.delay_for(tries)
            metrics.STREAM_FAILURES.labels(self.group, type(error).__name__).inc()
            log.error(
                "stream group %s: handler failed on %d records (try %d); the same records "
                "again in %.1f s: %s",
                self.group,
                len(batch),
                tries,
                delay,
                error,
                exc_info=error,
            )
            if stop.is_set() or await self._stopped_within(delay, stopping):
                return False

    async def _call(
        self, batch: Sequence[Record], stopping: asyncio.Future[None]
    ) -> Exception | None:
        """One handler call: None when it returned, its error when it raised, ``_Abandoned``
        when ``stop`` came and the grace ran out first (the call is then cancelled)."""
        if batch:
            self._records.inc(len(batch))
            self._batches.inc()
        started = time.perf_counter()
        task = asyncio.ensure_future(self.spec.handler(batch))
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                # Stopping: the batch in hand may still finish, within the grace.
                await asyncio.wait({task}, timeout=self.grace_s)
            if not task.done():
                log.warning(
                    "stream group %s: handler still busy with %d records %.0f s after stop; "
                    "abandoned uncommitted (the next member reads them again)",
                    self.group,
                    len(batch),
                    self.grace_s,
                )
                return _Abandoned()
            error = task.exception()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._seconds.observe(time.perf_counter() - started)
        if error is not None and not isinstance(error, Exception):
            raise error  # a Crash (or a KeyboardInterrupt): not the handler's failure to retry
        return error

    async def _stopped_within(self, delay: float, stopping: asyncio.Future[None]) -> bool:
        """Wait ``delay`` s of the clock, ending early (True) when ``stop`` is set."""
        sleeper = asyncio.ensure_future(self.clock.sleep(delay))
        try:
            await asyncio.wait({sleeper, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
        return stopping.done()

    def _note_handled(self, batch: Sequence[Record]) -> None:
        """Add the batch's next offsets per partition to what the next commit carries."""
        # One pass, the last record of a partition winning: a partition's records come in
        # offset order, so this is the highest without a comparison per record.
        last = {(r.topic, r.partition): r.offset for r in batch}
        for (topic, partition), offset in last.items():
            tp = TopicPartition(topic, partition)
            self._pending[tp] = max(self._pending.get(tp, 0), offset + 1)

    async def _commit(self, consumer: Consumer) -> None:
        """Commit what was handled; on failure keep it for the next commit (offsets only
        move forward, so a later commit covers an earlier one)."""
        if not self._pending:
            return
        offsets = dict(self._pending)
        try:
            self.failpoints.hit("stream.before_commit")
            await consumer.commit(offsets)
        except Exception:
            log.exception(
                "stream group %s: offset commit failed; kept for the next commit", self.group
            )
            return
        self._pending.clear()


async def _until(stop: asyncio.Event) -> None:
    """Return once ``stop`` is set (a task the handler call and the back-off race with)."""
    await stop.wait()


class _Abandoned(Exception):
    """The handler did not finish within the grace after stop (a marker, never raised)."""
