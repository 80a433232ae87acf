"""SQLite statements run inline; another process holding the write lock only delays them.

While they wait for that lock, the event loop keeps running (no thread hop, no freeze).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.store import engine as store_engine
from aigc_hub.store import tables

# Takes the file's write lock and holds it until a line arrives on stdin (at the latest for
# 5 s, so a test of a frozen loop, which cannot send that line, still ends).
HOLD = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
if sys.argv[2] == "audit":
    conn.execute(
        "INSERT INTO audit_log(at, actor, action, target, result, detail)"
        " VALUES (1, 'other', 'x', 'y', 'ok', '{}')"
    )
print("locked", flush=True)
select.select([sys.stdin], [], [], 5.0)
conn.execute("COMMIT")
"""

# Far below the freeze the old inline busy wait caused (the whole wait, here >= 1 s), above
# what a busy shared machine adds to a 5 ms timer.
RESPONSIVE_GAP_S = 0.1


class LoopTicker:
    """Ticks every 5 ms on the running loop and keeps the longest gap between two ticks."""

    def __init__(self) -> None:
        self.longest_gap = 0.0
        self._task: asyncio.Task[None] | None = None
        self._ticking = asyncio.Event()

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.create_task(self._tick())
        await self._ticking.wait()  # a freeze right after this line is measured
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        self._ticking.set()
        while True:
            await asyncio.sleep(0.005)
            now = loop.time()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now


class LockHolder:
    """Another OS process holding a SQLite file's write lock until :meth:`release`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def release(self) -> None:
        """Tell the process to commit; returns once it has (the lock is free then)."""
        assert self._process.stdin is not None
        if self._process.returncode is None:
            self._process.stdin.write(b"release\n")
            with contextlib.suppress(ConnectionError):
                await self._process.stdin.drain()
        assert await asyncio.wait_for(self._process.wait(), 10) == 0


@contextlib.asynccontextmanager
async def write_lock_held(
    path: str, *, insert_audit_row: bool = False
) -> AsyncIterator[LockHolder]:
    """The write lock of ``path`` held by another process (BEGIN IMMEDIATE) inside the block."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLD,
        path,
        "audit" if insert_audit_row else "-",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    holder = LockHolder(process)
    try:
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b"locked\n"
        yield holder
    finally:
        await holder.release()


def _database(url: str) -> str:
    path = sa.engine.make_url(url).database
    assert path
    return path


async def _insert_audit_row(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            tables.audit_log.insert().values(
                at=2, actor="me", action="x", target="y", result="ok", detail={}
            )
        )


async def test_a_write_waiting_for_another_process_leaves_the_loop_running(
    sqlite_url: str,
) -> None:
    engine = store_engine.create_engine(sqlite_url)
    try:
        async with (
            write_lock_held(_database(sqlite_url), insert_audit_row=True) as holder,
            LoopTicker() as ticker,
        ):
            write = asyncio.create_task(_insert_audit_row(engine))
            # a second of the lock held: the write must still be waiting, the loop running
            done, _ = await asyncio.wait({write}, timeout=1.0)
            longest_gap_while_locked = ticker.longest_gap
            assert not done
            await holder.release()
            await asyncio.wait_for(write, 10)
        async with engine.connect() as conn:
            actors = (
                await conn.scalars(
                    sa.select(tables.audit_log.c.actor).order_by(tables.audit_log.c.at)
                )
            ).all()
    finally:
        await engine.dispose()
    assert longest_gap_while_locked < RESPONSIVE_GAP_S
    assert actors == ["other", "me"]  # it wrote after the other process committed


async def test_a_lock_held_past_the_busy_timeout_fails_as_before_without_freezing_the_loop(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_engine, "SQLITE_BUSY_TIMEOUT_MS", 1000)
    engine = store_engine.create_engine(sqlite_url)
    loop = asyncio.get_running_loop()
    try:
        async with write_lock_held(_database(sqlite_url)), LoopTicker() as ticker:
            started = loop.time()
            with pytest.raises(sa.exc.OperationalError, match="database is locked"):
                await _insert_audit_row(engine)
            waited = loop.time() - started
        async with engine.connect() as conn:  # the connection is usable again
            count = await conn.scalar(sa.select(sa.func.count()).select_from(tables.audit_log))
    finally:
        await engine.dispose()
    assert ticker.longest_gap < RESPONSIVE_GAP_S
    assert 1.0 <= waited < 5.0  # the whole busy timeout, then the error
    assert count == 0


async def test_a_write_waiting_for_the_lock_can_be_cancelled_and_the_engine_writes_afterwards(
    sqlite_url: str,
) -> None:
    engine = store_engine.create_engine(sqlite_url)
    try:
        async with write_lock_held(_database(sqlite_url)) as holder:
            write = asyncio.create_task(_insert_audit_row(engine))
            done, _ = await asyncio.wait({write}, timeout=0.3)
            assert not done
            write.cancel()  # e.g. the HTTP client went away
            with pytest.raises(asyncio.CancelledError):
                await write
            await holder.release()
        await asyncio.wait_for(_insert_audit_row(engine), 10)
        async with engine.connect() as conn:
            count = await conn.scalar(sa.select(sa.func.count()).select_from(tables.audit_log))
    finally:
        await engine.dispose()
    assert count == 1  # the cancelled write left nothing behind, the next one went through


async def test_a_deferred_transaction_that_read_fails_at_once_when_its_write_meets_the_lock(
    sqlite_url: str,
) -> None:
    # SQLite's busy handler does not wait here (the transaction holds a read lock: waiting
    # could deadlock), and neither do we: only the whole transaction could be retried.
    engine = store_engine.create_engine(sqlite_url)
    loop = asyncio.get_running_loop()
    try:
        async with write_lock_held(_database(sqlite_url)):
            started = loop.time()
            with pytest.raises(sa.exc.OperationalError, match="database is locked"):
                async with engine.connect() as conn:
                    conn = await conn.execution_options(sqlite_begin="DEFERRED")
                    async with conn.begin():
                        await conn.scalar(sa.select(sa.func.count()).select_from(tables.audit_log))
                        await conn.execute(
                            tables.audit_log.insert().values(
                                at=2, actor="me", action="x", target="y", result="ok", detail={}
                            )
                        )
            failed_after = loop.time() - started
    finally:
        await engine.dispose()
    assert failed_after < 1.0  # not the 30 s busy timeout


async def test_an_append_to_the_embedded_log_waiting_for_another_process_leaves_the_loop_running(
    tmp_path: Path,
) -> None:
    broker = EmbeddedBroker(tmp_path / "log.db", retention_interval=None)
    try:
        await broker.start()
        async with write_lock_held(broker.path) as holder, LoopTicker() as ticker:
            append = asyncio.create_task(
                broker.publish([OutgoingMessage(topic="t", key="k", value=b"v")])
            )
            done, _ = await asyncio.wait({append}, timeout=1.0)
            longest_gap_while_locked = ticker.longest_gap
            assert not done
            await holder.release()
            await asyncio.wait_for(append, 10)
        (lag,) = await broker.lag("g", ["t"])
    finally:
        await broker.close()
    assert longest_gap_while_locked < RESPONSIVE_GAP_S
    assert lag.end_offset == 1  # appended once the lock was free


async def test_reads_do_not_wait_for_a_writer(sqlite_url: str) -> None:
    engine = store_engine.create_engine(sqlite_url)
    loop = asyncio.get_running_loop()
    try:
        async with write_lock_held(_database(sqlite_url), insert_audit_row=True):
            started = loop.time()
            async with store_engine.reader(engine) as conn:
                count = await conn.scalar(sa.select(sa.func.count()).select_from(tables.audit_log))
            elapsed = loop.time() - started
    finally:
        await engine.dispose()
    assert count == 0  # the other transaction is not committed yet (WAL snapshot)
    assert elapsed < 0.5
