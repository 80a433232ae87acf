"""The backbone's append-only ledger on SQLite and PostgreSQL, over tables a caller defines
(here a settlement ledger of the shape :func:`define_ledger_tables` builds)."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.reliability.ledger import Entry, InsufficientFunds, Ledger, define_ledger_tables

meta = sa.MetaData()
TABLES = define_ledger_tables(
    "test_settlement", meta, sa.Column("job_id", sa.String(36), nullable=True)
)
LEDGER = Ledger(TABLES)
entries = TABLES.entries


@pytest.fixture
async def db_ledger(db: AsyncEngine) -> AsyncEngine:
    """The migrated database plus the test's ledger tables."""
    async with db.begin() as conn:
        await conn.run_sync(meta.create_all)
    return db


def _entry(kind: str, key: str, amount: int, delta: int, account: str = "acct") -> Entry:
    return Entry(
        account=account,
        kind=kind,
        business_type=f"settlement.{kind.lower()}",
        business_id=key,
        amount=amount,
        delta=delta,
        extra={"job_id": key},
    )


async def test_an_entry_is_written_once_per_business_key(db_ledger: AsyncEngine) -> None:
    async with db_ledger.begin() as conn:
        assert await LEDGER.append(conn, _entry("ACCRUE", "j1", 50, 50), now_ms=1)
    async with db_ledger.begin() as conn:
        assert not await LEDGER.append(conn, _entry("ACCRUE", "j1", 50, 50), now_ms=2)
        assert await LEDGER.available(conn, "acct") == 50
    async with db_ledger.connect() as conn:
        rows = (await conn.execute(sa.select(entries.c.job_id, entries.c.created_at))).all()
    assert [tuple(r) for r in rows] == [("j1", 1)]


async def test_available_is_the_sum_of_the_deltas(db_ledger: AsyncEngine) -> None:
    async with db_ledger.begin() as conn:
        await LEDGER.append(conn, _entry("ACCRUE", "a", 100, 100), now_ms=1)
        await LEDGER.hold(conn, _entry("HOLD", "h", 30, -30), now_ms=2)
        await LEDGER.append(conn, _entry("SETTLE", "h", 20, 10), now_ms=3)  # 20 of 30 used
        await LEDGER.append(conn, _entry("PAYOUT", "p", 15, -15), now_ms=4)
    async with db_ledger.connect() as conn:
        assert await LEDGER.available(conn, "acct") == 65
        assert await LEDGER.total(conn, "acct") == 65
        assert await LEDGER.available(conn, "nobody") == 0
        assert await LEDGER.total(conn, "nobody") == 0
        assert await LEDGER.account_of(conn, "settlement.hold", "h") == "acct"
        assert await LEDGER.account_of(conn, "settlement.hold", "missing") is None


async def test_a_hold_beyond_the_available_amount_writes_nothing(db_ledger: AsyncEngine) -> None:
    async with db_ledger.begin() as conn:
        await LEDGER.append(conn, _entry("ACCRUE", "a", 10, 10), now_ms=1)
    async with db_ledger.begin() as conn:
        with pytest.raises(InsufficientFunds, match="11 required, 10 available") as caught:
            await LEDGER.hold(conn, _entry("HOLD", "h", 11, -11), now_ms=2)
    assert (caught.value.available, caught.value.required) == (10, 11)
    async with db_ledger.connect() as conn:
        assert await LEDGER.available(conn, "acct") == 10
        count = (await conn.execute(sa.select(sa.func.count()).select_from(entries))).scalar_one()
    assert count == 1


async def test_concurrent_holds_never_overdraw(db_ledger: AsyncEngine) -> None:
    async with db_ledger.begin() as conn:
        await LEDGER.append(conn, _entry("ACCRUE", "a", 100, 100), now_ms=1)

    async def hold(n: int) -> bool:
        try:
            async with db_ledger.begin() as conn:
                await LEDGER.hold(conn, _entry("HOLD", f"h{n}", 30, -30), now_ms=2)
        except InsufficientFunds:
            return False
        return True

    results = await asyncio.gather(*(hold(n) for n in range(6)))
    assert results.count(True) == 3  # 3 x 30 fit in 100, the fourth does not
    async with db_ledger.connect() as conn:
        assert await LEDGER.available(conn, "acct") == 10
        assert await LEDGER.total(conn, "acct") == 10


async def test_malformed_entries_are_refused_before_any_write(db_ledger: AsyncEngine) -> None:
    async with db_ledger.begin() as conn:
        with pytest.raises(ValueError, match="never negative"):
            await LEDGER.append(conn, _entry("ACCRUE", "a", -5, -5), now_ms=1)
        with pytest.raises(ValueError, match="delta must be -amount"):
            await LEDGER.hold(conn, _entry("HOLD", "h", 5, 5), now_ms=1)
        assert await LEDGER.total(conn, "acct") == 0
