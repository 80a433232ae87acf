"""An append-only ledger with one business key per action: credits, settlements, payouts.

Every movement is a row of the caller's entries table whose ``(business_type, business_id)``
is unique, so a retried settle or release is a no-op rather than a second charge; rows are
never edited, a correction is a new row. The accounts table holds each account's
``available`` amount, the running sum of its rows' ``balance_delta``, moved in the same
transaction as the row: a hold is one guarded update (``available >= amount``), race-free
on SQLite and PostgreSQL alike.

The caller owns the tables (its migrations, its extra columns such as a task id or a
currency) and names the account column; :func:`define_ledger_tables` builds a pair of the
expected shape for a pipeline that has none yet. The entries table needs ``business_type``,
``business_id``, ``type``, ``amount`` (>= 0), ``balance_delta`` and ``created_at``; the
accounts table needs ``available`` and ``updated_at``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.errors import PermanentError
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.tables import BigId


class InsufficientFunds(PermanentError):
    """The account holds less than the hold would take."""

    def __init__(self, available: int, required: int, unit: str = "") -> None:
        self.available = available
        self.required = required
        what = f"{required} {unit}".strip()
        super().__init__(f"{what} required, {available} available")


@dataclass(frozen=True)
class Entry:
    """One ledger movement: its business key, its kind, and its effect on ``available``.

    ``extra`` fills the caller's own columns (task id, user, currency, status).
    """

    account: str
    kind: str
    business_type: str
    business_id: str
    amount: int
    delta: int
    extra: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class LedgerTables:
    """The caller's entries and accounts tables and the account column both share."""

    entries: sa.Table
    accounts: sa.Table
    account_column: str = "account_id"


def define_ledger_tables(
    name: str,
    metadata: sa.MetaData,
    *extra: sa.Column[object],
    account_column: str = "account_id",
    account_length: int = 36,
) -> LedgerTables:
    """Tables ``<name>_ledger`` and ``<name>_accounts`` of the expected shape, plus ``extra``
    columns on the entries table (the caller still writes their migration). Accounts are
    strings of at most ``account_length`` characters (a UUID's 36 by default)."""
    entries = sa.Table(
        f"{name}_ledger",
        metadata,
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column(account_column, sa.String(account_length), nullable=False, index=True),
        sa.Column("business_type", sa.String(60), nullable=False),
        sa.Column("business_id", sa.String(100), nullable=False),
        sa.Column("type", sa.String(20), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("balance_delta", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        *extra,
        sa.UniqueConstraint("business_type", "business_id"),
    )
    accounts = sa.Table(
        f"{name}_accounts",
        metadata,
        sa.Column(account_column, sa.String(account_length), primary_key=True),
        sa.Column("available", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    )
    return LedgerTables(entries, accounts, account_column)


class Ledger:
    """Appends, holds and sums over one pair of ledger tables."""

    def __init__(self, tables: LedgerTables) -> None:
        self.tables = tables
        accounts = tables.accounts
        self._account = accounts.c[tables.account_column]
        # The guarded hold, built once: it is on the API's hot path.
        self._take = (
            sa.update(accounts)
            .where(
                self._account == sa.bindparam("account"),
                accounts.c.available >= sa.bindparam("amount"),
            )
            .values(
                available=accounts.c.available - sa.bindparam("amount"),
                updated_at=sa.bindparam("now"),
            )
            .returning(accounts.c.available)
        )

    def _row(self, entry: Entry, now_ms: int) -> dict[str, object]:
        if entry.amount < 0:
            raise ValueError("ledger amounts are never negative; the entry kind gives the sign")
        return {
            **entry.extra,
            self.tables.account_column: entry.account,
            "business_type": entry.business_type,
            "business_id": entry.business_id,
            "type": entry.kind,
            "amount": entry.amount,
            "balance_delta": entry.delta,
            "created_at": now_ms,
        }

    async def append(self, conn: AsyncConnection, entry: Entry, *, now_ms: int) -> bool:
        """Write ``entry`` and move its account by ``entry.delta``; False (nothing written)
        when its business key is already in the ledger."""
        entries = self.tables.entries
        inserted = (
            await conn.execute(
                dialect_of(conn)
                .insert(entries)
                .values(self._row(entry, now_ms))
                .on_conflict_do_nothing()
                .returning(entries.c.business_id)
            )
        ).scalar_one_or_none()
        if inserted is None:
            return False
        if entry.delta:
            await self._move_account(conn, entry.account, entry.delta, now_ms)
        return True

    async def hold(self, conn: AsyncConnection, entry: Entry, *, now_ms: int) -> None:
        """Take ``entry.amount`` from its account only while that much is available, and
        write ``entry`` (its delta must be ``-amount``).

        Raises :class:`InsufficientFunds` with nothing written. A second hold with the same
        business key fails on the unique key and the caller's transaction rolls both back.
        """
        if entry.delta != -entry.amount:
            raise ValueError("a hold takes exactly its amount: delta must be -amount")
        params = {"account": entry.account, "amount": entry.amount, "now": now_ms}
        took = (await conn.execute(self._take, params)).scalar_one_or_none()
        if took is None:
            raise InsufficientFunds(await self.available(conn, entry.account), entry.amount)
        await conn.execute(self.tables.entries.insert(), self._row(entry, now_ms))

    async def available(self, conn: AsyncConnection, account: str) -> int:
        """The account's available amount (0 for an account never moved)."""
        accounts = self.tables.accounts
        found = (
            await conn.execute(sa.select(accounts.c.available).where(self._account == account))
        ).scalar_one_or_none()
        return int(found or 0)

    async def total(self, conn: AsyncConnection, account: str) -> int:
        """The sum of the account's ``balance_delta``: equals :meth:`available` unless a
        write bypassed the ledger (the reconciliation check)."""
        entries = self.tables.entries
        found = (
            await conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(entries.c.balance_delta), 0)).where(
                    entries.c[self.tables.account_column] == account
                )
            )
        ).scalar_one()
        return int(found)

    async def account_of(
        self, conn: AsyncConnection, business_type: str, business_id: str
    ) -> str | None:
        """The account the entry with this business key moved, or None if there is none."""
        entries = self.tables.entries
        found = (
            await conn.execute(
                sa.select(entries.c[self.tables.account_column]).where(
                    entries.c.business_type == business_type,
                    entries.c.business_id == business_id,
                )
            )
        ).scalar_one_or_none()
        return None if found is None else str(found)

    async def _move_account(
        self, conn: AsyncConnection, account: str, delta: int, now_ms: int
    ) -> None:
        accounts = self.tables.accounts
        moved = (
            await conn.execute(
                sa.update(accounts)
                .where(self._account == account)
                .values(available=accounts.c.available + delta, updated_at=now_ms)
                .returning(self._account)
            )
        ).scalar_one_or_none()
        if moved is None:
            await conn.execute(
                dialect_of(conn)
                .insert(accounts)
                .values(
                    {self.tables.account_column: account, "available": delta, "updated_at": now_ms}
                )
                .on_conflict_do_update(
                    index_elements=[self._account],
                    set_={"available": accounts.c.available + delta, "updated_at": now_ms},
                )
            )
