"""The embedded log beyond the broker contract: atomic batches, retention passes, read locks."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest
import sqlalchemy as sa

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging import embedded_retention
from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import OutgoingMessage, Record, TopicPartition
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker


def msgs(topic: str, n: int, key: str = "k", tag: str = "v") -> list[OutgoingMessage]:
    return [OutgoingMessage(topic, key, f"{tag}{i}".encode()) for i in range(n)]


async def read(broker: EmbeddedBroker, group: str, topic: str, n: int) -> list[Record]:
    consumer = broker.consumer(group, [topic])
    out: list[Record] = []
    async with asyncio.timeout(5):
        while len(out) < n:
            out.extend(await consumer.fetch(n - len(out), 0.1))
    assert await consumer.fetch(10, 0.02) == []
    await consumer.close()
    return out


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def broker(tmp_path: Path, clock: ManualClock) -> AsyncIterator[EmbeddedBroker]:
    b = EmbeddedBroker(
        tmp_path / "log.db", clock=clock, poll_interval=0.01, retention_interval=None
    )
    yield b
    await b.close()


async def test_batches_take_consecutive_offsets_from_the_partition_row(
    broker: EmbeddedBroker,
) -> None:
    await broker.ensure_topics([TopicSpec("t", 1, None)])
    for _ in range(3):
        await broker.publish(msgs("t", 4))
    got = await read(broker, "g", "t", 12)
    assert [r.offset for r in got] == list(range(12))
    async with broker.reading() as conn:
        ends = (await conn.execute(sa.select(schema.partitions.c.next_offset))).scalars().all()
    assert ends == [12]


async def test_a_failing_batch_appends_nothing(broker: EmbeddedBroker) -> None:
    await broker.ensure_topics([TopicSpec("t", 2, None)])
    bad = [*msgs("t", 3), OutgoingMessage("t", "k", None), *msgs("new-topic", 1)]  # type: ignore[arg-type]
    with pytest.raises(sa.exc.IntegrityError):
        await broker.publish(bad)
    assert sum(lag.end_offset for lag in await broker.lag("g", ["t"])) == 0
    assert await broker.lag("g", ["new-topic"]) == []  # its creation rolled back too

    await broker.publish(msgs("t", 3) + msgs("new-topic", 2))
    assert [r.offset for r in await read(broker, "g", "t", 3)] == [0, 1, 2]
    assert [r.offset for r in await read(broker, "g", "new-topic", 2)] == [0, 1]


async def test_publishing_to_an_undeclared_topic_creates_one_partition(
    broker: EmbeddedBroker,
) -> None:
    await broker.publish([OutgoingMessage("auto", f"k{i}", b"x") for i in range(5)])
    lags = await broker.lag("g", ["auto"])
    assert [(lag.partition, lag.end_offset) for lag in lags] == [(0, 5)]
    await broker.ensure_topics([TopicSpec("auto", 1, 1000)])  # may be declared afterwards
    with pytest.raises(ValueError, match="partitions"):
        await broker.ensure_topics([TopicSpec("auto", 3, None)])


async def test_retention_deletes_old_prefix_in_chunks_and_keeps_young(
    broker: EmbeddedBroker, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_retention, "RETENTION_CHUNK", 3)
    await broker.ensure_topics([TopicSpec("short", 1, 60_000), TopicSpec("forever", 1, None)])
    await broker.publish(msgs("short", 10, tag="old") + msgs("forever", 4))
    await clock.advance(120)
    await broker.publish(msgs("short", 2, tag="new"))

    assert await broker.enforce_retention() == 10
    assert await broker.enforce_retention() == 0
    got = await read(broker, "g", "short", 2)
    assert [(r.offset, r.value) for r in got] == [(10, b"new0"), (11, b"new1")]
    assert len(await read(broker, "g", "forever", 4)) == 4


async def test_retention_runs_in_the_background_and_stops_on_close(
    tmp_path: Path, clock: ManualClock
) -> None:
    broker = EmbeddedBroker(tmp_path / "log.db", clock=clock, retention_interval=0.01)
    await broker.ensure_topics([TopicSpec("t", 1, 1_000)])
    await broker.publish(msgs("t", 3))
    await clock.advance(5)
    async with asyncio.timeout(5):  # the task runs every 10 ms: poll for its effect
        while True:
            [lag] = await broker.lag("g", ["t"])
            if lag.oldest_unconsumed_ms is None:
                break
            await asyncio.sleep(0.01)
    assert lag.end_offset == 3
    await broker.close()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_reads_do_not_wait_for_another_writer(broker: EmbeddedBroker) -> None:
    await broker.ensure_topics([TopicSpec("t", 1, None)])
    await broker.publish(msgs("t", 5))
    broker.heartbeat_interval = 60  # no rebalance write during the test
    consumer = broker.consumer("g", ["t"])
    assert len(await consumer.fetch(1, 1)) == 1
    other = sqlite3.connect(broker.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        async with asyncio.timeout(2):
            assert len(await consumer.fetch(10, 1)) == 4
            assert (await broker.lag("g", ["t"]))[0].end_offset == 5
    finally:
        other.execute("ROLLBACK")
        other.close()


class WatchedWakeUp(asyncio.Event):
    """The log's append wake-up, also telling the test when a fetch starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.awaited = asyncio.Event()

    async def wait(self) -> Literal[True]:
        """Note that someone waits, then wait as a plain event does."""
        self.awaited.set()
        return await super().wait()


async def test_brokers_of_one_file_wake_each_other_without_polling(
    tmp_path: Path,
) -> None:
    writer = EmbeddedBroker(tmp_path / "log.db", retention_interval=None)
    reader = EmbeddedBroker(tmp_path / "log.db", poll_interval=30, retention_interval=None)
    try:
        await writer.ensure_topics([TopicSpec("t", 1, None), TopicSpec("other", 1, None)])
        wakes: list[WatchedWakeUp] = []
        made = asyncio.Event()

        def watched() -> WatchedWakeUp:
            wakes.append(WatchedWakeUp())
            made.set()
            return wakes[-1]

        await reader.start()  # both brokers share this loop's signal for the file
        reader.signal.event_factory = watched
        consumer = reader.consumer("g", ["t"])
        waiting = asyncio.create_task(consumer.fetch(10, 20))
        async with asyncio.timeout(5):
            await made.wait()
            (wake,) = wakes
            await wake.awaited.wait()  # the fetch read nothing and now waits for a wake-up
        await writer.publish(msgs("other", 3))  # another topic's append wakes no one here
        assert not wake.is_set()
        await writer.publish(msgs("t", 2))
        async with asyncio.timeout(2):  # the next poll is 30 s away: only the wake-up fits
            assert len(await waiting) == 2
        await consumer.commit({TopicPartition("t", 0): 2})
        assert (await writer.lag("g", ["t"]))[0].committed == 2
    finally:
        await reader.close()
        await writer.close()


async def test_a_fetch_reads_the_generation_with_the_partition_ends(
    broker: EmbeddedBroker,
) -> None:
    await broker.ensure_topics([TopicSpec("t", 3, None)])
    consumer = broker.consumer("g", ["t"])
    assert await consumer.fetch(10, 0) == []  # joins the group
    statements: list[str] = []

    def record(_conn: object, _cursor: object, sql: str, *_args: object) -> None:
        statements.append(sql.split()[0].upper())

    # Readers use an engine of their own beside the writer's: listen on every engine.
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        assert await consumer.fetch(10, 0) == []
        idle = list(statements)
        await broker.publish(msgs("t", 4))
        statements.clear()
        assert len(await consumer.fetch(10, 0)) == 4
        busy = list(statements)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)
        await consumer.close()
    assert [s for s in idle if s == "SELECT"] == ["SELECT"]  # generation and ends together
    assert [s for s in busy if s == "SELECT"] == ["SELECT", "SELECT"]  # ... then the records
