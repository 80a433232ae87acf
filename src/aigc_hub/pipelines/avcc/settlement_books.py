"""The settlement ledger's repository: book a purchase's lines into an open period, seal a
period into its batch, record the batch's anchor. Each function runs in the caller's
transaction (a handler's staged write, a scanner's repair), so the lines, the period's move
and the events they cause commit together or not at all.

**Booking never races sealing.** Both take the period's row first: ``SELECT … FOR UPDATE`` on
PostgreSQL; on SQLite every write transaction begins IMMEDIATE, so writers are serialized
already and the clause is dropped. A booking that holds the row sees it OPEN and its lines
commit before the sealer reads the period's lines; a booking that comes after the seal finds
the row ANCHORING and books into the next open period. A sealed batch never gains a line and
a late purchase is never lost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.reliability.ledger import Entry, Ledger
from aigc_hub.store.dialects import dialect_of

from . import events, settlement
from .models import avcc_records
from .settlement import Period, PeriodStatus
from .settlement_tables import avcc_settlement_periods, settlement_ledger

#: The backbone ledger over avcc's settlement tables.
LEDGER = Ledger(settlement_ledger)
LINES = settlement_ledger.entries
ACCOUNTS = settlement_ledger.accounts
PERIODS = avcc_settlement_periods


@dataclass(frozen=True)
class Work:
    """The coded work a purchase is of: whose share it is."""

    record_id: int
    tenant_id: str
    avcc_code: str


@dataclass(frozen=True)
class Shares:
    """What settlement-svc needs of the settings to split a purchase."""

    creator_bps: int
    node_bps: int
    period_s: int


@dataclass(frozen=True)
class Sealed:
    """A period just sealed: its batch and the statement to notarize."""

    period: Period
    line_count: int
    total_fen: int
    statement: str


async def work_of(conn: AsyncConnection, avcc_code: str) -> Work | None:
    """The work that was issued ``avcc_code``, or None (no such code was ever issued)."""
    row = (
        await conn.execute(
            sa.select(avcc_records.c.id, avcc_records.c.tenant_id).where(
                avcc_records.c.avcc_code == avcc_code
            )
        )
    ).first()
    return None if row is None else Work(int(row.id), str(row.tenant_id), avcc_code)


async def booked_period(conn: AsyncConnection, purchase_id: str) -> str | None:
    """The period a purchase's lines were booked into, or None if it was never booked."""
    key = settlement.business_id(purchase_id, settlement.Party.PLATFORM)
    found = (
        await conn.execute(
            sa.select(LINES.c.period).where(
                LINES.c.business_type == settlement.BUSINESS_TYPE, LINES.c.business_id == key
            )
        )
    ).scalar_one_or_none()
    return None if found is None else str(found)


async def open_period(conn: AsyncConnection, at_ms: int, period_s: int, now_ms: int) -> Period:
    """The period of ``at_ms`` if still OPEN, else the earliest OPEN one after it; its row is
    created on first use (an empty period costs nothing) and locked until the commit."""
    period = settlement.period_of(at_ms, period_s)
    while True:
        await conn.execute(
            dialect_of(conn)
            .insert(PERIODS)
            .values(
                period=period.id,
                starts_at=period.starts_at,
                ends_at=period.ends_at,
                status=PeriodStatus.OPEN.value,
                updated_at=now_ms,
            )
            .on_conflict_do_nothing()
        )
        status = (
            await conn.execute(
                sa.select(PERIODS.c.status).where(PERIODS.c.period == period.id).with_for_update()
            )
        ).scalar_one()
        if status == PeriodStatus.OPEN:
            return period
        period = period.next()


async def book(
    conn: AsyncConnection,
    purchase: events.PurchaseRecorded,
    work: Work,
    shares: Shares,
    now_ms: int,
) -> str | None:
    """Append the purchase's three lines into an open period (see the module docstring);
    the period's id, or None when the purchase was booked before (nothing written)."""
    if await booked_period(conn, purchase.purchase_id) is not None:
        return None
    period = await open_period(conn, purchase.occurred_at, shares.period_s, now_ms)
    extra = {
        "period": period.id,
        "purchase_id": purchase.purchase_id,
        "avcc_code": work.avcc_code,
        "record_id": work.record_id,
        "platform_node": purchase.platform_node,
        "occurred_at": purchase.occurred_at,
    }
    for share in settlement.split(
        purchase.revenue_fen,
        tenant_id=work.tenant_id,
        platform_node=purchase.platform_node,
        creator_bps=shares.creator_bps,
        node_bps=shares.node_bps,
    ):
        entry = Entry(
            account=share.account,
            kind=settlement.CREDIT,
            business_type=settlement.BUSINESS_TYPE,
            business_id=settlement.business_id(purchase.purchase_id, share.party),
            amount=share.amount,
            delta=share.amount,
            extra=extra,
        )
        await LEDGER.append(conn, entry, now_ms=now_ms)
    return period.id


async def period_lines(conn: AsyncConnection, period: str) -> list[settlement.Line]:
    """The period's lines in ledger id order (the order of its batch's leaves)."""
    rows = await conn.execute(sa.select(LINES).where(LINES.c.period == period).order_by(LINES.c.id))
    return [settlement.Line.from_row(dict(row)) for row in rows.mappings()]


def _root_of(texts: list[str]) -> bytes:
    return settlement.lines_tree(texts).root()


async def seal(conn: AsyncConnection, period_id: str, *, issuer: str, now_ms: int) -> Sealed | None:
    """Seal an OPEN period: count, total, the Merkle root of its lines, the statement, and
    the move to ANCHORING; None when it is not OPEN (sealed meanwhile)."""
    row = (
        (
            await conn.execute(
                sa.select(PERIODS).where(PERIODS.c.period == period_id).with_for_update()
            )
        )
        .mappings()
        .first()
    )
    if row is None or row["status"] != PeriodStatus.OPEN:
        return None
    period = Period(period_id, int(row["starts_at"]), int(row["ends_at"]))
    lines = await period_lines(conn, period_id)
    texts = [line.text() for line in lines]
    # Hashing a big period's lines is CPU work: off the event loop.
    root = await asyncio.to_thread(_root_of, texts)
    total = sum(line.amount for line in lines)
    statement = settlement.statement_text(
        issuer=issuer, period=period, line_count=len(lines), total_fen=total, lines_root=root
    )
    await conn.execute(
        sa.update(PERIODS)
        .where(PERIODS.c.period == period_id, PERIODS.c.status == PeriodStatus.OPEN.value)
        .values(
            status=PeriodStatus.ANCHORING.value,
            batch_id=period.batch_id,
            line_count=len(lines),
            total_fen=total,
            lines_root=root.hex(),
            statement=statement,
            closed_at=now_ms,
            updated_at=now_ms,
        )
    )
    return Sealed(period, len(lines), total, statement)


async def anchor(conn: AsyncConnection, confirmed: events.TxConfirmedV2, now_ms: int) -> bool:
    """Record the chain's confirmation of a batch: ANCHORING → ANCHORED with its fields and
    proof; False (nothing written) when the batch is not ANCHORING (a redelivery)."""
    moved = await conn.execute(
        sa.update(PERIODS)
        .where(
            PERIODS.c.batch_id == confirmed.settlement_batch_id,
            PERIODS.c.status == PeriodStatus.ANCHORING.value,
        )
        .values(
            status=PeriodStatus.ANCHORED.value,
            tx_hash=confirmed.tx_hash,
            block_height=confirmed.block_height,
            crd_address=confirmed.crd_address,
            chain_proof=confirmed.proof,
            anchored_at=now_ms,
            updated_at=now_ms,
        )
    )
    return moved.rowcount == 1
