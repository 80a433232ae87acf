"""Members of Kafka consumer groups: fetch from a buffer, commit through the poll thread.

Each member has a poll thread (``kafka_poll``) that alone calls its librdkafka ``Consumer``
and fills a buffer; :meth:`KafkaConsumer.fetch` drains the buffer on the event loop, and
``commit`` asks the thread to commit, synchronously. Partitions are assigned
cooperative-sticky by default: a rebalance revokes only the partitions that move. On a
revoke the application's ``on_revoke`` runs (and may commit) before the partitions go, and
buffered records of those partitions are dropped. A commit covers only partitions assigned
at that moment and never moves an offset backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import confluent_kafka as ck

from aigc_hub.messaging.base import RebalanceCallback, Record, TopicPartition
from aigc_hub.messaging.kafka_poll import MemberState, Poller, PollSettings


def consumer_config(
    *,
    bootstrap: str,
    client_id: str,
    group: str,
    overrides: Mapping[str, Any],
    logger: logging.Logger,
) -> dict[str, Any]:
    """Settings of a group member: manual commits of explicit offsets only; ``overrides`` win."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "logger": logger,
    } | dict(overrides)


def to_record(msg: ck.Message) -> Record:
    """A hub record from a consumed Kafka message (text keys and headers as UTF-8)."""
    key = msg.key()
    kind, stamp = msg.timestamp()
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return Record(
        topic=str(msg.topic()),
        partition=int(msg.partition() or 0),
        offset=int(msg.offset() or 0),
        key=None if key is None else bytes(key).decode("utf-8", "replace"),
        value=bytes(msg.value() or b""),
        headers={k: _text(v) for k, v in pairs},
        timestamp_ms=stamp if kind != ck.TIMESTAMP_NOT_AVAILABLE else 0,
    )


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


class KafkaConsumer:
    """A member of a Kafka consumer group; fetch from one task at a time.

    ``commit``, ``assignment``, ``pause`` and ``resume`` may be called from other tasks
    while a fetch waits. The member joins when created inside a running loop (else at its
    first fetch); ``close`` leaves the group after ``on_revoke``.
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        topics: tuple[str, ...],
        settings: PollSettings,
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_closed: Callable[[KafkaConsumer], None] = lambda _: None,
    ) -> None:
        self.group = str(conf["group.id"])
        self.topics = topics
        self._conf = dict(conf)
        self._settings = settings
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_closed = on_closed
        self._state = MemberState()
        self._arrived = asyncio.Event()
        self._poller: Poller | None = None
        self._closed = False
        with contextlib.suppress(RuntimeError):  # no running loop: join at the first fetch
            self._start(asyncio.get_running_loop())

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` buffered records, round-robin over unpaused partitions.

        Waits up to ``timeout`` s for records; [] on timeout or when closed meanwhile.
        Raises what stopped the poll thread (e.g. a fatal client error).
        """
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        loop = asyncio.get_running_loop()
        poller = self._start(loop)
        deadline = loop.time() + timeout
        while True:
            if poller.failure is not None:
                raise poller.failure
            self._arrived.clear()
            records = self._state.take(max_records)
            remaining = deadline - loop.time()
            if records or remaining <= 0 or self._closed:
                return records
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit, synchronously, the offsets of partitions assigned now; never backwards.

        "Backwards" is below what this member committed or first read of the partition.
        Partitions not assigned (or lost meanwhile) are skipped; transient coordinator
        errors are retried for ``request_timeout`` s, then raised.
        """
        if offsets and self._poller is not None:
            await self._poller.call(self._poller.commit(dict(offsets)))

    def assignment(self) -> set[TopicPartition]:
        """Partitions assigned to this member, as its callbacks were told."""
        with self._state.lock:
            return set(self._state.owned)

    async def close(self) -> None:
        """Run ``on_revoke`` for what this member holds, commit nothing more, leave the group."""
        if self._closed:
            return
        self._closed = True
        self._arrived.set()
        if self._poller is not None:
            await self._poller.stop()
        with self._state.lock:
            self._state.buffer.clear()
            self._state.buffered = 0
            self._state.owned.clear()
        self._on_closed(self)

    # -- backpressure ----------------------------------------------------------------------

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        """Stop returning and fetching records of ``tps`` (assigned ones) until resumed.

        Takes effect at once for ``fetch`` and within ``poll_interval`` for the broker; a
        pause ends when the partition is revoked.
        """
        with self._state.lock:
            self._state.paused |= set(tps) & self._state.owned

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        """Undo :meth:`pause` for ``tps``."""
        with self._state.lock:
            self._state.paused -= set(tps)
        self._arrived.set()  # buffered records of these partitions may be taken now

    def paused(self) -> set[TopicPartition]:
        """Partitions paused by :meth:`pause`."""
        with self._state.lock:
            return set(self._state.paused)

    def _start(self, loop: asyncio.AbstractEventLoop) -> Poller:
        if self._poller is None:
            self._poller = Poller(
                self._conf,
                self.topics,
                self._state,
                self._settings,
                loop=loop,
                arrived=self._arrived,
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                to_record=to_record,
            )
        return self._poller
