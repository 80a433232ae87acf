"""``avcc-settlement-periods``: seals settlement periods once their grace has passed, run under
the leader lease like avcc's other watchdogs.

A period whose ``ends_at + settlement_grace_s`` has passed and is still OPEN is sealed in one
transaction (``settlement_books.seal``): its count, total and lines root, the canonical
statement, the move to ANCHORING, and ``chain.tx.pending`` (``chain_type=settlement``) through
the outbox, so the batch reaches the chain exactly when the seal commits. Only periods that
received a line have a row, so an empty period costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store.engine import reader

from . import events, settlement_books
from .settlement import PeriodStatus
from .state import Avcc

#: A pass seals at most this many periods (the rest wait for the next pass).
PAGE = 50


@dataclass
class SettlementPeriods:
    """Seals due periods and sends their batches to the chain (see the module docstring)."""

    avcc: Avcc
    name: str = "avcc-settlement-periods"
    interval_s: float = 10.0

    async def find(self, now_ms: int) -> Sequence[Finding]:
        """OPEN periods whose grace has passed, oldest first."""
        p = settlement_books.PERIODS
        due = now_ms - self.avcc.settings.settlement_grace_s * 1000
        query = (
            sa.select(p.c.period)
            .where(p.c.status == PeriodStatus.OPEN.value, p.c.ends_at <= due)
            .order_by(p.c.ends_at)
            .limit(PAGE)
        )
        async with reader(self.avcc.hub.engine) as conn:
            periods = (await conn.execute(query)).scalars().all()
        return [Finding(f"avcc_settlement_period:{p}", {"period": p}) for p in periods]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        """Seal one period and queue its batch for the chain, in one transaction."""
        hub, settings = self.avcc.hub, self.avcc.settings
        issuer = f"MA.{settings.country}.{settings.issuer}.{settings.platform_node}"
        async with hub.transaction() as conn:
            sealed = await settlement_books.seal(
                conn, str(finding.detail["period"]), issuer=issuer, now_ms=now_ms
            )
            if sealed is None:
                return "moved-on"
            await hub.outbox.add(conn, [pending_of(sealed)])
        return f"sealed:{sealed.line_count}"


def pending_of(sealed: settlement_books.Sealed) -> Envelope:
    """The batch's ``chain.tx.pending`` (v2), keyed ``settlement:<batch_id>``."""
    batch_id = sealed.period.batch_id
    pending = events.TxPendingV2(
        avcc_record_id=None,
        chain_type="settlement",
        final_level=None,
        statement=sealed.statement,
        settlement_batch_id=batch_id,
    )
    return Envelope.new(
        events.TX_PENDING,
        pending.model_dump(),
        key=f"settlement:{batch_id}",
        source=events.SETTLEMENT_SVC,
        schema_version=events.CHAIN_EVENTS_VERSION,
    )
