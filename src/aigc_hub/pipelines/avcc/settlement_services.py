"""settlement-svc's queries, shared by HTTP and the tests: a tenant's statement for a period,
the periods (admin), a period's reconciliation, and a line's inclusion proof. Reads only;
each runs on a read connection and never holds the write lock."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core import errors
from aigc_hub.store.engine import reader

from . import settlement, settlement_books
from .settlement import PeriodStatus
from .settlement_proofs import make_line_proof

LINES, PERIODS = settlement_books.LINES, settlement_books.PERIODS
#: The chain fields of a period as answered.
_CHAIN = ("batch_id", "lines_root", "tx_hash", "block_height", "crd_address")


class PeriodNotFound(errors.NotFound):
    """No such settlement period (no line was ever booked into it)."""


class LineNotFound(errors.NotFound):
    """No such line in this period (or another tenant's)."""


class NotSealed(errors.Conflict):
    """The period is still open: its lines have no batch to be proved against yet."""


async def _period(conn: AsyncConnection, period: str) -> dict[str, Any]:
    row = (
        (await conn.execute(sa.select(PERIODS).where(PERIODS.c.period == period)))
        .mappings()
        .first()
    )
    if row is None:
        raise PeriodNotFound(f"no settlement period {period}")
    return dict(row)


def _period_answer(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "period": row["period"],
        "starts_at": row["starts_at"],
        "ends_at": row["ends_at"],
        "status": row["status"],
        "line_count": row["line_count"],
        "total_fen": row["total_fen"],
        **{name: row[name] for name in _CHAIN},
        "closed_at": row["closed_at"],
        "anchored_at": row["anchored_at"],
    }


def _line_answer(line: settlement.Line) -> dict[str, Any]:
    return {
        "line_id": line.id,
        "account": line.account,
        "amount_fen": line.amount,
        "purchase_id": line.purchase_id,
        "avcc_code": line.avcc_code,
        "platform_node": line.platform_node,
        "occurred_at": line.occurred_at,
    }


async def account_statement(engine: AsyncEngine, account: str, period: str) -> dict[str, Any]:
    """An account's statement for a period: its lines (ledger id order), their count and
    total, and the period's status and chain fields. PeriodNotFound for an unknown period."""
    settlement.parse_period(period)
    async with reader(engine) as conn:
        row = await _period(conn, period)
        lines = (
            await conn.execute(
                sa.select(LINES)
                .where(LINES.c.period == period, LINES.c.account == account)
                .order_by(LINES.c.id)
            )
        ).mappings()
        answered = [_line_answer(settlement.Line.from_row(dict(line))) for line in lines]
    return {
        "account": account,
        "period": period,
        "status": row["status"],
        "line_count": len(answered),
        "total_fen": sum(line["amount_fen"] for line in answered),
        "lines": answered,
        "period_line_count": row["line_count"],
        "period_total_fen": row["total_fen"],
        **{name: row[name] for name in _CHAIN},
    }


async def tenant_statement(engine: AsyncEngine, tenant_id: str, period: str) -> dict[str, Any]:
    """A tenant's statement for a period (see :func:`account_statement`)."""
    return await account_statement(engine, settlement.tenant_account(tenant_id), period)


async def list_periods(engine: AsyncEngine, *, limit: int = 100) -> list[dict[str, Any]]:
    """The periods, newest first (admin)."""
    async with reader(engine) as conn:
        rows = (
            await conn.execute(sa.select(PERIODS).order_by(PERIODS.c.starts_at.desc()).limit(limit))
        ).mappings()
        return [_period_answer(dict(row)) for row in rows]


@dataclass
class Reconciliation:
    """A period checked against its ledger: each account's sum, the total, the count, the
    root; ``problems`` lists every mismatch (empty: the period reconciles to the fen)."""

    period: str
    status: str
    accounts: dict[str, int]
    lines_total_fen: int
    line_count: int
    purchases: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing disagrees."""
        return not self.problems


async def reconcile(engine: AsyncEngine, period: str) -> Reconciliation:
    """Check a period: every purchase booked whole (one line per party, here); a sealed
    period's stored count, total and lines root equal those recomputed from its lines now;
    and the ledger's running account balances equal the sums of their lines."""
    settlement.parse_period(period)
    async with reader(engine) as conn:
        row = await _period(conn, period)
        lines = await settlement_books.period_lines(conn, period)
        balances = await _balances_disagreeing(conn)
    accounts: dict[str, int] = {}
    parties: dict[str, int] = {}
    for line in lines:
        accounts[line.account] = accounts.get(line.account, 0) + line.amount
        parties[line.purchase_id] = parties.get(line.purchase_id, 0) + 1
    total = sum(accounts.values())
    found = Reconciliation(period, row["status"], accounts, total, len(lines), len(parties))
    parts = len(settlement.Party)
    found.problems += [
        f"purchase {p}: {n} of {parts} lines" for p, n in parties.items() if n != parts
    ]
    if row["status"] != PeriodStatus.OPEN:
        texts = [line.text() for line in lines]
        root = (await asyncio.to_thread(settlement.lines_tree, texts)).root().hex()
        for name, stored, now in (
            ("line_count", row["line_count"], len(lines)),
            ("total_fen", row["total_fen"], total),
            ("lines_root", row["lines_root"], root),
        ):
            if stored != now:
                found.problems.append(f"{name}: sealed {stored}, ledger now {now}")
    found.problems += balances
    return found


async def _balances_disagreeing(conn: AsyncConnection) -> list[str]:
    """Accounts whose running balance is not the sum of their lines (a write bypassed the
    ledger)."""
    accounts = settlement_books.ACCOUNTS
    sums = (
        sa.select(LINES.c.account, sa.func.sum(LINES.c.balance_delta).label("total"))
        .group_by(LINES.c.account)
        .subquery()
    )
    rows = await conn.execute(
        sa.select(sums.c.account, sums.c.total, accounts.c.available)
        .select_from(sums.outerjoin(accounts, accounts.c.account == sums.c.account))
        .where(sa.or_(accounts.c.available.is_(None), accounts.c.available != sums.c.total))
    )
    return [f"account {r.account}: balance {r.available}, lines {r.total}" for r in rows]


async def line_proof(
    engine: AsyncEngine, period: str, line_id: int, *, tenant_id: str | None
) -> dict[str, Any]:
    """The inclusion proof of one line of a sealed period against its ``lines_root`` (see
    ``settlement_proofs``); a tenant may ask only for its own lines (LineNotFound else),
    NotSealed while the period is open."""
    settlement.parse_period(period)
    async with reader(engine) as conn:
        row = await _period(conn, period)
        if row["status"] == PeriodStatus.OPEN:
            raise NotSealed(f"period {period} is still open; its batch is sealed after it ends")
        lines = await settlement_books.period_lines(conn, period)
    index = next((i for i, line in enumerate(lines) if line.id == line_id), None)
    owner = None if tenant_id is None else settlement.tenant_account(tenant_id)
    if index is None or (owner is not None and lines[index].account != owner):
        raise LineNotFound(f"no line {line_id} of yours in period {period}")
    texts = [line.text() for line in lines]
    return await asyncio.to_thread(
        make_line_proof, texts, index, str(row["statement"]), row["chain_proof"]
    )
