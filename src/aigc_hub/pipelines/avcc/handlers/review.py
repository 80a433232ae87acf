"""``avcc-review`` (review-svc): ``topic.avcc.apply.created`` → the review →
``topic.review.task.finished`` (seed 000 §9.2.2).

The checks run outside any transaction (``checks.examine``) and the report is stored before
the commit (the same key each time, so a retried review overwrites its own unreferenced
copy); then one transaction records the report row, the decision (a guarded
``APPLIED → …`` move), the fingerprint, the human queue entry for ``need_human`` works, and
the event. A redelivery finds the record moved on and does nothing.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub import moderation
from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext

from .. import events, records, reports, rules
from ..checks import examine
from ..models import avcc_fingerprints, avcc_human_reviews, avcc_review_reports
from ..state import Avcc
from ..states import RecordStatus

_TARGET = {
    "approved": RecordStatus.APPROVED,
    "rejected": RecordStatus.REJECTED,
    "need_human": RecordStatus.NEED_HUMAN,
}


async def on_apply(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Review one application (see the module docstring)."""
    applied = ctx.payload_as(events.ApplyCreated)
    async with ctx.read() as conn:
        row = await records.load(conn, applied.avcc_record_id)
    if row is None or row["status"] != RecordStatus.APPLIED:
        return []
    examined = await examine(avcc, row)
    verdict = rules.judge(examined.findings)
    now = ctx.clock.now_ms()
    report = reports.ai_report(row, examined.findings, verdict, examined.evidence, now)
    await avcc.store.put(report.key, report.body, "application/json")

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        report_id = int(
            (
                await conn.execute(
                    avcc_review_reports.insert().returning(avcc_review_reports.c.id),
                    {
                        "record_id": row["id"],
                        "reviewer": "ai",
                        "decision": verdict.decision,
                        "final_level": verdict.level,
                        "overall_score": verdict.score,
                        "report_key": report.key,
                        "report_hash": report.hash,
                        "created_at": now,
                    },
                )
            ).scalar_one()
        )
        values: dict[str, object] = {
            "decision": verdict.decision,
            "final_level": verdict.level,
            "overall_score": verdict.score,
            "review_report_id": report_id,
            "report_hash": report.hash,
            "reviewed_at": now,
            "status_reason": "; ".join(verdict.reasons)[:300] or None,
        }
        if verdict.decision == "rejected":
            values["live_content_hash"] = None  # the tenant may apply again with this content
        await records.move(
            conn,
            row,
            _TARGET[verdict.decision],
            now_ms=now,
            cause="review.ai",
            cause_id=env.event_id,
            values=values,
        )
        if examined.fingerprint is not None and verdict.decision != "rejected":
            kind, value = examined.fingerprint
            await conn.execute(
                avcc_fingerprints.insert(),
                {
                    "record_id": row["id"],
                    "tenant_id": row["tenant_id"],
                    "kind": kind,
                    "value": value,
                    "coded_at": None,
                },
            )
        if examined.moderation is not None:
            # Kept with every other moderation decision (seed 004's audit of reviews).
            await moderation.record(
                conn,
                examined.moderation,
                tenant_id=row["tenant_id"],
                subject_kind="avcc_work",
                subject_id=str(row["id"]),
                stage="input",
                now_ms=now,
            )
        if verdict.decision == "need_human":
            await conn.execute(
                avcc_human_reviews.insert(),
                {
                    "record_id": row["id"],
                    "tenant_id": row["tenant_id"],
                    "priority": row["priority"],
                    "ai_report_id": report_id,
                    "suggested_level": "P",
                    "reasons": list(verdict.reasons),
                    "created_at": now,
                },
            )
        finished = events.ReviewFinished(
            request_id=row["request_id"],
            avcc_record_id=row["id"],
            review_report_id=report_id,
            decision=verdict.decision,
            final_level=verdict.level,
            overall_score=verdict.score,
            report_hash=report.hash,
        )
        return [
            env.derive(
                events.REVIEW_FINISHED,
                finished.model_dump(),
                key=str(row["id"]),
                source=events.REVIEW_SVC,
            )
        ]

    ctx.write(record)
    return []
