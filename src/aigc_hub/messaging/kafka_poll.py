"""The poll thread of a Kafka group member: the only caller of its librdkafka ``Consumer``.

confluent-kafka's ``Consumer`` admits one caller at a time (a second thread blocks until the
first one's ``poll`` returns), so the thread does everything: it polls in short rounds
(``poll_interval``) into the member's buffer and, between rounds, runs the commands the
event loop queues (commits). It polls whatever the application does, so a slow handler
cannot exceed ``max.poll.interval.ms``; when the buffer holds ``max_buffered`` records the
thread pauses the partitions until it is half empty.

Rebalance callbacks run on this thread inside ``consume`` (or ``close``). On a revoke the
thread drops the buffered records of those partitions, runs the application's async
``on_revoke`` on the event loop and, while waiting for it, keeps running queued commands,
so the callback can commit what is done before the partitions go.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from aigc_hub.messaging.base import RebalanceCallback, Record, TopicPartition

log = logging.getLogger(__name__)

#: The member lost its partitions (or the group moved on): such a commit is dropped.
_GONE = {
    ck.KafkaError.ILLEGAL_GENERATION,
    ck.KafkaError.UNKNOWN_MEMBER_ID,
    ck.KafkaError.FENCED_INSTANCE_ID,
    ck.KafkaError._ASSIGNMENT_LOST,
}
#: Transient: the commit is tried again after the next poll round, until ``request_timeout``.
_AGAIN = {
    ck.KafkaError.REBALANCE_IN_PROGRESS,
    ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
    ck.KafkaError.NOT_COORDINATOR,
    ck.KafkaError.REQUEST_TIMED_OUT,
    ck.KafkaError._WAIT_COORD,
    ck.KafkaError._TIMED_OUT,
    ck.KafkaError._TRANSPORT,
}

#: A command for the poll thread: True when done, False to run it again after the next round.
Command = Callable[[ck.Consumer], bool]
_WAKE = object()


@dataclass
class MemberState:
    """What a member's poll thread and event loop share; hold ``lock`` to touch it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    buffer: dict[TopicPartition, deque[Record]] = field(default_factory=dict)
    buffered: int = 0
    #: Partitions the application was told it holds (changed as its callbacks finish).
    owned: set[TopicPartition] = field(default_factory=set)
    #: Partitions the application paused.
    paused: set[TopicPartition] = field(default_factory=set)
    #: False once the member has left: commands are no longer run.
    accepting: bool = True
    rotation: int = 0

    def take(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` buffered records, round-robin over unpaused partitions."""
        with self.lock:
            tps = sorted(tp for tp, q in self.buffer.items() if q and tp not in self.paused)
            if not tps:
                return []
            self.rotation = (self.rotation + 1) % len(tps)
            out: list[Record] = []
            for tp in tps[self.rotation :] + tps[: self.rotation]:
                q = self.buffer[tp]
                while q and len(out) < max_records:
                    out.append(q.popleft())
                if len(out) >= max_records:
                    break
            self.buffered -= len(out)
            return out

    def drop(self, tps: Iterable[TopicPartition]) -> None:
        """Forget the buffered records of ``tps``."""
        with self.lock:
            for tp in tps:
                self.buffered -= len(self.buffer.pop(tp, ()))


def kafka_tps(tps: Iterable[TopicPartition]) -> list[ck.TopicPartition]:
    """librdkafka topic-partitions of hub ones, sorted."""
    return [ck.TopicPartition(tp.topic, tp.partition) for tp in sorted(tps)]


def _hub_tps(tps: Iterable[ck.TopicPartition]) -> set[TopicPartition]:
    return {TopicPartition(tp.topic, tp.partition) for tp in tps}


@dataclass(frozen=True)
class PollSettings:
    """How a poll thread paces itself."""

    poll_interval: float
    max_buffered: int
    request_timeout: float
    callback_timeout: float


class Poller:
    """The thread owning one member's ``Consumer``; start it once, then ``stop`` it once."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        topics: tuple[str, ...],
        state: MemberState,
        settings: PollSettings,
        *,
        loop: asyncio.AbstractEventLoop,
        arrived: asyncio.Event,
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
        to_record: Callable[[ck.Message], Record],
    ) -> None:
        self.group = str(conf["group.id"])
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        #: What stopped the thread, when it was not ``stop``.
        self.failure: BaseException | None = None
        self._conf = dict(conf)
        self._topics = topics
        self._state = state
        self._settings = settings
        self._loop = loop
        self._arrived = arrived
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._to_record = to_record
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopping = threading.Event()
        # the thread's own
        self._floor: dict[TopicPartition, int] = {}
        self._paused_now: set[TopicPartition] = set()
        self._throttled = False
        self._retry: list[tuple[Command, concurrent.futures.Future[None], float]] = []
        self._thread = threading.Thread(target=self._run, name=f"kafka-{self.group}", daemon=True)
        self._thread.start()

    async def call(self, command: Command) -> None:
        """Run ``command`` on the thread and wait; a no-op once the member has left."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._state.lock:
            if not self._state.accepting:
                return
            self._commands.put((command, future))
        await asyncio.wrap_future(future)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> Command:
        """A command committing ``offsets`` of owned partitions, never below their floor."""
        return lambda consumer: self._commit_now(consumer, offsets)

    async def stop(self) -> None:
        """Close the ``Consumer`` (its revoke callbacks run on the loop meanwhile) and wait."""
        self._stopping.set()
        await asyncio.wrap_future(self.finished)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        consumer: ck.Consumer | None = None
        try:
            consumer = ck.Consumer(self._conf)
            consumer.subscribe(
                list(self._topics),
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._lost,
            )
            while not self._stopping.is_set():
                self._serve(consumer)
                self._apply_pauses(consumer)
                room = max(1, min(500, self._settings.max_buffered - self._state.buffered))
                self._buffer(consumer.consume(room, self._settings.poll_interval))
                self._retry_commands(consumer)
        except BaseException as exc:
            log.exception("consumer of group %s stopped", self.group)
            self.failure = exc
        finally:
            if consumer is not None:
                try:
                    self._serve(consumer)
                    consumer.close()  # runs on_revoke, then leaves the group
                except Exception:
                    log.exception("closing the consumer of group %s failed", self.group)
            with self._state.lock:
                self._state.accepting = False
            self._drain_commands()
            self.finished.set_result(None)
            self._notify()

    def _notify(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._arrived.set)

    def _buffer(self, messages: list[ck.Message]) -> None:
        records: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                records.append(self._to_record(msg))
            elif err.fatal():
                raise ck.KafkaException(err)
            else:
                log.warning("group %s: %s", self.group, err.str())
        if not records:
            return
        state = self._state
        with state.lock:
            for rec in records:
                if rec.tp in state.owned:  # a revoke inside this round drops the rest
                    state.buffer.setdefault(rec.tp, deque()).append(rec)
                    state.buffered += 1
                    self._floor.setdefault(rec.tp, rec.offset)
        self._notify()

    def _apply_pauses(self, consumer: ck.Consumer) -> None:
        state, limit = self._state, self._settings.max_buffered
        with state.lock:
            buffered, owned, wanted = state.buffered, set(state.owned), state.paused & state.owned
        if buffered >= limit:
            self._throttled = True
        elif buffered <= limit // 2:
            self._throttled = False
        if self._throttled:
            wanted = owned
        pause, resume = wanted - self._paused_now, (self._paused_now - wanted) & owned
        try:
            if pause:
                consumer.pause(kafka_tps(pause))
            if resume:
                consumer.resume(kafka_tps(resume))
        except ck.KafkaException:
            log.exception("group %s: pause/resume failed", self.group)
            return
        self._paused_now = wanted

    # -- commands ----------------------------------------------------------------------------

    def _serve(self, consumer: ck.Consumer, wait: float = 0.0) -> None:
        """Run queued commands; with ``wait``, block up to that long for the first one."""
        while True:
            try:
                item = self._commands.get(timeout=wait) if wait else self._commands.get_nowait()
            except queue.Empty:
                return
            wait = 0.0
            if item is _WAKE:
                continue  # a callback finished: stop waiting, run what else is queued
            command, future = item
            deadline = time.monotonic() + self._settings.request_timeout
            self._execute(consumer, command, future, deadline)

    def _execute(
        self,
        consumer: ck.Consumer,
        command: Command,
        future: concurrent.futures.Future[None],
        deadline: float,
    ) -> None:
        try:
            if command(consumer):
                future.set_result(None)
            elif time.monotonic() < deadline:
                self._retry.append((command, future, deadline))
            else:
                future.set_exception(TimeoutError("Kafka did not accept the commit in time"))
        except Exception as exc:
            future.set_exception(exc)

    def _retry_commands(self, consumer: ck.Consumer) -> None:
        retry, self._retry = self._retry, []
        for command, future, deadline in retry:
            self._execute(consumer, command, future, deadline)

    def _drain_commands(self) -> None:
        for _, future, _ in self._retry:
            future.set_result(None)  # left the group: these partitions are not ours any more
        self._retry.clear()
        while True:
            try:
                item = self._commands.get_nowait()
            except queue.Empty:
                return
            if item is not _WAKE:
                item[1].set_result(None)

    def _commit_now(self, consumer: ck.Consumer, offsets: Mapping[TopicPartition, int]) -> bool:
        with self._state.lock:
            wanted = {tp: off for tp, off in offsets.items() if tp in self._state.owned}
        # The floor is what this member committed or first read (the group's offset then).
        # No OffsetFetch to learn it: librdkafka holds that back during a rebalance, which
        # is exactly when on_revoke commits.
        todo = {tp: off for tp, off in wanted.items() if off > self._floor.get(tp, -1)}
        if not todo:
            return True
        request = [ck.TopicPartition(tp.topic, tp.partition, off) for tp, off in todo.items()]
        try:
            answer = consumer.commit(offsets=request, asynchronous=False) or []
        except ck.KafkaException as exc:
            code = exc.args[0].code()
            if code in _GONE:
                log.info("group %s: commit dropped, partitions moved: %s", self.group, exc)
                return True
            if code in _AGAIN:
                return False
            raise
        for ktp in answer:
            if ktp.error is not None:
                raise ck.KafkaException(ktp.error)
        self._floor.update(todo)
        return True

    # -- rebalance callbacks (inside consume or close) -----------------------------------------

    def _assigned(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        tps = _hub_tps(partitions)
        self._on_loop(consumer, self._announce(tps, self._on_assign, assigned=True))
        with self._state.lock:
            self._state.owned |= tps

    def _revoked(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        tps = _hub_tps(partitions)
        self._state.drop(tps)
        self._on_loop(consumer, self._announce(tps, self._on_revoke, assigned=False))
        self._forget(tps)

    def _lost(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        tps = _hub_tps(partitions)
        log.warning("group %s: partitions lost: %s", self.group, sorted(tps))
        with self._state.lock:
            self._state.owned -= tps  # already someone else's: commit nothing of them
        self._state.drop(tps)
        self._on_loop(consumer, self._announce(tps, self._on_revoke, assigned=False))
        self._forget(tps)

    async def _announce(
        self, tps: set[TopicPartition], callback: RebalanceCallback | None, *, assigned: bool
    ) -> None:
        # Runs on the loop, so the assignment changes in the same step as the callback
        # finishes: an assignment read on the loop always matches what callbacks said.
        try:
            if callback is not None:
                await callback(set(tps))
        except Exception:
            log.exception("group %s: rebalance callback failed", self.group)
        finally:
            with self._state.lock:
                if assigned:
                    self._state.owned |= tps
                else:
                    self._state.owned -= tps

    def _on_loop(self, consumer: ck.Consumer, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` on the event loop, serving commands (its commits) until it ends."""
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop is closed: the caller updates the state itself
            coro.close()
            return
        future.add_done_callback(lambda _: self._commands.put(_WAKE))
        deadline = time.monotonic() + self._settings.callback_timeout
        while not future.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("group %s: rebalance callback still running; going on", self.group)
                future.cancel()
                return
            self._serve(consumer, wait=min(remaining, 0.05 if self._retry else 0.5))
            self._retry_commands(consumer)

    def _forget(self, tps: set[TopicPartition]) -> None:
        with self._state.lock:
            self._state.owned -= tps
            self._state.paused -= tps
        for tp in tps:
            self._floor.pop(tp, None)  # a later owner may commit more
            self._paused_now.discard(tp)
