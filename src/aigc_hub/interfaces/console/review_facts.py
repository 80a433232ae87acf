"""What the human review pages show, read as typed values: the open queue with each work's AI
score, and one work's facts, its AI report, a bounded excerpt of a text work and its audit
trail.

Claims and decisions themselves go through :mod:`aigc_hub.pipelines.avcc.human`; this module
only reads. A report or excerpt that cannot be read is shown as a problem next to the rest,
never as a failed page: the reviewer still sees what is known.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from aigc_hub.blobs.base import BlobNotFound
from aigc_hub.bootstrap import Hub
from aigc_hub.pipelines.avcc import human
from aigc_hub.pipelines.avcc.models import avcc_human_reviews, avcc_records, avcc_review_reports
from aigc_hub.pipelines.avcc.state import STATE, Avcc
from aigc_hub.reliability.audit import AuditEntry
from aigc_hub.store import tables
from aigc_hub.store.engine import reader

#: Works the console previews inline: the still images avcc codes.
PREVIEW_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
TEXT = "text/plain"
#: How much of a text work the page quotes (bytes read from the store, not the whole work).
EXCERPT_BYTES = 4096


def avcc_of(hub: Hub) -> Avcc | None:
    """The hub's avcc state, or None when this hub does not run avcc."""
    return hub.running_state(STATE)


def audit_target(record_id: int) -> str:
    """The ``audit_log.target`` of a work's claims and decisions."""
    return f"avcc_record:{record_id}"


@dataclass(frozen=True)
class QueueRow:
    """One open work of the queue (a claim is shown only while it is live)."""

    record_id: int
    tenant_id: str
    priority: int
    ai_score: float | None
    suggested_level: str | None
    reasons: tuple[str, ...]
    claimed_by: str | None
    lease_until: int | None
    created_at: int


async def open_queue(avcc: Avcc, *, limit: int) -> list[QueueRow]:
    """Undecided works, highest priority first, then oldest, with their AI scores."""
    entries = await human.list_queue(avcc, open_only=True, limit=limit)
    ids = [int(e["avcc_record_id"]) for e in entries]
    scores: dict[int, float | None] = {}
    if ids:
        query = sa.select(avcc_records.c.id, avcc_records.c.overall_score).where(
            avcc_records.c.id.in_(ids)
        )
        async with reader(avcc.hub.engine) as conn:
            scores = {int(r.id): r.overall_score for r in await conn.execute(query)}
    return [
        QueueRow(
            record_id=int(e["avcc_record_id"]),
            tenant_id=str(e["tenant_id"]),
            priority=int(e["priority"]),
            ai_score=scores.get(int(e["avcc_record_id"])),
            suggested_level=e["suggested_level"],
            reasons=tuple(str(r) for r in e["reasons"] or ()),
            claimed_by=e["claimed_by"],
            lease_until=e["lease_until"],
            created_at=int(e["created_at"]),
        )
        for e in entries
    ]


@dataclass(frozen=True)
class Claim:
    """A work's queue entry: who holds it until when (live claims only), and its decision."""

    suggested_level: str | None
    reasons: tuple[str, ...]
    claimed_by: str | None
    lease_until: int | None
    #: The live claim's token; the page puts it in its holder's decision form only.
    token: str | None
    decided_by: str | None
    decision: str | None
    decided_at: int | None

    def held_by(self, reviewer: str) -> bool:
        """True while ``reviewer`` holds the live claim of an undecided work."""
        return self.decided_at is None and self.claimed_by == reviewer


def _claim(row: sa.Row[Any], now_ms: int) -> Claim:
    # The same rule as the queue's: a claim counts until its lease ends or the work is decided.
    live = row.decided_at is None and row.lease_until is not None and row.lease_until > now_ms
    return Claim(
        suggested_level=row.suggested_level,
        reasons=tuple(str(r) for r in row.reasons or ()),
        claimed_by=row.claimed_by if live else None,
        lease_until=row.lease_until if live else None,
        token=row.claim_token if live else None,
        decided_by=row.decided_by,
        decision=row.decision,
        decided_at=row.decided_at,
    )


@dataclass(frozen=True)
class Work:
    """The facts of a work under review, as the tenant declared and the store measured them."""

    record_id: int
    request_id: str
    tenant_id: str
    status: str
    content_type: str
    size_bytes: int
    content_hash: str
    model_name: str
    model_version: str
    priority: int
    ai_score: float | None
    final_level: str | None
    avcc_code: str | None
    object_key: str
    created_at: int

    @property
    def previewable(self) -> bool:
        """True for a still image, which the page shows inline."""
        return self.content_type in PREVIEW_TYPES

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Work:
        """The work of an ``avcc_records`` row."""
        return cls(
            record_id=int(row["id"]),
            request_id=str(row["request_id"]),
            tenant_id=str(row["tenant_id"]),
            status=str(row["status"]),
            content_type=str(row["content_type"]),
            size_bytes=int(row["size_bytes"]),
            content_hash=str(row["content_hash"]),
            model_name=str(row["model_name"]),
            model_version=str(row["model_version"]),
            priority=int(row["priority"]),
            ai_score=row["overall_score"],
            final_level=row["final_level"],
            avcc_code=row["avcc_code"],
            object_key=str(row["object_key"]),
            created_at=int(row["created_at"]),
        )


@dataclass(frozen=True)
class AiReport:
    """The AI review's report: its findings, or why it could not be read."""

    report_hash: str
    #: Whether the stored bytes still hash to the ``report_hash`` recorded (and notarized);
    #: None when they could not be read.
    hash_verified: bool | None = None
    decision: str | None = None
    score: float | None = None
    reasons: tuple[str, ...] = ()
    checks: Mapping[str, object] | None = None
    body: Mapping[str, object] | None = None
    problem: str | None = None


@dataclass(frozen=True)
class WorkView:
    """Everything a work's page shows."""

    work: Work
    claim: Claim
    report: AiReport | None
    excerpt: str | None
    audit: Sequence[AuditEntry]


async def _queued(avcc: Avcc, record_id: int) -> tuple[sa.Row[Any], Work] | None:
    """The work's queue entry and its facts; None when it never waited for a reviewer."""
    t = avcc_human_reviews
    async with reader(avcc.hub.engine) as conn:
        entry = (await conn.execute(sa.select(t).where(t.c.record_id == record_id))).first()
    row = await human.record_row(avcc, record_id) if entry is not None else None
    if entry is None or row is None:
        return None
    return entry, Work.of(row)


async def queued_work(avcc: Avcc, record_id: int) -> Work | None:
    """The facts of a work that waits or waited for a reviewer; None for any other."""
    found = await _queued(avcc, record_id)
    return found[1] if found is not None else None


async def work_view(avcc: Avcc, record_id: int) -> WorkView | None:
    """The page of work ``record_id``; None when it never waited for a reviewer."""
    found = await _queued(avcc, record_id)
    if found is None:
        return None
    entry, work = found
    r = avcc_review_reports
    async with reader(avcc.hub.engine) as conn:
        report_row = (
            await conn.execute(
                sa.select(r.c.report_key, r.c.report_hash)
                .where(r.c.record_id == record_id)
                .where(r.c.reviewer == "ai")
            )
        ).first()
    report = None
    if report_row is not None:
        report = await _ai_report(avcc, report_row.report_key, report_row.report_hash)
    return WorkView(
        work=work,
        claim=_claim(entry, avcc.hub.clock.now_ms()),
        report=report,
        excerpt=await _excerpt(avcc, work) if work.content_type == TEXT else None,
        audit=await audit_trail(avcc.hub, record_id),
    )


async def _ai_report(avcc: Avcc, key: str, report_hash: str) -> AiReport:
    try:
        stored = await avcc.store.get(key)
    except BlobNotFound:
        return AiReport(report_hash, problem="the report is missing from the blob store")
    verified = f"sha256:{hashlib.sha256(stored).hexdigest()}" == report_hash
    try:
        body = json.loads(stored)
    except ValueError:
        return AiReport(report_hash, verified, problem="the stored report is not JSON")
    if not isinstance(body, dict):
        return AiReport(report_hash, verified, problem="the stored report is not a JSON object")
    checks = body.get("checks")
    score = body.get("overall_score")
    return AiReport(
        report_hash,
        verified,
        decision=str(body.get("decision")),
        score=float(score) if isinstance(score, int | float) else None,
        reasons=tuple(str(r) for r in body.get("reasons") or ()),
        checks=checks if isinstance(checks, dict) else None,
        body=body,
    )


async def _excerpt(avcc: Avcc, work: Work) -> str | None:
    """The first :data:`EXCERPT_BYTES` of a text work, decoded; None if the store lost it."""
    data = b""
    try:
        async for chunk in avcc.store.stream(work.object_key, end=EXCERPT_BYTES):
            data += chunk
    except BlobNotFound:
        return None
    # A cut may split a character: the replacement mark shows where, the rest reads fine.
    text = data[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    return text + ("…" if work.size_bytes > EXCERPT_BYTES else "")


async def audit_trail(hub: Hub, record_id: int) -> list[AuditEntry]:
    """The work's audit rows (claims, decisions), oldest first."""
    a = tables.audit_log
    query = sa.select(a).where(a.c.target == audit_target(record_id)).order_by(a.c.id)
    async with reader(hub.engine) as conn:
        rows = (await conn.execute(query)).all()
    return [
        AuditEntry(r.id, r.at, r.actor, r.action, r.target, r.result, r.detail or {}) for r in rows
    ]
