"""avcc's watchdogs, run under a leader lease. They never write an outcome themselves: they
put a stuck work back where the normal path finishes it (every handler is guarded, so a
work that was only slow is not harmed), and they settle chain submissions whose outcome is
unknown by reading the chain.

* ``avcc-stuck`` — a record still in a waiting state ``AIGC_HUB_AVCC_STUCK_AFTER_S`` after its
  last move gets the event of that state again: APPLIED → ``avcc.apply.created``,
  APPROVED → ``review.task.finished``, ANCHORING → ``chain.tx.pending`` (rebuilt from the
  record), CODED without its signed copy → ``avcc.code.issued``.
* ``avcc-anchors`` — EVM anchors left SENT (a process died between broadcast and receipt)
  are reconciled from the chain: the receipt, or the same signed bytes again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.scanners import Finding
from aigc_hub.store.engine import reader

from . import events, provenance
from .evm_tables import evm_anchors
from .models import avcc_records
from .state import Avcc
from .statements import statement_of
from .states import RecordStatus

#: A pass handles at most this many stuck records (the rest wait for the next pass).
PAGE = 200
_WAITING = (RecordStatus.APPLIED, RecordStatus.APPROVED, RecordStatus.ANCHORING)


@dataclass
class StuckRecords:
    avcc: Avcc
    name: str = "avcc-stuck"
    interval_s: float = 30.0

    async def find(self, now_ms: int) -> Sequence[Finding]:
        t = avcc_records
        before = now_ms - self.avcc.settings.stuck_after_s * 1000
        unsigned = sa.and_(
            t.c.status == RecordStatus.CODED.value,
            t.c.c2pa_key.is_(None),
            t.c.content_type.in_(provenance.SUPPORTED_MIME_TYPES),
        )
        query = (
            sa.select(t.c.id, t.c.status, t.c.status_version)
            .where(t.c.updated_at < before)
            .where(sa.or_(t.c.status.in_([s.value for s in _WAITING]), unsigned))
            .order_by(t.c.updated_at)
            .limit(PAGE)
        )
        async with reader(self.avcc.hub.engine) as conn:
            rows = (await conn.execute(query)).all()
        return [
            Finding(f"avcc_record:{r.id}", {"id": r.id, "status": r.status, "v": r.status_version})
            for r in rows
        ]

    async def repair(self, finding: Finding, now_ms: int) -> str:
        hub, t = self.avcc.hub, avcc_records
        async with hub.transaction() as conn:
            row = (
                (await conn.execute(sa.select(t).where(t.c.id == finding.detail["id"])))
                .mappings()
                .first()
            )
            if row is None or (row["status"], row["status_version"]) != (
                finding.detail["status"],
                finding.detail["v"],
            ):
                return "moved-on"
            event = self._event_for(dict(row))
            # Touch the row so the next pass waits another full period for it.
            await conn.execute(sa.update(t).where(t.c.id == row["id"]).values(updated_at=now_ms))
            await hub.outbox.add(conn, [event])
        return f"re-announced:{event.event_type}"

    def _event_for(self, row: dict[str, Any]) -> Envelope:
        status, record_id = RecordStatus(row["status"]), int(row["id"])
        payload: dict[str, Any]
        version = 1
        if status is RecordStatus.APPLIED:
            name, source = events.APPLY_CREATED, events.CODE_SVC
            payload = events.ApplyCreated(
                request_id=row["request_id"],
                avcc_record_id=record_id,
                content_url=row["content_url"],
                content_hash=row["content_hash"],
                ai_tool_info=events.AiToolInfo(
                    model_name=row["model_name"], model_version=row["model_version"]
                ),
                priority=row["priority"],
            ).model_dump()
        elif status is RecordStatus.APPROVED:
            name, source = events.REVIEW_FINISHED, events.REVIEW_SVC
            payload = events.ReviewFinished(
                request_id=row["request_id"],
                avcc_record_id=record_id,
                review_report_id=row["review_report_id"],
                decision="approved",
                final_level=row["final_level"],
                overall_score=float(row["overall_score"] or 0.0),
                report_hash=row["report_hash"],
            ).model_dump()
        elif status is RecordStatus.ANCHORING:
            name, source = events.TX_PENDING, events.CODE_SVC
            payload = events.TxPendingV2(
                avcc_record_id=record_id,
                chain_type="copyright_main",
                final_level=row["final_level"],
                statement=statement_of(self.avcc.settings, row),
            ).model_dump()
            version = events.CHAIN_EVENTS_VERSION
        else:
            name, source = events.CODE_ISSUED, events.CODE_SVC
            payload = events.CodeIssued(
                avcc_record_id=record_id, avcc_code=row["avcc_code"]
            ).model_dump()
        return Envelope.new(
            name,
            payload,
            key=str(record_id),
            source=source,
            tenant_id=row["tenant_id"],
            schema_version=version,
        )


@dataclass
class UnknownAnchors:
    avcc: Avcc
    name: str = "avcc-anchors"
    interval_s: float = 30.0

    async def find(self, now_ms: int) -> Sequence[Finding]:
        if self.avcc.settings.chain != "evm":
            return []
        before = now_ms - 60_000  # younger ones may still be waiting for their receipt
        async with reader(self.avcc.hub.engine) as conn:
            sent = (
                await conn.execute(
                    sa.select(evm_anchors.c.tree_size)
                    .where(evm_anchors.c.status == "SENT", evm_anchors.c.updated_at < before)
                    .limit(1)
                )
            ).first()
        return [Finding("avcc_evm_anchors", {})] if sent else []

    async def repair(self, finding: Finding, now_ms: int) -> str:
        return f"settled:{await self.avcc.chain.reconcile()}"
