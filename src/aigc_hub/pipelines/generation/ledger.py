"""Credits: an append-only ledger with one business key per action (seed 004 §3.8.5).

Every movement is a ``credit_ledger`` row whose ``(business_type, business_id)`` is unique, so
a retried settle or release is a no-op rather than a second charge. ``credit_accounts``
holds each tenant's available credits, the running sum of its rows' ``balance_delta``,
updated in the same transaction as the row: a reservation is one guarded update
(``available >= amount``), race-free on SQLite and PostgreSQL alike.

Effects on available credits: GRANT +x, RESERVE -reserved, SETTLE +(reserved - actual),
RELEASE +reserved, REFUND +x, COMPENSATE +x.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.errors import PermanentError
from aigc_hub.pipelines.generation.models import credit_accounts, credit_ledger
from aigc_hub.store.dialects import dialect_of

UNIT = "credit"


class EntryType(enum.StrEnum):
    GRANT = "GRANT"
    RESERVE = "RESERVE"
    SETTLE = "SETTLE"
    RELEASE = "RELEASE"
    REFUND = "REFUND"
    COMPENSATE = "COMPENSATE"


class InsufficientCredits(PermanentError):
    """The tenant has fewer available credits than the task would reserve."""

    def __init__(self, available: int, required: int) -> None:
        self.available = available
        self.required = required
        super().__init__(f"{required} credits required, {available} available")


@dataclass(frozen=True)
class Balance:
    """A tenant's credits: available now, held by open reservations, and the ledger's sum."""

    available: int
    reserved: int
    ledger_sum: int


def _business_key(kind: EntryType, task_or_grant_id: str) -> tuple[str, str]:
    return f"generation.{kind.value.lower()}", task_or_grant_id


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
    user_id: str | None = None,
) -> bool:
    """Insert one ledger row unless its business key exists; move the account with it."""
    if amount < 0:
        raise ValueError("ledger amounts are never negative; the entry type gives the sign")
    business_type, business_id = _business_key(kind, business_id)
    inserted = (
        await conn.execute(
            dialect_of(conn)
            .insert(credit_ledger)
            .values(
                tenant_id=tenant_id,
                user_id=user_id,
                task_id=task_id,
                business_type=business_type,
                business_id=business_id,
                type=kind.value,
                amount=amount,
                balance_delta=delta,
                currency_or_credit=UNIT,
                status="posted",
                created_at=now_ms,
            )
            .on_conflict_do_nothing()
            .returning(credit_ledger.c.id)
        )
    ).scalar_one_or_none()
    if inserted is None:
        return False
    if delta:
        await _move_account(conn, tenant_id, delta, now_ms)
    return True


async def _move_account(conn: AsyncConnection, tenant_id: str, delta: int, now_ms: int) -> None:
    moved = (
        await conn.execute(
            sa.update(credit_accounts)
            .where(credit_accounts.c.tenant_id == tenant_id)
            .values(available=credit_accounts.c.available + delta, updated_at=now_ms)
            .returning(credit_accounts.c.tenant_id)
        )
    ).scalar_one_or_none()
    if moved is None:
        await conn.execute(
            dialect_of(conn)
            .insert(credit_accounts)
            .values(tenant_id=tenant_id, available=delta, updated_at=now_ms)
            .on_conflict_do_update(
                index_elements=[credit_accounts.c.tenant_id],
                set_={"available": credit_accounts.c.available + delta, "updated_at": now_ms},
            )
        )


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
    business_type, business_id = _business_key(EntryType.GRANT, grant_id)
    return (
        await conn.execute(
            sa.select(credit_ledger.c.tenant_id).where(
                credit_ledger.c.business_type == business_type,
                credit_ledger.c.business_id == business_id,
            )
        )
    ).scalar_one_or_none()


#: The guarded hold: takes ``amount`` only while that much is available (built once: the
#: API's hot path).
_TAKE = (
    sa.update(credit_accounts)
    .where(
        credit_accounts.c.tenant_id == sa.bindparam("tenant"),
        credit_accounts.c.available >= sa.bindparam("amount"),
    )
    .values(
        available=credit_accounts.c.available - sa.bindparam("amount"),
        updated_at=sa.bindparam("now"),
    )
    .returning(credit_accounts.c.available)
)


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
    took = (
        await conn.execute(_TAKE, {"tenant": tenant_id, "amount": amount, "now": now_ms})
    ).scalar_one_or_none()
    if took is None:
        available = (
            await conn.execute(
                sa.select(credit_accounts.c.available).where(
                    credit_accounts.c.tenant_id == tenant_id
                )
            )
        ).scalar_one_or_none()
        raise InsufficientCredits(int(available or 0), amount)
    business_type, business_id = _business_key(EntryType.RESERVE, task_id)
    await conn.execute(
        credit_ledger.insert(),
        {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "task_id": task_id,
            "business_type": business_type,
            "business_id": business_id,
            "type": EntryType.RESERVE.value,
            "amount": amount,
            "balance_delta": -amount,
            "currency_or_credit": UNIT,
            "status": "posted",
            "created_at": now_ms,
        },
    )


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
    available = (
        await conn.execute(
            sa.select(credit_accounts.c.available).where(credit_accounts.c.tenant_id == tenant_id)
        )
    ).scalar_one_or_none()
    ledger_sum = (
        await conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(credit_ledger.c.balance_delta), 0)).where(
                credit_ledger.c.tenant_id == tenant_id
            )
        )
    ).scalar_one()
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
    return Balance(int(available or 0), int(reserved), int(ledger_sum))
