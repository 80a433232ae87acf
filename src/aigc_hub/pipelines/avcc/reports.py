"""Review reports: the JSON a review issues, stored in the blob store, and its hash.

``report_hash`` (§9.2.2) is ``sha256:`` of the stored bytes, so the report kept can be
checked against the hash notarized with the work. The report holds findings and the
decision, never the work itself nor anything that locates it (no object key, no URL).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aigc_hub.blobs.keys import object_key

from .rules import Findings, Verdict
from .statements import canonical

REPORT_VERSION = 1


@dataclass(frozen=True)
class Report:
    """A report's bytes, their hash and where they are kept."""

    key: str
    body: bytes

    @property
    def hash(self) -> str:
        """``sha256:<hex>`` of the bytes."""
        return f"sha256:{hashlib.sha256(self.body).hexdigest()}"


def report_key(tenant_id: str, record_id: int, reviewer_kind: str) -> str:
    """Where the report of ``reviewer_kind`` (``ai`` or ``human``) on a record is kept."""
    return object_key(tenant_id, "avcc-report", str(record_id), f"{reviewer_kind}.json")


def ai_report(
    row: Mapping[str, Any],
    found: Findings,
    verdict: Verdict,
    evidence: Mapping[str, object],
    now_ms: int,
) -> Report:
    """The machine review's report on record ``row``."""
    body: dict[str, object] = {
        "v": REPORT_VERSION,
        "avcc_record_id": row["id"],
        "request_id": row["request_id"],
        "reviewer": "ai",
        "reviewed_at": now_ms,
        "content_hash": row["content_hash"],
        "content_type": row["content_type"],
        "ai_tool_info": {"model_name": row["model_name"], "model_version": row["model_version"]},
        "checks": {
            "integrity": found.integrity_ok,
            "declaration_problems": list(found.declaration_problems),
            "moderation": found.moderation,
            "moderation_rules": list(found.moderation_rules),
            "similarity": round(found.similarity, 4),
            "nearest_coded_record_id": found.nearest_record_id,
            "near_duplicate": found.near_duplicate,
            **dict(evidence),
        },
        "decision": verdict.decision,
        "final_level": verdict.level,
        "overall_score": verdict.score,
        "reasons": list(verdict.reasons),
    }
    key = report_key(row["tenant_id"], int(row["id"]), "ai")
    return Report(key, canonical(body).encode())


def human_report(
    row: Mapping[str, Any],
    *,
    reviewer: str,
    decision: str,
    level: str | None,
    note: str,
    ai_report_hash: str,
    now_ms: int,
) -> Report:
    """A reviewer's report: the decision, and the AI report it overrules, by hash."""
    body: dict[str, object] = {
        "v": REPORT_VERSION,
        "avcc_record_id": row["id"],
        "request_id": row["request_id"],
        "reviewer": reviewer,
        "reviewed_at": now_ms,
        "content_hash": row["content_hash"],
        "ai_report_hash": ai_report_hash,
        "decision": decision,
        "final_level": level,
        "overall_score": row["overall_score"],
        "note": note,
    }
    key = report_key(row["tenant_id"], int(row["id"]), "human")
    return Report(key, canonical(body).encode())
