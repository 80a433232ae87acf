"""A group-less Kafka reader: every partition of some topics, from their high watermark.

It ``assign``s partitions at explicit offsets (read with ``get_watermark_offsets`` before
it reports ready) and never subscribes or commits, so it joins no group and leaves no
committed offsets; its ``group.id`` is unique and only there because librdkafka wants one.
As in ``kafka_poll``, one daemon thread alone calls the librdkafka ``Consumer``, filling a
buffer that ``fetch`` drains on the event loop; a full buffer pauses the partitions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka as ck

from aigc_hub.messaging.base import Record, TopicPartition

log = logging.getLogger(__name__)


class KafkaTail:
    """Reads new records of every partition of ``topics``; fetch from one task at a time."""

    def __init__(
        self,
        conf: Mapping[str, Any],
        topics: tuple[str, ...],
        *,
        loop: asyncio.AbstractEventLoop,
        to_record: Callable[[ck.Message], Record],
        poll_interval: float,
        max_buffered: int,
        request_timeout: float,
    ) -> None:
        self.topics = topics
        #: Resolves to the assigned partitions once positions are fixed, or fails.
        self.ready: concurrent.futures.Future[set[TopicPartition]] = concurrent.futures.Future()
        self._conf = dict(conf)
        self._loop = loop
        self._to_record = to_record
        self._poll_interval = poll_interval
        self._max_buffered = max_buffered
        self._request_timeout = request_timeout
        self._lock = threading.Lock()
        self._buffer: deque[Record] = deque()
        self._assigned: set[TopicPartition] = set()
        self._failure: BaseException | None = None
        self._arrived = asyncio.Event()
        self._stopping = threading.Event()
        self._finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kafka-tail", daemon=True)
        self._thread.start()

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` buffered records in arrival order; [] on timeout or close."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._failure is not None:
                raise self._failure
            self._arrived.clear()
            with self._lock:
                count = min(max_records, len(self._buffer))
                records = [self._buffer.popleft() for _ in range(count)]
            remaining = deadline - loop.time()
            if records or remaining <= 0 or self._closed:
                return records
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Nothing to commit: a tail belongs to no group."""

    def assignment(self) -> set[TopicPartition]:
        """Every partition this reader follows."""
        with self._lock:
            return set(self._assigned)

    async def close(self) -> None:
        """Stop the thread and close the librdkafka consumer (no group to leave)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._arrived.set()
        await asyncio.wrap_future(self._finished)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        consumer: ck.Consumer | None = None
        try:
            consumer = ck.Consumer(self._conf)
            self._assign_at_end(consumer)
            paused = False
            while not self._stopping.is_set():
                with self._lock:
                    buffered = len(self._buffer)
                if not paused and buffered >= self._max_buffered:
                    consumer.pause(_kafka_tps(self._assigned))
                    paused = True
                elif paused and buffered <= self._max_buffered // 2:
                    consumer.resume(_kafka_tps(self._assigned))
                    paused = False
                room = max(1, min(500, self._max_buffered - buffered))
                self._keep(consumer.consume(room, self._poll_interval))
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            else:
                log.exception("Kafka tail of %s stopped", self.topics)
                self._failure = exc
        finally:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    consumer.close()
            self._finished.set_result(None)
            self._notify()

    def _assign_at_end(self, consumer: ck.Consumer) -> None:
        metadata = consumer.list_topics(timeout=self._request_timeout)
        starts = []
        for name in self.topics:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                continue  # missing topics are not read (the contract)
            for partition in sorted(topic.partitions):
                tp = ck.TopicPartition(name, partition)
                _, high = consumer.get_watermark_offsets(
                    tp, timeout=self._request_timeout, cached=False
                )
                starts.append(ck.TopicPartition(name, partition, high))
        consumer.assign(starts)
        assigned = {TopicPartition(tp.topic, tp.partition) for tp in starts}
        with self._lock:
            self._assigned = assigned
        self.ready.set_result(assigned)

    def _keep(self, messages: list[ck.Message]) -> None:
        records: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                records.append(self._to_record(msg))
            elif err.fatal():
                raise ck.KafkaException(err)
            else:
                log.warning("Kafka tail: %s", err.str())
        if records:
            with self._lock:
                self._buffer.extend(records)
            self._notify()

    def _notify(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._arrived.set)


def _kafka_tps(tps: set[TopicPartition]) -> list[ck.TopicPartition]:
    return [ck.TopicPartition(tp.topic, tp.partition) for tp in sorted(tps)]
