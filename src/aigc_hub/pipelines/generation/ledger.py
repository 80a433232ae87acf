"""Credits: generation's rules on the backbone's append-only ledger (seed 004 §3.8.5).

The ledger itself (unique business keys, balance as the sum, the guarded hold) is
:mod:`aigc_hub.reliability.ledger`; this module keeps what is generation's: the
``credit_ledger`` / ``credit_accounts`` tables, the entry types and their business keys
(``generation.<type>`` + the task or grant id), and the open-reservation sum.

Effects on available credits: GRANT +x, RESERVE -reserved, SETTLE +(reserved - actual),
RELEASE +reserved, REFUND +x, COMPENSATE +x.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.pipelines.generation.models import credit_accounts, credit_ledger
from aigc_hub.reliability.ledger import Entry, InsufficientFunds, Ledger, LedgerTables

UNIT = "credit"

#: The backbone ledger over generation's own tables (the account is the tenant).
CREDITS = Ledger(LedgerTables(credit_ledger, credit_accounts, account_column="tenant_id"))


class EntryType(enum.StrEnum):
    GRANT = "GRANT"
    RESERVE = "RESERVE"
    SETTLE = "SETTLE"
    RELEASE = "RELEASE"
    REFUND = "REFUND"
    COMPENSATE = "COMPENSATE"


class InsufficientCredits(InsufficientFunds):
    """The tenant has fewer available credits than the task would reserve."""

    def __init__(self, available: int, required: int) -> None:
        super().__init__(available, required, unit="credits")


@dataclass(frozen=True)
class Balance:
    """A tenant's credits: available now, held by open reservations, and the ledger's sum."""

    available: int
    reserved: int
    ledger_sum: int


def _business_key(kind: EntryType, task_or_grant_id: str) -> tuple[str, str]:
    return f"generation.{kind.value.lower()}", task_or_grant_id


def _entry(
    kind: EntryType,
    business_id: str,
    *,
    tenant_id: str,
    amount: int,
    delta: int,
    task_id: str | None = None,
    user_id: str | None = None,
) -> Entry:
    business_type, business_id = _business_key(kind, business_id)
    return Entry(
        account=tenant_id,
        kind=kind.value,
        business_type=business_type,
        business_id=business_id,
        amount=amount,
        delta=delta,
        extra={
            "user_id": user_id,
            "task_id": task_id,
            "currency_or_credit": UNIT,
            "status": "posted",
        },
    )


async def _append(
    conn: AsyncConnection,
    *,
    kind: EntryType,
    business_id: str,
    tenant_id: str,
    amount: int,
    delta: int,
    now_ms: int,
    task_id: str | None = None,
) -> bool:
    """Write one entry unless its business key exists; the account moves with it."""
    entry = _entry(
        kind, business_id, tenant_id=tenant_id, amount=amount, delta=delta, task_id=task_id
    )
    return await CREDITS.append(conn, entry, now_ms=now_ms)


async def grant(
    conn: AsyncConnection, *, tenant_id: str, amount: int, grant_id: str, now_ms: int
) -> bool:
    """Add credits to a tenant (a top-up); ``grant_id`` makes a repeated grant a no-op."""
    if amount <= 0:
        raise ValueError("a grant must be positive")
    return await _append(
        conn,
        kind=EntryType.GRANT,
        business_id=grant_id,
        tenant_id=tenant_id,
        amount=amount,
        delta=amount,
        now_ms=now_ms,
    )


async def grant_recipient(conn: AsyncConnection, grant_id: str) -> str | None:
    """The tenant that ``grant_id`` was granted to, or None when it was never used."""
    return await CREDITS.account_of(conn, *_business_key(EntryType.GRANT, grant_id))


async def reserve(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    task_id: str,
    amount: int,
    now_ms: int,
    user_id: str | None = None,
) -> None:
    """Hold ``amount`` for ``task_id``; raises :class:`InsufficientCredits` (nothing written)."""
    entry = _entry(
        EntryType.RESERVE,
        task_id,
        tenant_id=tenant_id,
        amount=amount,
        delta=-amount,
        task_id=task_id,
        user_id=user_id,
    )
    try:
        await CREDITS.hold(conn, entry, now_ms=now_ms)
    except InsufficientFunds as exc:
        raise InsufficientCredits(exc.available, exc.required) from None


async def settle(
    conn: AsyncConnection, *, tenant_id: str, task_id: str, reserved: int, actual: int, now_ms: int
) -> bool:
    """Charge the actual cost and return the rest of the hold; False if already settled.

    A cost above the reservation is charged in full (the provider billed it); the difference
    shows in the balance, and the reconciliation report lists it.
    """
    return await _append(
        conn,
        kind=EntryType.SETTLE,
        business_id=task_id,
        tenant_id=tenant_id,
        task_id=task_id,
        amount=actual,
        delta=reserved - actual,
        now_ms=now_ms,
    )


async def release(
    conn: AsyncConnection, *, tenant_id: str, task_id: str, reserved: int, now_ms: int
) -> bool:
    """Return the whole hold (failure or cancel before any cost); False if already released."""
    return await _append(
        conn,
        kind=EntryType.RELEASE,
        business_id=task_id,
        tenant_id=tenant_id,
        task_id=task_id,
        amount=reserved,
        delta=reserved,
        now_ms=now_ms,
    )


async def refund(
    conn: AsyncConnection, *, tenant_id: str, refund_id: str, amount: int, now_ms: int, task_id: str
) -> bool:
    """Give back credits already settled (policy decision); one per ``refund_id``."""
    return await _append(
        conn,
        kind=EntryType.REFUND,
        business_id=refund_id,
        tenant_id=tenant_id,
        task_id=task_id,
        amount=amount,
        delta=amount,
        now_ms=now_ms,
    )


async def compensate(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    compensation_id: str,
    amount: int,
    now_ms: int,
    task_id: str | None = None,
) -> bool:
    """Credit a tenant for a platform failure (a goodwill or SLA credit, seed §3.8.5): never
    an edit of an old row, always a new one; one per ``compensation_id``."""
    return await _append(
        conn,
        kind=EntryType.COMPENSATE,
        business_id=compensation_id,
        tenant_id=tenant_id,
        task_id=task_id,
        amount=amount,
        delta=amount,
        now_ms=now_ms,
    )


async def balance(conn: AsyncConnection, tenant_id: str) -> Balance:
    """The tenant's available credits, open reservations, and the ledger's own sum."""
    closed = sa.select(credit_ledger.c.task_id).where(
        credit_ledger.c.tenant_id == tenant_id,
        credit_ledger.c.type.in_([EntryType.SETTLE.value, EntryType.RELEASE.value]),
    )
    reserved = (
        await conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(credit_ledger.c.amount), 0)).where(
                credit_ledger.c.tenant_id == tenant_id,
                credit_ledger.c.type == EntryType.RESERVE.value,
                credit_ledger.c.task_id.not_in(closed),
            )
        )
    ).scalar_one()
    return Balance(
        await CREDITS.available(conn, tenant_id),
        int(reserved),
        await CREDITS.total(conn, tenant_id),
    )
