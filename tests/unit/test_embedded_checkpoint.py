"""WAL checkpoints of the embedded log run beside appends, not inside their commits."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.hubs import wait_until

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging import embedded_checkpoint
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker


def batch(n: int) -> list[OutgoingMessage]:
    return [OutgoingMessage("t", f"k{i}", b"x" * 400) for i in range(n)]


async def passes_reach(checkpointer: embedded_checkpoint.Checkpointer, n: int) -> None:
    """Poll (bounded) until ``n`` checkpoint passes ran."""

    async def done() -> bool:
        return checkpointer.passes >= n

    await wait_until(done, timeout=10)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    b = EmbeddedBroker(tmp_path / "log.db", clock=ManualClock(), retention_interval=None)
    b.checkpointer.every_bytes = 100_000
    yield b
    await b.close()


async def test_the_writer_leaves_checkpoints_to_the_backstop(broker: EmbeddedBroker) -> None:
    await broker.ensure_topics([TopicSpec("t", 4, None)])
    async with broker.writing() as conn:
        pages = (await conn.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar_one()
    assert pages == embedded_checkpoint.BACKSTOP_PAGES


async def test_appends_past_the_threshold_are_checkpointed_into_the_file(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    await broker.ensure_topics([TopicSpec("t", 4, None)])
    await broker.publish(batch(100))  # 40 kB: not due yet
    assert broker.checkpointer.passes == 0
    await broker.publish(batch(200))  # past 100 kB
    await passes_reach(broker.checkpointer, 1)
    assert broker.checkpointer.last is not None
    busy, frames, copied = broker.checkpointer.last
    assert busy == 0 and frames > 0 and copied == frames
    # The main file alone (its WAL set aside) now holds the records.
    with contextlib.closing(
        sqlite3.connect(f"file:{tmp_path / 'log.db'}?immutable=1", uri=True)
    ) as c:
        assert c.execute("SELECT count(*) FROM records").fetchone() == (300,)


async def test_a_failed_checkpoint_is_logged_and_the_next_one_runs(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    checkpointer = broker.checkpointer
    real = checkpointer._checkpoint
    failures = iter([sqlite3.OperationalError("disk I/O error")])

    def failing_once() -> tuple[int, int, int]:
        for error in failures:
            raise error
        return real()

    monkeypatch.setattr(checkpointer, "_checkpoint", failing_once)
    await broker.ensure_topics([TopicSpec("t", 4, None)])
    with caplog.at_level(logging.ERROR, logger=embedded_checkpoint.__name__):
        await broker.publish(batch(300))

        async def logged() -> bool:
            return bool(caplog.records)

        await wait_until(logged, timeout=10)
    assert "checkpoint of" in caplog.records[0].getMessage()
    assert checkpointer.passes == 0
    await broker.publish(batch(300))
    await passes_reach(checkpointer, 1)
    assert checkpointer.last is not None and checkpointer.last[0] == 0


async def test_close_stops_the_checkpointer_and_closes_its_connection(
    broker: EmbeddedBroker,
) -> None:
    await broker.ensure_topics([TopicSpec("t", 4, None)])
    await broker.publish(batch(300))
    await passes_reach(broker.checkpointer, 1)
    await broker.close()
    assert broker._checkpoint_task is not None and broker._checkpoint_task.done()
    conn = broker.checkpointer._conn
    assert conn is not None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
