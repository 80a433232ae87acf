"""The human review queue: ``need_human`` works wait, a reviewer claims one with a lease,
decides, and every claim and decision is audited (the backbone's ``audit_log``).

A claim lasts ``AIGC_HUB_AVCC_HUMAN_LEASE_S``; an expired claim may be taken by another
reviewer, and a decision needs the live claim's token, so two reviewers never both decide.
The decision is a report of its own (``reports.human_report``, naming the AI report it
overrules by hash); its hash becomes the record's ``report_hash``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import errors, ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability import audit
from aigc_hub.store.engine import reader

from . import events, records, reports
from .models import avcc_human_reviews, avcc_records, avcc_review_reports
from .rules import human_may_grant
from .states import RecordStatus

if TYPE_CHECKING:
    from .state import Avcc


class QueueEntryNotFound(errors.NotFound):
    """No such work waits for a human decision."""


class ClaimRefused(errors.Conflict):
    """Another reviewer holds the work, or the claim ran out, or it was decided."""


class HumanDecision(pydantic.BaseModel):
    """A reviewer's decision on a claimed work."""

    model_config = pydantic.ConfigDict(extra="forbid")

    claim_token: str = pydantic.Field(min_length=1, max_length=36)
    decision: Literal["approved", "rejected"]
    final_level: Literal["P", "G", "O"] | None = None
    note: str = pydantic.Field("", max_length=2000)


def _entry(row: Any, now_ms: int) -> dict[str, Any]:
    live = row.lease_until is not None and row.lease_until > now_ms and row.decided_at is None
    return {
        "avcc_record_id": row.record_id,
        "tenant_id": row.tenant_id,
        "priority": row.priority,
        "ai_report_id": row.ai_report_id,
        "suggested_level": row.suggested_level,
        "reasons": row.reasons,
        "claimed_by": row.claimed_by if live else None,
        "lease_until": row.lease_until if live else None,
        "decided_by": row.decided_by,
        "decision": row.decision,
        "decided_at": row.decided_at,
        "created_at": row.created_at,
    }


async def list_queue(
    avcc: Avcc, *, open_only: bool = True, limit: int = 50
) -> list[dict[str, Any]]:
    """Works waiting for a decision, highest priority first, then oldest."""
    t = avcc_human_reviews
    query = sa.select(t)
    if open_only:
        query = query.where(t.c.decided_at.is_(None))
    query = query.order_by(t.c.priority.desc(), t.c.created_at, t.c.record_id).limit(limit)
    async with reader(avcc.hub.engine) as conn:
        rows = (await conn.execute(query)).all()
    now = avcc.hub.clock.now_ms()
    return [_entry(r, now) for r in rows]


async def claim(avcc: Avcc, *, record_id: int, reviewer: str) -> dict[str, Any]:
    """Take the work for ``AIGC_HUB_AVCC_HUMAN_LEASE_S``; ClaimRefused while another
    reviewer's claim is live. Claiming again one's own live claim renews it."""
    t, hub = avcc_human_reviews, avcc.hub
    now = hub.clock.now_ms()
    token = ids.new_id_str()
    until = now + avcc.settings.human_lease_s * 1000
    async with hub.transaction() as conn:
        taken = (
            await conn.execute(
                sa.update(t)
                .where(
                    t.c.record_id == record_id,
                    t.c.decided_at.is_(None),
                    sa.or_(
                        t.c.lease_until.is_(None),
                        t.c.lease_until <= now,
                        t.c.claimed_by == reviewer,
                    ),
                )
                .values(claimed_by=reviewer, claim_token=token, lease_until=until)
                .returning(t.c.record_id)
            )
        ).scalar_one_or_none()
        if taken is None:
            found = (
                await conn.execute(sa.select(t.c.decided_at).where(t.c.record_id == record_id))
            ).first()
            if found is None:
                raise QueueEntryNotFound(f"work {record_id} is not waiting for a reviewer")
            raise ClaimRefused(
                f"work {record_id} was decided"
                if found.decided_at
                else f"work {record_id} is claimed by another reviewer"
            )
        await audit.record(
            conn,
            at=now,
            actor=reviewer,
            action="avcc.review.claim",
            target=f"avcc_record:{record_id}",
            result="claimed",
            detail={"lease_until": until},
        )
    return {"avcc_record_id": record_id, "claim_token": token, "lease_until": until}


async def decide(
    avcc: Avcc, *, record_id: int, reviewer: str, body: HumanDecision
) -> dict[str, Any]:
    """Record the reviewer's decision: the report, the record's move out of NEED_HUMAN, the
    queue entry closed, the audit row and ``review.task.finished``, in one transaction."""
    refusal = human_may_grant(body.decision, body.final_level)
    if refusal is not None:
        raise errors.InvalidInput("final_level", refusal)
    hub, t = avcc.hub, avcc_human_reviews
    now = hub.clock.now_ms()
    async with reader(hub.engine) as conn:
        entry = (await conn.execute(sa.select(t).where(t.c.record_id == record_id))).first()
        row = await records.load(conn, record_id)
        ai_hash = (
            await conn.execute(
                sa.select(avcc_review_reports.c.report_hash).where(
                    avcc_review_reports.c.record_id == record_id,
                    avcc_review_reports.c.reviewer == "ai",
                )
            )
        ).scalar_one_or_none()
    if entry is None or row is None or ai_hash is None:
        raise QueueEntryNotFound(f"work {record_id} is not waiting for a reviewer")
    _check_claim(entry, reviewer, body.claim_token, now)
    report = reports.human_report(
        row,
        reviewer=reviewer,
        decision=body.decision,
        level=body.final_level,
        note=body.note,
        ai_report_hash=ai_hash,
        now_ms=now,
    )
    await avcc.store.put(report.key, report.body, "application/json")
    target = RecordStatus.APPROVED if body.decision == "approved" else RecordStatus.REJECTED

    async with hub.transaction() as conn:
        closed = (
            await conn.execute(
                sa.update(t)
                .where(
                    t.c.record_id == record_id,
                    t.c.decided_at.is_(None),
                    t.c.claim_token == body.claim_token,
                )
                .values(decided_by=reviewer, decision=body.decision, decided_at=now)
                .returning(t.c.record_id)
            )
        ).scalar_one_or_none()
        if closed is None:
            raise ClaimRefused(f"work {record_id} was decided or re-claimed meanwhile")
        report_id = await _insert_report(conn, record_id, reviewer, body, report, row, now)
        values: dict[str, object] = {
            "decision": body.decision,
            "final_level": body.final_level,
            "review_report_id": report_id,
            "report_hash": report.hash,
            "reviewed_at": now,
            "status_reason": body.note[:300] or None,
        }
        if body.decision == "rejected":
            values["live_content_hash"] = None
        await records.move(conn, row, target, now_ms=now, cause="review.human", values=values)
        await audit.record(
            conn,
            at=now,
            actor=reviewer,
            action="avcc.review.decide",
            target=f"avcc_record:{record_id}",
            result=body.decision,
            detail={"final_level": body.final_level, "report_hash": report.hash, "note": body.note},
        )
        finished = events.ReviewFinished(
            request_id=row["request_id"],
            avcc_record_id=record_id,
            review_report_id=report_id,
            decision=body.decision,
            final_level=body.final_level,
            overall_score=float(row["overall_score"] or 0.0),
            report_hash=report.hash,
        )
        await hub.outbox.add(
            conn,
            [
                Envelope.new(
                    events.REVIEW_FINISHED,
                    finished.model_dump(),
                    key=str(record_id),
                    source=events.REVIEW_SVC,
                    tenant_id=row["tenant_id"],
                    correlation_id=row["request_id"],
                )
            ],
        )
    return finished.model_dump()


def _check_claim(entry: Any, reviewer: str, token: str, now: int) -> None:
    if entry.decided_at is not None:
        raise ClaimRefused(f"work {entry.record_id} was decided already")
    if entry.claim_token != token or entry.claimed_by != reviewer:
        raise ClaimRefused(f"work {entry.record_id}: claim it first (or your claim was taken)")
    if entry.lease_until is None or entry.lease_until <= now:
        raise ClaimRefused(f"work {entry.record_id}: your claim ran out; claim it again")


async def _insert_report(
    conn: AsyncConnection,
    record_id: int,
    reviewer: str,
    body: HumanDecision,
    report: reports.Report,
    row: dict[str, Any],
    now: int,
) -> int:
    return int(
        (
            await conn.execute(
                avcc_review_reports.insert().returning(avcc_review_reports.c.id),
                {
                    "record_id": record_id,
                    "reviewer": f"human:{reviewer}",
                    "decision": body.decision,
                    "final_level": body.final_level,
                    "overall_score": float(row["overall_score"] or 0.0),
                    "report_key": report.key,
                    "report_hash": report.hash,
                    "created_at": now,
                },
            )
        ).scalar_one()
    )


async def record_row(avcc: Avcc, record_id: int) -> dict[str, Any] | None:
    """The record behind a queue entry (the console shows the work's facts)."""
    async with reader(avcc.hub.engine) as conn:
        row = (
            (await conn.execute(sa.select(avcc_records).where(avcc_records.c.id == record_id)))
            .mappings()
            .first()
        )
    return dict(row) if row is not None else None
