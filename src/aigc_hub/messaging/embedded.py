"""A durable partitioned log in one SQLite file (WAL), shared by every process that opens it.

Appends take the file's write lock (``BEGIN IMMEDIATE``) once per batch and assign
consecutive offsets from each partition's ``next_offset`` row; reads begin ``DEFERRED`` and
never block writers. Brokers of one file in one process wake each other on append; other
processes notice by polling every ``poll_interval`` seconds. Publishing to an undeclared
topic creates it with one partition and no retention, as the memory broker does.
Retention deletes, per partition, the prefix of records older than the topic's
``retention_ms``, whatever the groups have committed (Kafka semantics): a group behind the
log start goes on from the oldest record left. Group membership is in ``embedded_consumer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.messaging import (
    embedded_checkpoint,
    embedded_consumer,
    embedded_retention,
    embedded_tail,
    embedded_topics,
)
from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import (
    Features,
    OutgoingMessage,
    PartitionLag,
    RebalanceCallback,
    partition_for,
)
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.store import engine as store_engine

log = logging.getLogger(__name__)


class EmbeddedBroker:
    """A broker on a SQLite log file; safe for many tasks, brokers and processes at once.

    Intervals are seconds of real time; leases and record timestamps use ``clock``.
    Nothing touches the file before the first call (or ``start()``).
    """

    features = Features(
        ordered_by_key=True,
        persistent=True,
        consumer_groups=True,
        cross_process=True,
        retention=True,
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        poll_interval: float = 0.025,
        heartbeat_interval: float = 1.0,
        lease_ttl: float = 6.0,
        max_poll_interval: float = 300.0,
        retention_interval: float | None = 60.0,
    ) -> None:
        self.path = os.path.abspath(path)
        self.clock: Clock = clock or SystemClock()
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.lease_ttl = lease_ttl
        self.max_poll_interval = max_poll_interval
        self.retention_interval = retention_interval
        self._engine: AsyncEngine | None = None
        self._signal: schema.Signal | None = None
        self._start_lock: asyncio.Lock | None = None
        self._retention_task: asyncio.Task[None] | None = None
        #: WAL checkpoints of this broker's appends, off the event loop (after ``start``).
        self.checkpointer = embedded_checkpoint.Checkpointer(self.path)
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        #: Topic names to partition ids, shared with this broker's consumers.
        self.directory = embedded_topics.TopicDirectory()
        self._consumers: list[embedded_consumer.EmbeddedConsumer] = []
        self._sticky = itertools.count()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the file, create the tables when missing, start the retention task; idempotent."""
        if self._closed:
            raise RuntimeError("broker is closed")
        if self._engine is not None:
            return
        self._start_lock = self._start_lock or asyncio.Lock()
        async with self._start_lock:
            if self._engine is not None:
                return
            engine = store_engine.create_engine(f"sqlite:///{self.path}")
            sa.event.listen(
                engine.sync_engine, "connect", embedded_checkpoint.limit_writer_checkpoints
            )
            async with engine.begin() as conn:
                await conn.run_sync(schema.metadata.create_all)
            self._signal = schema.signal_for(self.path)
            self._checkpoint_task = asyncio.create_task(self.checkpointer.run(self._stop))
            if self.retention_interval is not None:
                self._retention_task = asyncio.create_task(self._retention_loop())
            self._engine = engine

    async def close(self) -> None:
        """Close this broker's consumers (releasing their partitions), stop tasks, dispose."""
        if self._closed:
            return
        for consumer in list(self._consumers):
            await consumer.close()
        self._closed = True
        self._stop.set()
        if self._retention_task is not None:
            await self._retention_task  # it finishes its pass; no cancel inside a transaction
        if self._checkpoint_task is not None:
            await self._checkpoint_task  # it finishes a pass under way in its thread
        if self._engine is not None:
            await self._engine.dispose()

    # -- the Broker protocol -------------------------------------------------------------

    async def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create missing topics; an existing one must have as many partitions (else ValueError).

        An existing topic takes the spec's retention.
        """
        await self.start()
        t = schema.topics
        async with self.writing() as conn:
            for spec in specs:
                row = (
                    await conn.execute(
                        sa.select(t.c.partitions, t.c.retention_ms).where(t.c.name == spec.name)
                    )
                ).first()
                if row is None:
                    await self.directory.create(conn, spec.name, spec.partitions, spec.retention_ms)
                elif row.partitions != spec.partitions:
                    have, want = row.partitions, spec.partitions
                    raise ValueError(f"topic {spec.name!r} has {have} partitions, not {want}")
                elif row.retention_ms != spec.retention_ms:
                    await conn.execute(
                        t.update()
                        .where(t.c.name == spec.name)
                        .values(retention_ms=spec.retention_ms)
                    )

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Append all messages in one transaction, in input order per partition; durable then."""
        if not messages:
            return
        await self.start()
        now = self.clock.now_ms()
        keyless = next(self._sticky)  # one partition per batch for keyless messages
        p = schema.partitions
        async with self.writing() as conn:
            infos = await self.directory.load(conn, {m.topic for m in messages}, create=True)
            by_tp: dict[int, list[OutgoingMessage]] = {}
            for msg in messages:
                tp_ids = infos[msg.topic].tp_ids
                tp_id = tp_ids[partition_for(msg.key, len(tp_ids), fallback=keyless)]
                by_tp.setdefault(tp_id, []).append(msg)
            bump = sa.case({tp_id: len(batch) for tp_id, batch in by_tp.items()}, value=p.c.id)
            ends = await conn.execute(
                p.update()
                .where(p.c.id.in_(list(by_tp)))
                .values(next_offset=p.c.next_offset + bump)
                .returning(p.c.id, p.c.next_offset)
            )
            rows: list[tuple[int, int, str | None, bytes, str, int]] = []
            for tp_id, end in ends:
                batch = by_tp[tp_id]
                base = end - len(batch)
                rows.extend(
                    (tp_id, base + i, m.key, m.value, schema.encode_headers(m.headers), now)
                    for i, m in enumerate(batch)
                )
            # The driver's executemany on plain tuples, in this same transaction: SQLAlchemy's
            # per-row parameter building and bind processing cost more than SQLite's insert.
            await conn.exec_driver_sql(schema.INSERT_RECORD, rows)
        self.signal.appended(infos)
        self.checkpointer.appended(sum(len(m.value) for m in messages))

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> embedded_consumer.EmbeddedConsumer:
        """A new member of ``group``; it joins on its first ``fetch``."""
        if self._closed:
            raise RuntimeError("broker is closed")
        member = embedded_consumer.EmbeddedConsumer(
            self, group, tuple(topics), on_assign=on_assign, on_revoke=on_revoke
        )
        self._consumers.append(member)
        return member

    async def tail(self, topics: Sequence[str]) -> embedded_tail.EmbeddedTail:
        """A group-less reader of ``topics`` from their current end; writes nothing to the file."""
        if self._closed:
            raise RuntimeError("broker is closed")
        return await embedded_tail.open_tail(self, topics)

    async def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        """Committed offset, end offset, oldest unconsumed timestamp per existing partition.

        In the order of ``topics``, then by partition; a group that never committed is at 0.
        """
        await self.start()
        t, p, r, gp = schema.topics, schema.partitions, schema.records, schema.group_partitions
        committed = sa.func.coalesce(gp.c.committed, 0)
        oldest = (
            sa.select(r.c.timestamp_ms)
            .where(r.c.tp_id == p.c.id, r.c.offset >= committed)
            .order_by(r.c.offset)
            .limit(1)
            .scalar_subquery()
        )
        query = (
            sa.select(t.c.name, p.c.partition, committed, p.c.next_offset, oldest)
            .join_from(t, p, p.c.topic_id == t.c.id)
            .outerjoin(gp, sa.and_(gp.c.tp_id == p.c.id, gp.c.grp == group))
            .where(t.c.name.in_(list(topics)))
        )
        async with self.reading() as conn:
            rows = (await conn.execute(query)).all()
        rank = {name: i for i, name in enumerate(dict.fromkeys(topics))}
        ordered = sorted(rows, key=lambda row: (rank[row[0]], row[1]))  # as asked, by partition
        return [PartitionLag(group, *row) for row in ordered]

    # -- retention -------------------------------------------------------------------------

    async def enforce_retention(self) -> int:
        """Delete each partition's prefix of records older than its topic's retention; a count.

        Stops at a partition's first young record, in short transactions, so concurrent
        appends and fetches carry on (see ``embedded_retention``).
        """
        await self.start()
        return await embedded_retention.enforce(self, self.clock.now_ms())

    async def _retention_loop(self) -> None:
        assert self.retention_interval is not None
        while not await schema.stopped_within(self._stop, self.retention_interval):
            try:
                removed = await self.enforce_retention()
            except Exception:
                log.exception("retention pass failed on %s", self.path)
            else:
                if removed:
                    log.info("retention removed %d records from %s", removed, self.path)

    # -- helpers shared with EmbeddedConsumer ----------------------------------------------

    @property
    def signal(self) -> schema.Signal:
        """This file's in-process wake-up and write lock (after ``start``)."""
        assert self._signal is not None, "broker not started"
        return self._signal

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction (BEGIN IMMEDIATE), serialized with this process's other writers."""
        assert self._engine is not None, "broker not started"
        async with self.signal.write_lock:
            self.directory.begin()
            try:
                async with self._engine.begin() as conn:
                    yield conn
            except BaseException:
                self.directory.rollback()
                raise

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncConnection]:
        """A read transaction (BEGIN DEFERRED, reader pool): one snapshot, no write lock."""
        assert self._engine is not None, "broker not started"
        async with store_engine.reader(self._engine) as conn, conn.begin():
            yield conn

    def discard_consumer(self, consumer: embedded_consumer.EmbeddedConsumer) -> None:
        """Forget a closed consumer."""
        with contextlib.suppress(ValueError):
            self._consumers.remove(consumer)
