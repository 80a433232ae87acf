"""Idempotency-key expiry: delete keys past their ``expires_at`` and abandoned claims.

A key lives ``ttl`` from its first request (:mod:`aigc_hub.interfaces.http.idempotency`).
Expired rows are deleted ("expired"); an ``in_flight`` claim older than ``in_flight_ttl_ms``
belongs to a request whose process died before it stored or released it, and is deleted
too ("abandoned"), so the client may retry with the key. Each delete is guarded by the
row's ``created_at``, so a key claimed again meanwhile is left alone ("skipped").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

IN_FLIGHT = "in_flight"
DEFAULT_IN_FLIGHT_TTL_MS = 24 * 3600 * 1000


def _target(tenant_id: str, key: str) -> str:
    """An audit target under 200 characters: long keys are shortened with a hash."""
    if len(key) > 120:
        key = key[:100] + "~" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"idempotency:{tenant_id}/{key}"


@dataclass
class IdempotencyExpiryScanner:
    """Deletes expired idempotency keys and abandoned ``in_flight`` claims."""

    engine: AsyncEngine
    clock: Clock
    batch: int = 1000
    interval_s: float = 300.0
    in_flight_ttl_ms: int = DEFAULT_IN_FLIGHT_TTL_MS
    name: str = "idempotency-expiry"

    def _stale(self, now_ms: int) -> sa.ColumnElement[bool]:
        t = tables.idempotency_keys
        return sa.or_(
            t.c.expires_at <= now_ms,
            sa.and_(t.c.status == IN_FLIGHT, t.c.created_at < now_ms - self.in_flight_ttl_ms),
        )

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """Up to ``batch`` expired keys or abandoned claims as of ``now_ms``, oldest first."""
        t = tables.idempotency_keys
        stmt = (
            sa.select(t.c.tenant_id, t.c.key, t.c.status, t.c.created_at, t.c.expires_at)
            .where(self._stale(now_ms))
            .order_by(t.c.expires_at)
            .limit(self.batch)
        )
        async with reader(self.engine) as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            Finding(
                _target(row.tenant_id, row.key),
                {
                    "tenant_id": row.tenant_id,
                    "key": row.key,
                    "status": row.status,
                    "created_at": row.created_at,
                    "expires_at": row.expires_at,
                },
            )
            for row in rows
        ]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Delete the key; "abandoned" for a claim, "expired" for an answer, else "skipped"."""
        t = tables.idempotency_keys
        detail = finding.detail
        async with self.engine.begin() as conn:
            deleted = (
                await conn.execute(
                    t.delete()
                    .where(
                        t.c.tenant_id == detail["tenant_id"],
                        t.c.key == detail["key"],
                        t.c.created_at == detail["created_at"],
                        self._stale(now_ms),
                    )
                    .returning(t.c.key)
                )
            ).first()
        if deleted is None:
            return "skipped"
        return "abandoned" if detail["status"] == IN_FLIGHT else "expired"
