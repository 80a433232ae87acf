"""Group commit: one transaction for many outcomes; a failing outcome rolls back alone."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability import inbox
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter
from aigc_hub.runtime.committer import CommitStatus, Committer, Outcome
from aigc_hub.runtime.context import RowInsert, checkpoint
from aigc_hub.store import tables
from tests.support import effects as fx


def _committer(db: AsyncEngine) -> Committer:
    routes = EventRoutes({fx.EVENT: fx.TOPIC})
    return Committer(
        db, OutboxWriter(routes, ManualClock()), ManualClock(), max_batch=64, max_wait=0.05
    )


async def _marked(db: AsyncEngine, consumer: str, ids: list[str]) -> set[str]:
    async with db.connect() as conn:
        return await inbox.seen(conn, consumer, ids)


async def test_a_failing_outcome_rolls_back_alone_and_the_others_commit(db: AsyncEngine) -> None:
    await fx.create_tables(db)
    committer = _committer(db)
    good = [fx.request(f"k{i}", i) for i in range(5)]
    bad = fx.request("bad", 99)

    async def explode(conn: AsyncConnection) -> None:
        await conn.execute(fx.effects.insert().values(event_id=bad.event_id, key="bad", n=99))
        raise ValueError("constraint the handler did not expect")

    outcomes = [
        Outcome(
            "c",
            e.event_id,
            [RowInsert(fx.effects, {"event_id": e.event_id, "key": e.key, "n": i})],
            [e.derive(fx.EVENT, {"n": i + 100})],
        )
        for i, e in enumerate(good)
    ]
    outcomes.insert(2, Outcome("c", bad.event_id, [explode], [bad.derive(fx.EVENT, {"n": 0})]))
    results = await asyncio.gather(*(committer.submit(o) for o in outcomes), return_exceptions=True)
    await committer.close()

    assert [r for r in results if isinstance(r, BaseException)] == [results[2]]
    assert isinstance(results[2], ValueError)
    assert [r for i, r in enumerate(results) if i != 2] == [CommitStatus.APPLIED] * 5
    rows = await fx.effect_rows(db)
    assert sorted(r[2] for r in rows) == [f"k{i}" for i in range(5)]  # nothing of "bad"
    assert await _marked(db, "c", [bad.event_id]) == set()  # so it can be retried
    assert await _marked(db, "c", [e.event_id for e in good]) == {e.event_id for e in good}
    async with db.connect() as conn:
        outbox_rows = (await conn.execute(sa.select(tables.outbox.c.key))).scalars().all()
    assert sorted(outbox_rows) == sorted(e.key for e in good)  # the bad one emitted nothing
    assert committer.commits >= 1


async def test_duplicates_apply_nothing_and_always_hooks_still_run(db: AsyncEngine) -> None:
    await fx.create_tables(db)
    committer = _committer(db)
    env = fx.request("dup", 1)
    write = RowInsert(fx.effects, {"event_id": env.event_id, "key": "dup", "n": 1})
    assert await committer.submit(Outcome("c", env.event_id, [write])) is CommitStatus.APPLIED
    hook_ran: list[bool] = []

    async def hook(conn: AsyncConnection) -> None:
        hook_ran.append(True)

    again = Outcome("c", env.event_id, [write], [env.derive(fx.EVENT, {"n": 2})], always=[hook])
    assert await committer.submit(again) is CommitStatus.DUPLICATE
    other_consumer = await committer.submit(Outcome("other", env.event_id, []))
    await committer.close()
    assert other_consumer is CommitStatus.APPLIED  # inbox marks are per consumer
    assert hook_ran == [True]
    assert len(await fx.effect_rows(db)) == 1
    async with db.connect() as conn:
        assert (
            await conn.execute(sa.select(sa.func.count()).select_from(tables.outbox))
        ).scalar() == 0


@pytest.mark.parametrize("ignore", [True, False])
async def test_row_inserts_of_many_outcomes_share_one_statement(
    db: AsyncEngine, ignore: bool
) -> None:
    await fx.create_tables(db)
    committer = _committer(db)
    envs = [fx.request(f"k{i}", i) for i in range(40)]
    results = await asyncio.gather(
        *(
            committer.submit(
                Outcome(
                    "c",
                    e.event_id,
                    [
                        RowInsert(
                            fx.effects,
                            {"event_id": e.event_id, "key": e.key, "n": i},
                            ignore_conflict=ignore,
                        )
                    ],
                )
            )
            for i, e in enumerate(envs)
        )
    )
    await committer.close()
    assert results == [CommitStatus.APPLIED] * 40
    assert committer.commits < 40  # grouped
    assert sorted(r[3] for r in await fx.effect_rows(db)) == list(range(40))


async def test_emitted_envelopes_land_in_the_outbox_with_their_topic(db: AsyncEngine) -> None:
    committer = _committer(db)
    parent = fx.request("p", 1)
    child: Envelope = parent.derive(fx.EVENT, {"n": 2})
    await committer.submit(Outcome("c", parent.event_id, [], [child]))
    await committer.close()
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(tables.outbox))).one()
    assert (row.topic, row.key, row.event_id) == (fx.TOPIC, "p", child.event_id)
    assert Envelope.from_bytes(row.value).causation_id == parent.event_id


async def test_a_checkpoint_commits_before_it_returns_and_must_say_why(db: AsyncEngine) -> None:
    await fx.create_tables(db)
    woken: list[str] = []

    async def record(conn: AsyncConnection) -> int:
        await conn.execute(fx.facts.insert().values(key="intent", n=1))
        return 7

    result = await checkpoint(
        db, "before the outside call", record, committed=lambda: woken.append("relay")
    )
    # Visible to another connection at once: committed, not staged.
    async with db.connect() as conn:
        keys = (await conn.execute(sa.select(fx.facts.c.key))).scalars().all()
    assert (result, keys, woken) == (7, ["intent"], ["relay"])
    with pytest.raises(ValueError, match="must say why"):
        await checkpoint(db, "  ", record)


@pytest.mark.parametrize("batch", [1, 600])
async def test_seen_finds_exactly_the_marked_ids_of_this_consumer(
    db: AsyncEngine, batch: int
) -> None:
    ids = [fx.request(f"k{i}", i).event_id for i in range(batch)]
    marked = ids[::2]
    async with db.begin() as conn:
        await inbox.mark(conn, "g1", marked, 1)
        await inbox.mark(conn, "g2", ids, 1)  # another consumer's marks do not count
    async with db.connect() as conn:
        assert await inbox.seen(conn, "g1", ids) == set(marked)
        assert await inbox.seen(conn, "g1", []) == set()
        assert await inbox.seen(conn, "g3", ids) == set()
