"""A consumer group's runtime: per-key order, bounded concurrency across keys, safe offsets.

Records are fetched in batches and queued per key; each key has one lane that handles its
records strictly in order, a bounded pool of worker tasks serves the lanes (see
:mod:`~aigc_hub.runtime.lanes`), and at most ``concurrency`` handlers run at once. A
partition's offset is committed only up to the highest contiguous finished record, so a
crash redelivers exactly what was not finished (the inbox absorbs what was). A key with a
parked record holds its later records behind it; other keys are never held up.

A batch group (``spec.batching``) runs each record in a lane of its own and hands them to
its handler through a :class:`~aigc_hub.runtime.batching.Batcher`: up to ``concurrency``
batch calls at once, per-key order not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

import pydantic
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import HubError, PermanentError
from aigc_hub.core.failpoints import NONE, Crash, Failpoints
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.core.retry import DELAYED, IN_PROCESS, RetryPolicy
from aigc_hub.messaging.base import Broker, Consumer, Record, TopicPartition
from aigc_hub.observability import metrics
from aigc_hub.pipeline import HandlerSpec
from aigc_hub.reliability import inbox
from aigc_hub.reliability.dlq import DeadLetterStore
from aigc_hub.reliability.redelivery import Parked, ParkRequest, RedeliveryStore
from aigc_hub.runtime.batching import Batcher
from aigc_hub.runtime.committer import Always, CommitStatus, Committer, Outcome
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.decoding import RecordDecoder
from aigc_hub.runtime.failures import FailureRouter
from aigc_hub.runtime.lanes import Lanes
from aigc_hub.runtime.middleware import Middleware, compose
from aigc_hub.runtime.middleware.dead_letter import DeadLetter
from aigc_hub.runtime.middleware.metrics import Metrics
from aigc_hub.runtime.middleware.retry import RetryInProcess
from aigc_hub.runtime.middleware.timeout import Timeout
from aigc_hub.runtime.middleware.tracing import Tracing
from aigc_hub.runtime.offsets import OffsetTracker
from aigc_hub.store.engine import reader

log = logging.getLogger(__name__)

#: Worker tasks serving a group's lanes (unless more handler slots are configured). Waiting
#: for the group commit holds a worker but no slot, so the pool is two group commits' worth
#: (the committer's default batch is 256): one batch commits while the next one fills.
LANE_WORKERS = 512

#: How often a paused group asks its pause check again.
PAUSE_RECHECK_S = 0.5

#: How often due redeliveries are looked for when nothing wakes the timer (seed 002: 5 s).
TIMER_SCAN_S = 5.0


class PayloadDecoder(Protocol):
    """Validates an envelope's payload against its registered schema."""

    def decode(self, envelope: Envelope) -> pydantic.BaseModel:
        """The payload model; raises SchemaError (a PermanentError) when it does not fit."""
        ...


@dataclass
class RuntimeDeps:
    """Collaborators shared by every consumer group of a hub."""

    engine: AsyncEngine
    broker: Broker
    registry: PayloadDecoder
    committer: Committer
    dlq: DeadLetterStore
    redeliveries: RedeliveryStore
    clock: Clock
    in_process: RetryPolicy = IN_PROCESS
    delayed: RetryPolicy = DELAYED
    failpoints: Failpoints = NONE
    #: Record bytes → envelope for the wire formats pipelines declared; None: JSON only.
    decoder: RecordDecoder | None = None


@dataclass
class _Item:
    record: Record
    envelope: Envelope | None
    decode_error: HubError | None = None
    duplicate: bool = False
    redelivery: Parked | None = None


class ConsumerGroupRuntime:
    """Runs one :class:`HandlerSpec` as a member of its consumer group until stopped."""

    def __init__(
        self,
        spec: HandlerSpec,
        deps: RuntimeDeps,
        *,
        concurrency: int | None = None,
        max_in_flight: int = 2000,
        fetch_batch: int = 500,
        lane_workers: int | None = None,
        extra_middleware: tuple[Middleware, ...] = (),
    ) -> None:
        self.spec = spec
        self.deps = deps
        self.group = spec.group
        self.concurrency = concurrency or spec.concurrency
        self.max_in_flight = max_in_flight
        self.fetch_batch = fetch_batch
        self.parked: set[str] = set()
        self.tracker = OffsetTracker()
        self.lanes: Lanes[_Item] = Lanes(
            self._serve,
            workers=lane_workers or max(self.concurrency, LANE_WORKERS),
            name=f"{self.group}-lane",
        )
        self._slots = asyncio.Semaphore(self.concurrency)
        # A batch group's records meet in the batcher, whose calls take the slots instead.
        self._batcher = (
            None
            if spec.batching is None
            else Batcher(spec.batching, concurrency=self.concurrency, group=self.group)
        )
        self._room = asyncio.Event()
        self._room.set()
        self._progress = asyncio.Event()
        self._timer_wake = asyncio.Event()
        self._in_timer: set[int] = set()
        # Heads this member settled: seq -> (attempts of the version tried, timer scan under
        # way then). A scan that began before that commit may still read the old version.
        self._settled_heads: dict[int, tuple[int, int]] = {}
        self._timer_scans = 0
        self._crash: BaseException | None = None
        self._consumer: Consumer | None = None
        self._pause_reason: str | None = None
        self.finished = 0
        self._consumed = metrics.Children(metrics.CONSUMED)
        self.failures = FailureRouter(
            deps.engine,
            deps.dlq,
            deps.redeliveries,
            deps.clock,
            deps.delayed,
            on_parked=self._mark_parked,
            on_released=self._mark_released,
            on_dead_letter=spec.on_dead_letter,
        )
        # Built once per group; a layer that would do nothing for it is left out, not skipped
        # per event.
        chain: list[Middleware] = [
            Metrics(),
            Tracing(),
            DeadLetter(self.failures),
            RetryInProcess(deps.in_process),
            *extra_middleware,
        ]
        if spec.timeout is not None:
            chain.append(Timeout(spec.timeout))
        self._chain = compose(chain, self._terminal)

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, shutdown_deadline: float = 10.0) -> None:
        """Consume until ``stop`` is set, then finish in-flight work within the deadline.

        A :class:`Crash` from a failpoint ends the run at once, committing nothing more,
        as a killed process would.
        """
        self.parked = await self.deps.redeliveries.parked_keys(self.group)
        metrics.PARKED_KEYS.labels(self.group).set(len(self.parked))
        consumer = self.deps.broker.consumer(
            self.group, list(self.spec.topics), on_revoke=self._on_revoke
        )
        self._consumer = consumer
        helpers = [
            asyncio.create_task(self._commit_loop(consumer, stop), name=f"{self.group}-commits"),
            asyncio.create_task(self._timer_loop(stop), name=f"{self.group}-timers"),
        ]
        try:
            await self._fetch_loop(consumer, stop)
            if self._crash is None:
                await self._finish_lanes(shutdown_deadline)
        finally:
            crashed = self._crash is not None
            if self._batcher is not None:
                await self._batcher.close()
            tasks = [*helpers, *self.lanes.tasks()]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Crash, Exception):
                    await task
            if not crashed:
                with contextlib.suppress(Exception):
                    await self._commit_now(consumer)
            # A crashed member commits nothing more; leaving the group is what the broker
            # would do to a dead member after its session timeout.
            await consumer.close()
        if self._crash is not None:
            raise self._crash

    async def _fetch_loop(self, consumer: Consumer, stop: asyncio.Event) -> None:
        while not stop.is_set() and self._crash is None:
            if self.spec.pause is not None and await self._paused(stop):
                continue
            room = self.max_in_flight - self.tracker.in_flight()
            if room <= 0:
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), 0.1)
                continue
            records = await consumer.fetch(min(room, self.fetch_batch), timeout=0.1)
            if records:
                await self._dispatch(records)

    async def _paused(self, stop: asyncio.Event) -> bool:
        """True (after a short wait) while the group's pause check gives a reason. Records
        stay in the broker: a Kafka member keeps polling in its own thread and pauses its
        partitions once its buffer is full, so the group keeps its membership."""
        assert self.spec.pause is not None
        reason = self.spec.pause()
        if reason is None:
            if self._pause_reason is not None:
                log.info("consumer group %s resumes", self.group)
                metrics.CONSUMER_PAUSED.labels(self.group).set(0)
                self._pause_reason = None
            return False
        if reason != self._pause_reason:
            log.warning("consumer group %s paused: %s", self.group, reason)
            metrics.CONSUMER_PAUSED.labels(self.group).set(1)
            self._pause_reason = reason
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PAUSE_RECHECK_S)
        return True

    async def _finish_lanes(self, deadline: float) -> None:
        if not await self.lanes.join(deadline):
            self.lanes.cancel()

    # -- dispatch ----------------------------------------------------------------------------

    async def _dispatch(self, records: list[Record]) -> None:
        items: list[_Item] = []
        for rec in records:
            try:
                items.append(_Item(rec, await self._envelope(rec.topic, rec.value)))
            except HubError as exc:
                items.append(_Item(rec, None, decode_error=exc))
        candidates = [i.envelope.event_id for i in items if i.envelope is not None]
        if candidates:
            async with reader(self.deps.engine) as conn:
                seen = await inbox.seen(conn, self.group, candidates)
            for item in items:
                if item.envelope is not None and item.envelope.event_id in seen:
                    item.duplicate = True
        for item in items:
            self.tracker.add(item.record.tp, item.record.offset)
            self._enqueue(item)

    def _lane_key(self, item: _Item) -> str:
        rec = item.record
        if self._batcher is None:  # one lane per key: its records in order
            if item.envelope is not None:
                return item.envelope.key
            if rec.key is not None:
                return rec.key
        # A lane of its own: a batch group's records run side by side (a batch gathers
        # across keys), and an undecodable record without a key waits behind nothing.
        return f"\x00{rec.topic}/{rec.partition}/{rec.offset}"

    def _enqueue(self, item: _Item) -> None:
        self.lanes.put(self._lane_key(item), item)

    async def _serve(self, item: _Item) -> None:
        try:
            outcome = await self._handle(item)
        except Crash as crash:
            # Die as a killed process would: this record and every queued one stay unfinished.
            self._crash = crash
            self.lanes.halt()
            return
        self._finish(item, outcome)

    def _finish(self, item: _Item, outcome: HandlingOutcome) -> None:
        self._consumed(self.group, item.record.topic, outcome).inc()
        self.finished += 1
        if item.redelivery is not None:
            head = item.redelivery
            self._in_timer.discard(head.seq)
            self._settled_heads[head.seq] = (head.attempts, self._timer_scans)
        else:
            self.tracker.done(item.record.tp, item.record.offset)
            self._room.set()
        self._progress.set()

    # -- handling one record -----------------------------------------------------------------

    async def _handle(self, item: _Item) -> HandlingOutcome:
        rec, env = item.record, item.envelope
        ctx = HandlerContext(
            consumer=self.group,
            pipeline=self.spec.pipeline,
            record=rec,
            engine=self.deps.engine,
            clock=self.deps.clock,
            redelivery=item.redelivery,
            on_checkpoint=self.deps.committer.on_emitted,
        )
        if env is None:
            assert item.decode_error is not None
            return await self.failures.give_up(ctx, None, item.decode_error)
        if item.redelivery is None and env.key in self.parked:
            await self._park_behind(item, env)
            return HandlingOutcome.PARKED_BEHIND
        if item.duplicate and item.redelivery is None:
            metrics.INBOX_DUPLICATES.labels(self.group).inc()
            return HandlingOutcome.DUPLICATE
        try:
            ctx.payload = self.deps.registry.decode(env)
        except PermanentError as exc:
            return await self.failures.give_up(ctx, env, exc)
        await self._chain(env, ctx)
        assert ctx.outcome is not None  # set by the terminal's commit or by the give-up
        return ctx.outcome

    async def _terminal(self, envelope: Envelope, ctx: HandlerContext) -> list[Envelope]:
        ctx.writes.clear()
        # The slot bounds handler work only; waiting for the group commit holds no slot,
        # so many keys' finished events can share one commit.
        if self._batcher is not None:
            emitted = await self._batcher.handle(envelope, ctx)
        else:
            async with self._slots:
                emitted = await self.spec.handler(envelope, ctx)
        head = ctx.redelivery
        always = () if head is None else (self._head_finisher(head),)
        changed = bool(ctx.writes) or bool(emitted) or ctx.checkpoints > 0
        code = HandlingOutcome.APPLIED if changed else HandlingOutcome.NO_OP
        status = await self.deps.committer.submit(
            Outcome(
                self.group,
                envelope.event_id,
                list(ctx.writes),
                list(emitted),
                code,
                always,
            )
        )
        self.deps.failpoints.hit("consumer.after_commit")
        if status is CommitStatus.DUPLICATE:
            metrics.INBOX_DUPLICATES.labels(self.group).inc()
            ctx.outcome = HandlingOutcome.DUPLICATE
        else:
            ctx.outcome = code
        return list(emitted)

    def _head_finisher(self, head: Parked) -> Always:
        """Bookkeeping for a redelivered head, run in its commit (duplicate or not)."""

        async def finish(conn: AsyncConnection) -> None:
            remains = await self.deps.redeliveries.finish_head(conn, head, self.deps.clock.now_ms())
            if remains is None:
                return  # a stale copy: the run that settled the head did the bookkeeping
            if not remains:
                self._mark_released(head.key)
            else:
                self._timer_wake.set()

        return finish

    async def _park_behind(self, item: _Item, env: Envelope) -> None:
        rec = item.record
        async with self.deps.engine.begin() as conn:
            await self.deps.redeliveries.park(
                conn,
                ParkRequest(
                    consumer=self.group,
                    key=env.key,
                    event_id=env.event_id,
                    topic=rec.topic,
                    partition=rec.partition,
                    offset=rec.offset,
                    value=rec.value,
                    headers=rec.headers,
                ),
            )

    def _mark_parked(self, key: str) -> None:
        self.parked.add(key)
        metrics.PARKED_KEYS.labels(self.group).set(len(self.parked))
        self._timer_wake.set()

    def _mark_released(self, key: str) -> None:
        self.parked.discard(key)
        metrics.PARKED_KEYS.labels(self.group).set(len(self.parked))

    # -- delayed redelivery ------------------------------------------------------------------

    async def _timer_loop(self, stop: asyncio.Event) -> None:
        clock = self.deps.clock
        while not stop.is_set():
            self._timer_wake.clear()
            now = clock.now_ms()
            assigned = self._consumer.assignment() if self._consumer else set()
            self._timer_scans += 1
            scan = self._timer_scans
            for row in await self.deps.redeliveries.due(self.group, now):
                if row.seq in self._in_timer or self._settled(row):
                    continue
                if assigned and TopicPartition(row.topic, row.partition) not in assigned:
                    continue  # another member owns this key's partition now
                self._in_timer.add(row.seq)
                self._enqueue(await self._item_from_parked(row))
            # Settled before this scan began: every later read sees it.
            self._settled_heads = {
                seq: settled for seq, settled in self._settled_heads.items() if settled[1] >= scan
            }
            nxt = await self.deps.redeliveries.next_due_at(self.group)
            # Due rows already in flight (or owned elsewhere) wake us when they finish.
            wait_s = (
                TIMER_SCAN_S if nxt is None or nxt <= now else min(TIMER_SCAN_S, (nxt - now) / 1000)
            )
            sleeper = asyncio.ensure_future(clock.sleep(wait_s))
            waker = asyncio.ensure_future(self._timer_wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({sleeper, waker, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for f in (sleeper, waker, stopper):
                    f.cancel()

    def _settled(self, row: Parked) -> bool:
        """Whether ``row`` is a version of a head this member already tried and settled."""
        settled = self._settled_heads.get(row.seq)
        return settled is not None and settled[0] == row.attempts

    async def _envelope(self, topic: str, value: bytes) -> Envelope:
        """The envelope a record holds (HubError when none): JSON, or a declared format."""
        if self.deps.decoder is None:
            return Envelope.from_bytes(value)
        return await self.deps.decoder.envelope(topic, value)

    async def _item_from_parked(self, row: Parked) -> _Item:
        record = Record(row.topic, row.partition, row.offset, row.key, row.value, row.headers, 0)
        try:
            decoded = await self._envelope(row.topic, row.value)
            env: Envelope | None = decoded.with_attempt(row.attempts)
        except HubError:
            env = None
        return _Item(record, env, redelivery=row)

    # -- offsets -----------------------------------------------------------------------------

    async def _commit_loop(self, consumer: Consumer, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._progress.wait()
            self._progress.clear()
            try:
                await self._commit_now(consumer)
            except Exception:
                # The offsets stay dirty: the next round (or shutdown) commits them.
                log.exception("offset commit of %s failed; retrying", self.group)
                self._progress.set()
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.01)  # coalesce: at most ~100 offset commits per second

    async def _commit_now(self, consumer: Consumer) -> None:
        if self._crash is not None:
            return
        offsets = self.tracker.take_committable()
        if offsets:
            try:
                await consumer.commit(offsets)
            except Exception:
                self.tracker.retry_later(offsets)
                raise

    async def _on_revoke(self, tps: set[TopicPartition]) -> None:
        if self._consumer is not None and self._crash is None:
            offsets = self.tracker.take_committable(only=tps)
            if offsets:
                with contextlib.suppress(Exception):
                    await self._consumer.commit(offsets)
        self.tracker.forget(tps)
