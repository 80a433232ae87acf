"""review-svc's checks of one work: integrity, declaration, moderation, near-duplicates.

Everything here runs outside any transaction (the work is read into a scratch directory of
its own and removed after); the handler records the outcome in one short transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aigc_hub.blobs.base import BlobNotFound, ObjectTooLarge, download
from aigc_hub.core.errors import InvalidInput
from aigc_hub.media import probe, sandbox
from aigc_hub.media.frames import sample_frames
from aigc_hub.moderation import Decision, Verdict
from aigc_hub.moderation.frame_checks import FROZEN

from .fingerprints import still_frame
from .rules import Findings, ModerationVerdict

if TYPE_CHECKING:
    from .state import Avcc

#: Frame checks that judge a generated output's quality, not what a work shows.
NOT_CONTENT_RULES = frozenset({FROZEN})
#: Text works are reviewed up to this many characters (moderation reviews text in windows).
TEXT_REVIEW_CHARS = 20_000
_VERDICTS: Mapping[Verdict, ModerationVerdict] = {
    Verdict.ALLOW: "allow",
    Verdict.WATERMARK: "allow",  # a watermark request does not stop a code
    Verdict.HUMAN_REVIEW: "review",
    Verdict.REJECT: "reject",
}


@dataclass(frozen=True)
class Examined:
    """The findings, the fingerprint to keep if the work is coded, and the evidence."""

    findings: Findings
    fingerprint: tuple[str, bytes] | None
    evidence: Mapping[str, object]
    #: The moderation module's decision, kept with its others (None: it did not run).
    moderation: Decision | None = None


async def examine(avcc: Avcc, row: Mapping[str, Any]) -> Examined:
    """Run every check on record ``row``'s work."""
    async with sandbox.scratch_dir() as scratch:
        path = scratch / "work"
        try:
            got = await download(
                avcc.store, row["object_key"], path, max_bytes=avcc.settings.max_content_bytes
            )
        except (BlobNotFound, ObjectTooLarge):
            return _integrity_failed()
        if f"sha256:{got.sha256}" != row["content_hash"]:
            return _integrity_failed()
        try:
            decision = await _moderate(avcc, path, row, scratch)
        except sandbox.MediaRefused as exc:  # not a readable work of its type: refused
            return _unreadable(row, f"{exc.code}: {exc}", exc.code)
        except InvalidInput as exc:
            return _unreadable(row, str(exc), "unreadable")
        try:
            fingerprint = await avcc.likeness.fingerprint(path, row["content_type"], scratch)
        except (InvalidInput, sandbox.MediaRefused) as exc:  # unreadable as its type
            return _unreadable(row, str(exc), "unreadable", decision)
    nearest = (
        None
        if fingerprint is None
        else await avcc.likeness.nearest(
            fingerprint,
            tenant_id=row["tenant_id"] if avcc.settings.duplicate_scope == "tenant" else None,
        )
    )
    findings = Findings(
        integrity_ok=True,
        declaration_problems=_declaration_problems(row),
        model_name=row["model_name"],
        moderation=_VERDICTS[decision.verdict],
        moderation_rules=tuple(decision.hit_rules),
        similarity=nearest.similarity if nearest else 0.0,
        nearest_record_id=nearest.record_id if nearest else None,
        near_duplicate=nearest.near_duplicate if nearest else False,
    )
    evidence = {
        "moderation_policy": decision.policy_version,
        "moderation_model": decision.model_version,
        "fingerprint_kind": fingerprint[0] if fingerprint else None,
    }
    return Examined(findings, fingerprint, evidence, decision)


def _unreadable(
    row: Mapping[str, Any], reason: str, code: str, decision: Decision | None = None
) -> Examined:
    """A work that cannot be read as its type: refused with the reason (and moderation's
    decision when it ran before the failing step)."""
    found = Findings(
        integrity_ok=True,
        declaration_problems=(f"content: {reason}"[:200],),
        model_name=row["model_name"],
        moderation=_VERDICTS[decision.verdict] if decision is not None else "allow",
    )
    return Examined(found, None, {"media": code}, decision)


def _integrity_failed() -> Examined:
    found = Findings(integrity_ok=False, declaration_problems=(), model_name="", moderation="allow")
    return Examined(found, None, {"integrity": "the stored bytes are missing or changed"})


def _declaration_problems(row: Mapping[str, Any]) -> tuple[str, ...]:
    problems = []
    if not str(row["model_name"]).strip():
        problems.append("declaration: no model name")
    if not str(row["model_version"]).strip():
        problems.append("declaration: no model version")
    return tuple(problems)


async def _moderate(avcc: Avcc, path: Path, row: Mapping[str, Any], scratch: Path) -> Decision:
    """The shared moderation module on the work: its text, or frames sampled across it."""
    tenant = row["tenant_id"]
    if row["content_type"] == "text/plain":
        text = await asyncio.to_thread(_read_text, path)
        return await avcc.moderation.review_text(text, tenant_id=tenant)
    if row["content_type"].startswith("image/"):
        # A still is one frame: decoded once here, not probed and sampled by FFmpeg.
        frames = [await asyncio.to_thread(still_frame, path)]
        duration_ms = 0
    else:
        limits = sandbox.MediaLimits(max_bytes=avcc.settings.max_content_bytes)
        info = await probe.probe(path, limits, scratch_root=scratch)
        frames = await sample_frames(path, info, scratch, limits=limits)
        duration_ms = info.duration_ms
    decision = await avcc.moderation.review_frames(
        frames, duration_ms=duration_ms, expected_duration_ms=None, tenant_id=tenant
    )
    if decision.verdict is not Verdict.ALLOW and set(decision.hit_rules) <= NOT_CONTENT_RULES:
        # A still shot is a legitimate work: "frozen" judges a generated output's quality,
        # not a work's content.
        return replace(decision, verdict=Verdict.ALLOW, reason="allowed: a still video")
    return decision


def _read_text(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(TEXT_REVIEW_CHARS)
