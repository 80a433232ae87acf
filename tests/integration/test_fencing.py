"""Leases plus fenced writes: a holder that lost its lease cannot overwrite its successor.

Runs on both cache engines (memory, Redis) times both databases (SQLite, PostgreSQL), on a
:class:`ManualClock`: the ttl passes by advancing time, never by sleeping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import ManualClock
from aigc_hub.store.fencing import FencedOut, fenced_update
from tests.contract.test_cache_contract import ENGINES, CacheViews, cache_views

TTL = 30_000

metadata = sa.MetaData()
#: A resource written under a lease: the row remembers the newest token that wrote it.
jobs = sa.Table(
    "fencing_test_jobs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("result", sa.String(200), nullable=True),
    sa.Column("fencing_token", sa.BigInteger, nullable=True),
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=ENGINES)
async def views(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[CacheViews]:
    async with cache_views(request.param, clock) as opened:
        yield opened


@pytest.fixture
async def table(db: AsyncEngine) -> sa.Table:
    async with db.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(sa.insert(jobs).values(id="job-1"))
    return jobs


async def write(db: AsyncEngine, result: str, token: int, job: str = "job-1") -> int:
    async with db.begin() as conn:
        return await fenced_update(conn, jobs, jobs.c.id == job, {"result": result}, token=token)


async def read(db: AsyncEngine) -> tuple[str | None, int | None]:
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(jobs.c.result, jobs.c.fencing_token))).one()
    return row[0], row[1]


async def test_a_late_write_with_the_old_fencing_token_is_rejected(
    db: AsyncEngine, table: sa.Table, views: CacheViews, clock: ManualClock
) -> None:
    """Issue "Backbone II" must-show: A stops renewing, B takes over, A's late write fails."""
    a = await views.main.leases.acquire("job-1", "worker-a", TTL)
    assert a is not None
    assert await write(db, "a: halfway", a.token) == 1

    await clock.advance(TTL / 1000)  # A pauses and stops renewing; the ttl passes
    b = await views.peer().leases.acquire("job-1", "worker-b", TTL)
    assert b is not None and b.token > a.token
    assert await write(db, "b: done", b.token) == 1

    assert await views.main.leases.renew(a) is None  # A wakes up: its lease is gone...
    with pytest.raises(FencedOut) as fenced:  # ...and its late write is refused
        await write(db, "a: done", a.token)
    assert (fenced.value.token, fenced.value.newer) == (a.token, b.token)
    assert await read(db) == ("b: done", b.token)


async def test_the_same_tenure_may_write_again_and_a_missing_row_is_not_fenced(
    db: AsyncEngine, table: sa.Table
) -> None:
    assert await write(db, "first", 7) == 1
    assert await write(db, "second", 7) == 1  # same token: the same holder writing again
    assert await write(db, "third", 9) == 1
    assert await read(db) == ("third", 9)
    assert await write(db, "nobody", 9, job="no-such-job") == 0
    with pytest.raises(FencedOut):
        await write(db, "stale", 8)
    assert await read(db) == ("third", 9)
    with pytest.raises(ValueError):
        async with db.begin() as conn:
            await fenced_update(conn, jobs, jobs.c.id == "job-1", {"fencing_token": 1}, token=1)
