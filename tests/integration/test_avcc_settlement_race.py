"""Booking against sealing on the real databases (SQLite and PostgreSQL): both take the
period's row first, so a sealed batch never gains a line and no purchase is lost."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.pipelines.avcc import events, settlement_books, settlement_services
from aigc_hub.pipelines.avcc.settlement import period_of
from aigc_hub.store import engine as store_engine

SHARES = settlement_books.Shares(creator_bps=7000, node_bps=2000, period_s=60)
WORK = settlement_books.Work(
    record_id=1, tenant_id=str(uuid.uuid4()), avcc_code="MA.156.10005.8361/1X"
)


def purchase(at_ms: int, fen: int = 1001) -> events.PurchaseRecorded:
    return events.PurchaseRecorded(
        purchase_id=str(uuid.uuid4()),
        avcc_code=WORK.avcc_code,
        platform_node="8361",
        user_hash="u",
        revenue_fen=fen,
        occurred_at=at_ms,
    )


async def test_bookings_racing_a_seal_land_whole_in_the_batch_or_in_the_next_period(
    db: AsyncEngine,
) -> None:
    now = int(time.time() * 1000)
    p1 = period_of(now - 3 * 60_000, 60)
    p2 = p1.next()

    async def book(fen: int) -> str | None:
        async with db.begin() as conn:
            return await settlement_books.book(
                conn, purchase(p1.starts_at + 1, fen), WORK, SHARES, now
            )

    async def seal() -> settlement_books.Sealed | None:
        async with db.begin() as conn:
            return await settlement_books.seal(conn, p1.id, issuer="MA.156.10005.8361", now_ms=now)

    await book(1)
    bookings = [book(fen) for fen in range(2, 42)]
    results = await asyncio.gather(*bookings[:20], seal(), *bookings[20:])
    sealed = results[20]
    periods = [r for r in results if isinstance(r, str)]
    async with db.connect() as conn:
        per_period = dict(
            (
                await conn.execute(
                    sa.select(settlement_books.LINES.c.period, sa.func.count()).group_by(
                        settlement_books.LINES.c.period
                    )
                )
            ).all()
        )
    reconciled = await settlement_services.reconcile(db, p1.id)
    assert isinstance(sealed, settlement_books.Sealed)
    assert set(periods) <= {p1.id, p2.id} and len(periods) == 40
    assert per_period[p1.id] == sealed.line_count == 3 * (1 + periods.count(p1.id))
    assert per_period.get(p2.id, 0) == 3 * periods.count(p2.id)
    assert reconciled.ok, reconciled.problems


@pytest.mark.postgres
async def test_a_real_tenant_account_fits_the_ledger_on_postgresql(pg_url: str) -> None:
    engine = store_engine.create_engine(pg_url)
    try:
        work = settlement_books.Work(1, str(uuid.uuid4()), WORK.avcc_code)
        async with engine.begin() as conn:
            await settlement_books.book(conn, purchase(int(time.time() * 1000)), work, SHARES, 0)
    finally:
        await engine.dispose()
