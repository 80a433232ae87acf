"""The audit log: every operator action is recorded with who, what, when and the result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.store import tables

A = tables.audit_log


@dataclass(frozen=True)
class AuditEntry:
    """One recorded action."""

    id: int
    at: int
    actor: str
    action: str
    target: str
    result: str
    detail: Mapping[str, Any]


async def record(
    conn: AsyncConnection,
    *,
    at: int,
    actor: str,
    action: str,
    target: str,
    result: str,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Append an audit row in the caller's transaction (so the action and its record agree)."""
    await conn.execute(
        A.insert().values(
            at=at,
            actor=actor,
            action=action,
            target=target,
            result=result,
            detail=dict(detail or {}),
        )
    )


async def recent(
    engine: AsyncEngine, *, limit: int = 100, action: str | None = None
) -> list[AuditEntry]:
    """The newest audit entries first, optionally of one action."""
    stmt = sa.select(A).order_by(A.c.id.desc()).limit(limit)
    if action:
        stmt = stmt.where(A.c.action == action)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return [
        AuditEntry(r.id, r.at, r.actor, r.action, r.target, r.result, r.detail or {}) for r in rows
    ]
