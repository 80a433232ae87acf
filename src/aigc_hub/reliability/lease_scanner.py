"""Expired-lease requeue scanner: work claimed by a holder whose lease ran out goes back.

Pipelines keep a claim on rows they work on (a state such as ``PROCESSING`` plus a
``lease_expires_at`` column). When the worker dies, nothing renews the claim; this scanner
finds rows still in a working state whose lease expired, moves each back with a guarded
transition (so a worker that was only slow and finishes first wins the race), and puts the
event that restarts the work into the outbox, in the same transaction, audited by the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.reliability.outbox import OutboxWriter, Routed
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store.engine import reader
from aigc_hub.store.transitions import transition

#: Builds the event that restarts the work for a requeued row (the row as a mapping).
RequeueEvent = Callable[[dict[str, object]], Envelope | Routed | None]


@dataclass
class ExpiredLeaseScanner:
    """Requeue rows of ``table`` stuck in ``working_states`` past ``lease_column``."""

    name: str
    engine: AsyncEngine
    outbox: OutboxWriter
    table: sa.Table
    working_states: Sequence[str]
    requeue_state: str
    requeue_event: RequeueEvent
    lease_column: str = "lease_expires_at"
    status_column: str = "status"
    version_column: str = "status_version"
    id_column: str = "id"
    interval_s: float = 60.0
    batch: int = 100

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """Rows in a working state whose lease expired before ``now_ms``."""
        t = self.table
        stmt = (
            sa.select(t)
            .where(
                t.c[self.status_column].in_(list(self.working_states)),
                t.c[self.lease_column].is_not(None),
                t.c[self.lease_column] < now_ms,
            )
            .order_by(t.c[self.lease_column])
            .limit(self.batch)
        )
        async with reader(self.engine) as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [
            Finding(
                str(row[self.id_column]),
                {
                    "status": row[self.status_column],
                    "seen_version": row[self.version_column],
                    "lease_expired_at": row[self.lease_column],
                    "row": {k: v for k, v in row.items() if _jsonable(v)},
                },
            )
            for row in rows
        ]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Move the row back to ``requeue_state`` and announce it; "skipped" if it moved on."""
        row = dict(finding.detail["row"])
        event = self.requeue_event(row)
        try:
            async with self.engine.begin() as conn:
                await transition(
                    conn,
                    self.table,
                    row[self.id_column],
                    to=self.requeue_state,
                    allowed_from=[str(finding.detail["status"])],
                    seen_version=int(finding.detail["seen_version"]),
                    values={self.lease_column: None},
                    id_column=self.id_column,
                    status_column=self.status_column,
                    version_column=self.version_column,
                )
                if event is not None:
                    await self.outbox.add(conn, [event])
        except StaleTransition:
            return "skipped"  # the worker finished or renewed meanwhile
        return "requeued"


def _jsonable(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
