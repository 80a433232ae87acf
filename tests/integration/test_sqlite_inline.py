"""SQLite statements run inline; another process holding the write lock only delays us."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from aigc_hub.store import engine as store_engine
from aigc_hub.store import tables

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute(
    "INSERT INTO audit_log(at, actor, action, target, result, detail)"
    " VALUES (1, 'other', 'x', 'y', 'ok', '{}')"
)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


async def test_a_write_waits_for_another_process_then_succeeds(
    sqlite_url: str, tmp_path: Path
) -> None:
    path = sa.engine.make_url(sqlite_url).database
    assert path
    holder = subprocess.Popen(  # noqa: ASYNC220 - the other process just has to exist
        [sys.executable, "-c", HOLD, path, "0.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        engine = store_engine.create_engine(sqlite_url)
        started = time.monotonic()
        async with engine.begin() as conn:
            await conn.execute(
                tables.audit_log.insert().values(
                    at=2, actor="me", action="x", target="y", result="ok", detail={}
                )
            )
        waited = time.monotonic() - started
        async with engine.connect() as conn:
            actors = (
                (
                    await conn.execute(
                        sa.select(tables.audit_log.c.actor).order_by(tables.audit_log.c.at)
                    )
                )
                .scalars()
                .all()
            )
        await engine.dispose()
    finally:
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    assert actors == ["other", "me"]
    assert waited >= 0.3  # it really waited for the lock instead of failing


async def test_reads_do_not_wait_for_a_writer(sqlite_url: str) -> None:
    path = sa.engine.make_url(sqlite_url).database
    assert path
    holder = subprocess.Popen(  # noqa: ASYNC220 - the other process just has to exist
        [sys.executable, "-c", HOLD, path, "1.0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        engine = store_engine.create_engine(sqlite_url)
        started = time.monotonic()
        async with store_engine.reader(engine) as conn:
            count = (
                await conn.execute(sa.select(sa.func.count()).select_from(tables.audit_log))
            ).scalar()
        elapsed = time.monotonic() - started
        await engine.dispose()
    finally:
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    assert count == 0  # the other transaction is not committed yet (WAL snapshot)
    assert elapsed < 0.5
