"""avcc's transparency log on a real database (SQLite file and PostgreSQL): idempotent, dense
appends under concurrency (tasks of one log, and two logs on separate engines as two
processes would be), receipts that verify offline, consistent heads, and a log that reopens
where it left off; plus each refusal (unknown, unsealed, foreign head, another log's key,
altered rows)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.errors import (
    ConfigurationError,
    Conflict,
    InvalidInput,
    NotFound,
    PermanentError,
)
from aigc_hub.pipelines.avcc import merkle, tree_heads
from aigc_hub.pipelines.avcc.receipts import Receipt, verify_receipt
from aigc_hub.pipelines.avcc.translog import LeafRef, NotYetSealed, TransparencyLog
from aigc_hub.pipelines.avcc.translog_tables import TABLES, avcc_log_heads, avcc_log_leaves
from aigc_hub.store import engine as store_engine
from aigc_hub.store.tables import metadata


def entry(i: int) -> tuple[str, bytes]:
    return f"copyright_main:{i}", f'{{"work": {i}}}'.encode()


@pytest.fixture
async def engine(db: AsyncEngine) -> AsyncEngine:
    async with db.begin() as conn:
        await conn.run_sync(lambda sync: metadata.create_all(sync, tables=list(TABLES)))
    return db


@pytest.fixture
async def second_engine(engine: AsyncEngine, db_url: str) -> AsyncIterator[AsyncEngine]:
    """Another engine on the same database: its own connections, like another process."""
    other = store_engine.create_engine(db_url)
    yield other
    await other.dispose()


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def log(engine: AsyncEngine, key: Ed25519PrivateKey, clock: ManualClock) -> TransparencyLog:
    return TransparencyLog(engine, key, clock)


async def stored_leaves(engine: AsyncEngine) -> dict[str, int]:
    """entry_key -> leaf_index, as the table holds them."""
    query = sa.select(avcc_log_leaves.c.entry_key, avcc_log_leaves.c.leaf_index)
    async with engine.connect() as conn:
        return {row.entry_key: row.leaf_index for row in await conn.execute(query)}


async def test_the_same_entry_key_twice_is_one_leaf(
    log: TransparencyLog, engine: AsyncEngine
) -> None:
    first = await log.append([entry(1), entry(2), entry(1)])
    again = await log.append([entry(2), entry(1)])
    assert [ref.leaf_index for ref in first] == [0, 1, 0]
    assert again == [first[1], first[0]]
    assert first[0] == LeafRef("copyright_main:1", 0, merkle.leaf_hash(entry(1)[1]))
    assert await stored_leaves(engine) == {"copyright_main:1": 0, "copyright_main:2": 1}


async def test_other_data_under_a_key_is_refused_and_nothing_of_the_call_appended(
    log: TransparencyLog, engine: AsyncEngine
) -> None:
    await log.append([entry(1)])
    with pytest.raises(Conflict, match="'copyright_main:1' is already leaf 0 with other data"):
        await log.append([entry(2), ("copyright_main:1", b"other")])
    with pytest.raises(InvalidInput, match="appears twice with different data"):
        await log.append([entry(3), ("copyright_main:3", b"other")])
    with pytest.raises(InvalidInput, match="1 to 255 characters"):
        await log.append([entry(4), ("", b"x")])
    assert await stored_leaves(engine) == {"copyright_main:1": 0}
    assert await log.append([]) == []


async def test_concurrent_appends_get_dense_indices_and_each_key_once(
    log: TransparencyLog, engine: AsyncEngine
) -> None:
    calls = [[entry(i % 25), entry((i * 7) % 25)] for i in range(40)]
    results = await asyncio.gather(*(log.append(call) for call in calls))
    given = {ref.entry_key: ref.leaf_index for refs in results for ref in refs}
    stored = await stored_leaves(engine)
    assert stored == given
    assert sorted(stored.values()) == list(range(25))


async def test_two_logs_on_separate_connections_append_at_once_without_gaps(
    log: TransparencyLog, second_engine: AsyncEngine, key: Ed25519PrivateKey, engine: AsyncEngine
) -> None:
    other = TransparencyLog(second_engine, key)
    calls = [(log if i % 2 else other).append([entry(i % 15)]) for i in range(30)]
    results = await asyncio.gather(*calls)
    stored = await stored_leaves(engine)
    assert sorted(stored.values()) == list(range(15))
    assert all(stored[ref.entry_key] == ref.leaf_index for refs in results for ref in refs)
    head, other_head = await log.seal(), await other.seal()
    assert head == other_head  # the second seal found nothing new


async def test_every_sealed_leaf_has_a_receipt_that_verifies_offline(
    log: TransparencyLog, key: Ed25519PrivateKey
) -> None:
    entries = [entry(i) for i in range(13)]
    await log.append(entries)
    head = await log.seal()
    assert head.tree_size == 13
    pem = tree_heads.public_key_pem(key.public_key())
    for index, (entry_key, data) in enumerate(entries):
        receipt = await log.prove(entry_key)
        assert (receipt.leaf_index, receipt.tree_head) == (index, head)
        offline = Receipt.from_json(receipt.to_json())
        assert verify_receipt(offline, pem, data).leaf_index == index


async def test_a_later_head_is_consistent_with_an_earlier_one(
    log: TransparencyLog, key: Ed25519PrivateKey, clock: ManualClock
) -> None:
    await log.append([entry(i) for i in range(5)])
    early = await log.seal()
    await clock.advance(100)
    await log.append([entry(i) for i in range(5, 13)])
    late = await log.seal()
    assert (early.tree_size, late.tree_size) == (5, 13)
    assert late.timestamp_ms > early.timestamp_ms
    proof = await log.consistency(early.tree_size, late.tree_size)
    merkle.verify_consistency(5, 13, early.root_hash, late.root_hash, proof)
    # An old receipt can still be asked for, against the head its holder knows.
    old = await log.prove("copyright_main:3", head=early)
    verify_receipt(old, tree_heads.public_key_pem(key.public_key()), entry(3)[1])


async def test_sealing_with_nothing_new_returns_the_same_head(
    log: TransparencyLog, engine: AsyncEngine, clock: ManualClock
) -> None:
    await log.append([entry(1), entry(2)])
    first = await log.seal()
    await clock.advance(60)
    assert await log.seal() == first
    async with engine.connect() as conn:
        sizes = (await conn.execute(sa.select(avcc_log_heads.c.tree_size))).scalars().all()
    assert sorted(sizes) == [0, 2]


async def test_a_head_never_goes_back_in_time_when_the_clock_does(
    log: TransparencyLog, clock: ManualClock
) -> None:
    await log.append([entry(1)])
    first = await log.seal()
    await clock.advance(-5)  # the clock steps back five seconds
    await log.append([entry(2)])
    assert (await log.seal()).timestamp_ms == first.timestamp_ms


async def test_a_new_log_starts_with_the_signed_empty_head(
    log: TransparencyLog, key: Ed25519PrivateKey
) -> None:
    assert await log.head() is None
    empty = await log.seal()
    assert (empty.tree_size, empty.root_hash) == (0, merkle.EMPTY_ROOT)
    tree_heads.verify_head(empty, key.public_key())
    assert await log.head(0) == empty == await log.head()
    assert await log.head(1) is None


async def test_a_reopened_log_continues_where_it_left_off(
    log: TransparencyLog, second_engine: AsyncEngine, key: Ed25519PrivateKey
) -> None:
    await log.append([entry(i) for i in range(6)])
    early = await log.seal()
    early_receipt = await log.prove("copyright_main:4")

    reopened = TransparencyLog(second_engine, key)
    assert await reopened.head() == early
    refs = await reopened.append([entry(3), entry(6), entry(7)])
    assert [ref.leaf_index for ref in refs] == [3, 6, 7]
    late = await reopened.seal()
    assert late.tree_size == 8
    proof = await reopened.consistency(early.tree_size, late.tree_size)
    merkle.verify_consistency(6, 8, early.root_hash, late.root_hash, proof)
    pem = tree_heads.public_key_pem(key.public_key())
    verify_receipt(early_receipt, pem, entry(4)[1])
    verify_receipt(await reopened.prove("copyright_main:7"), pem, entry(7)[1])
    # The first object catches up with what the other appended.
    verify_receipt(await log.prove("copyright_main:7"), pem, entry(7)[1])


async def test_proving_an_unknown_or_unsealed_entry_is_not_found(log: TransparencyLog) -> None:
    with pytest.raises(NotFound, match="no entry 'copyright_main:9' in the log"):
        await log.prove("copyright_main:9")
    await log.append([entry(1)])
    with pytest.raises(NotYetSealed, match=r"leaf 0\) is not sealed yet"):
        await log.prove("copyright_main:1")


async def test_a_head_this_log_did_not_sign_or_that_misses_the_entry_is_refused(
    log: TransparencyLog,
) -> None:
    await log.append([entry(1)])
    early = await log.seal()
    await log.append([entry(2)])
    await log.seal()
    with pytest.raises(InvalidInput, match="the head of size 1 does not cover leaf 1"):
        await log.prove("copyright_main:2", head=early)
    foreign = tree_heads.sign_head(Ed25519PrivateKey.generate(), 1, early.root_hash, 0)
    with pytest.raises(InvalidInput, match="signed no such head of size 1"):
        await log.prove("copyright_main:1", head=foreign)


async def test_consistency_beyond_the_sealed_sizes_is_invalid(log: TransparencyLog) -> None:
    await log.append([entry(1), entry(2)])
    await log.seal()
    await log.append([entry(3)])
    assert await log.consistency(1, 2) != []
    for size1, size2 in ((1, 3), (2, 1), (-1, 2)):
        with pytest.raises(InvalidInput, match="sealed"):
            await log.consistency(size1, size2)


async def test_a_database_of_one_log_refuses_another_key(
    log: TransparencyLog, engine: AsyncEngine
) -> None:
    await log.append([entry(1)])
    intruder = TransparencyLog(engine, Ed25519PrivateKey.generate())
    with pytest.raises(ConfigurationError, match=f"holds the transparency log {log.log_id}"):
        await intruder.append([entry(2)])
    with pytest.raises(ConfigurationError):
        await intruder.seal()


async def test_leaf_rows_altered_after_signing_are_detected(
    log: TransparencyLog, engine: AsyncEngine, key: Ed25519PrivateKey
) -> None:
    await log.append([entry(i) for i in range(4)])
    await log.seal()
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(avcc_log_leaves)
            .where(avcc_log_leaves.c.leaf_index == 2)
            .values(leaf_hash=merkle.leaf_hash(b"forged"))
        )
    fresh = TransparencyLog(engine, key)
    with pytest.raises(PermanentError, match="do not give the root of the head of size 4"):
        await fresh.prove("copyright_main:0")
    with pytest.raises(PermanentError):
        await fresh.consistency(1, 4)
