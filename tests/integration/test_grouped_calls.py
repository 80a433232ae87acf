"""Grouped service calls on SQLite and PostgreSQL: concurrent calls share one commit, a
failing call rolls back alone, a failed commit fails its whole group and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.failpoints import Crash
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.store.grouped import GroupedCalls, Work, insert_rows
from tests.support import effects as fx
from tests.support.hubs import hub_for, wait_until

meta = sa.MetaData()
notes = sa.Table(
    "test_grouped_notes",
    meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("body", sa.String(100), nullable=False),
)
#: Checked at COMMIT only: a row naming a missing parent makes the COMMIT itself fail.
parents = sa.Table("test_grouped_parents", meta, sa.Column("id", sa.String(36), primary_key=True))
children = sa.Table(
    "test_grouped_children",
    meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "parent_id",
        sa.String(36),
        sa.ForeignKey(parents.c.id, deferrable=True, initially="DEFERRED"),
        nullable=False,
    ),
)


@pytest.fixture
async def table(db: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    async with db.begin() as conn:
        await conn.run_sync(meta.create_all)
    yield db


@pytest.fixture
def commits(table: AsyncEngine) -> Iterator[list[int]]:
    """One entry per COMMIT the engine sends."""
    seen: list[int] = []

    def on_commit(_conn: object) -> None:
        seen.append(1)

    sa.event.listen(table.sync_engine, "commit", on_commit)
    yield seen
    sa.event.remove(table.sync_engine, "commit", on_commit)


def insert(row_id: str, body: str = "x", *, fail: bool = False) -> Work[str]:
    async def work(conn: AsyncConnection) -> str:
        await conn.execute(notes.insert(), {"id": row_id, "body": body})
        if fail:
            raise ValueError(f"{row_id} refused")
        return row_id.upper()

    return work


async def stored(db: AsyncEngine) -> dict[str, str]:
    async with db.connect() as conn:
        return {r.id: r.body for r in await conn.execute(sa.select(notes))}


async def test_concurrent_calls_share_one_commit_and_each_gets_its_own_result(
    table: AsyncEngine, commits: list[int]
) -> None:
    woken: list[int] = []
    calls = GroupedCalls(table, max_groups=4, after_commit=lambda: woken.append(1))

    results = await asyncio.gather(*(calls.run(insert(f"n{i}")) for i in range(20)))

    assert results == [f"N{i}" for i in range(20)]
    assert set(await stored(table)) == {f"n{i}" for i in range(20)}
    # One transaction per call would be 20 commits.
    assert len(commits) <= 2 and calls.groups == len(commits) == len(woken)


async def test_a_failing_call_rolls_back_alone_and_the_others_of_its_group_commit(
    table: AsyncEngine,
) -> None:
    woken: list[int] = []
    calls = GroupedCalls(table, after_commit=lambda: woken.append(1))

    results = await asyncio.gather(
        calls.run(insert("a")),
        calls.run(insert("b", fail=True)),
        calls.run(insert("c")),
        return_exceptions=True,
    )

    assert results[0] == "A" and results[2] == "C"
    assert isinstance(results[1], ValueError) and str(results[1]) == "b refused"
    assert set(await stored(table)) == {"a", "c"}
    assert calls.groups == 1 and woken == [1]


async def test_a_call_clashing_with_an_earlier_one_of_its_group_fails_as_if_run_after_it(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)

    first, second = await asyncio.gather(
        calls.run(insert("same", "first")),
        calls.run(insert("same", "second")),
        return_exceptions=True,
    )

    assert first == "SAME"
    assert isinstance(second, sa.exc.IntegrityError)
    assert await stored(table) == {"same": "first"}


async def test_a_group_whose_every_call_fails_commits_nothing_and_wakes_nobody(
    table: AsyncEngine,
) -> None:
    woken: list[int] = []
    calls = GroupedCalls(table, after_commit=lambda: woken.append(1))

    results = await asyncio.gather(
        calls.run(insert("a", fail=True)),
        calls.run(insert("b", fail=True)),
        return_exceptions=True,
    )

    assert all(isinstance(r, ValueError) for r in results)
    assert await stored(table) == {} and woken == []


async def test_a_failed_commit_fails_every_call_of_its_group_and_writes_nothing(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)

    async def orphan(conn: AsyncConnection) -> None:
        await conn.execute(children.insert(), {"id": "c1", "parent_id": "missing"})

    results = await asyncio.gather(
        calls.run(insert("a")), calls.run(orphan), return_exceptions=True
    )

    assert all(isinstance(r, sa.exc.IntegrityError) for r in results), results
    assert await stored(table) == {}
    # The connection is usable again and the runner still serves the next call.
    assert await calls.run(insert("b")) == "B"
    assert set(await stored(table)) == {"b"}


async def test_a_crash_inside_a_call_ends_its_group_unwritten_and_the_runner_goes_on(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)

    async def crash(conn: AsyncConnection) -> None:
        await conn.execute(notes.insert(), {"id": "crashing", "body": "x"})
        raise Crash("process killed between the hook and the commit")

    results = await asyncio.gather(calls.run(insert("a")), calls.run(crash), return_exceptions=True)

    assert all(isinstance(r, Crash) for r in results)
    assert await stored(table) == {}
    assert await calls.run(insert("b")) == "B"
    assert set(await stored(table)) == {"b"}


def staged(row_id: str) -> Work[None]:
    async def work(conn: AsyncConnection) -> None:
        await insert_rows(conn, notes, [{"id": row_id, "body": "staged"}])

    return work


async def test_rows_the_calls_of_a_group_stage_are_inserted_in_one_statement(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)
    inserts: list[str] = []

    def on_execute(*args: object) -> None:
        statement = str(args[2])
        if statement.startswith("INSERT INTO test_grouped_notes"):
            inserts.append(statement)

    sa.event.listen(table.sync_engine, "before_cursor_execute", on_execute)
    try:
        await asyncio.gather(*(calls.run(staged(f"s{i}")) for i in range(10)))
    finally:
        sa.event.remove(table.sync_engine, "before_cursor_execute", on_execute)

    assert set(await stored(table)) == {f"s{i}" for i in range(10)}
    assert len(inserts) == 1 and calls.groups == 1


async def test_a_staged_row_clashing_at_the_end_of_the_group_fails_only_its_call(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)

    results = await asyncio.gather(
        calls.run(staged("x")),
        calls.run(staged("y")),
        calls.run(staged("x")),
        return_exceptions=True,
    )

    assert results[:2] == [None, None] and isinstance(results[2], sa.exc.IntegrityError)
    assert set(await stored(table)) == {"x", "y"}


async def test_a_hubs_service_calls_share_commits_and_their_events_are_handled_once(
    db_url: str,
) -> None:
    behaviour = fx.Behaviour()
    async with hub_for(db_url, MemoryBroker(), [fx.make_pipeline(behaviour)]) as hub:
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        def call(n: int) -> Work[int]:
            async def work(conn: AsyncConnection) -> int:
                await hub.outbox.add(conn, [fx.request(f"k{n}", n)])
                return n

            return work

        assert await asyncio.gather(*(hub.service_call(call(n)) for n in range(12))) == list(
            range(12)
        )

        async def all_handled() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 12

        await wait_until(all_handled, timeout=30)
        stop.set()
        await run
        assert hub.grouped.groups < 12
        assert sorted(n for _, _, _, n in await fx.effect_rows(hub.engine)) == list(range(12))


async def test_a_failing_call_runs_once_and_the_others_of_its_group_at_most_twice(
    table: AsyncEngine,
) -> None:
    calls = GroupedCalls(table)
    runs: list[str] = []

    def counted(row_id: str, *, fail: bool = False) -> Work[str]:
        inner = insert(row_id, fail=fail)

        async def work(conn: AsyncConnection) -> str:
            runs.append(row_id)
            return await inner(conn)

        return work

    alone = await asyncio.gather(calls.run(counted("solo", fail=True)), return_exceptions=True)
    assert isinstance(alone[0], ValueError) and runs == ["solo"]

    runs.clear()
    await asyncio.gather(
        calls.run(counted("a")),
        calls.run(counted("b", fail=True)),
        calls.run(counted("c")),
        return_exceptions=True,
    )
    assert runs.count("b") == 1 and runs.count("a") == 2 and runs.count("c") == 1
    assert set(await stored(table)) == {"a", "c"}
