"""The decision record: one appended ``moderation_decisions`` row per review.

Rows are never updated: a later review of the same subject (a new policy version, a human
reviewer's call) appends its own row, and the subject's history reads in ``id`` order.
``record`` runs inside the caller's transaction, so the decision commits together with the
business change it justifies (a task refused, an asset marked), or not at all.
"""

from __future__ import annotations

from typing import Final, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.errors import InvalidInput
from aigc_hub.moderation.base import Decision
from aigc_hub.store.tables import moderation_decisions

Stage = Literal["input", "output"]
STAGES: Final = ("input", "output")


async def record(
    conn: AsyncConnection,
    decision: Decision,
    *,
    tenant_id: str,
    subject_kind: str,
    subject_id: str,
    stage: Stage,
    now_ms: int,
) -> int:
    """Append ``decision`` for ``(subject_kind, subject_id)``; the new row's id.

    ``subject_kind`` names what was reviewed (``prompt``, ``asset``, ``output``, or another
    pipeline's kind); ``stage`` is ``input`` (before work starts) or ``output``. Raises
    :class:`InvalidInput` for a value the table cannot hold, on every database alike.
    """
    _check("stage", stage, 20, allowed=STAGES)
    _check("subject_kind", subject_kind, 40)
    _check("subject_id", subject_id, 64)
    _check("tenant_id", tenant_id, 36)
    row = await conn.execute(
        sa.insert(moderation_decisions)
        .values(
            tenant_id=tenant_id,
            subject_kind=subject_kind,
            subject_id=subject_id,
            stage=stage,
            verdict=decision.verdict.value,
            policy_version=decision.policy_version,
            model_version=decision.model_version,
            hit_rules=list(decision.hit_rules),
            evidence_ref=decision.evidence_ref,
            created_at=now_ms,
        )
        .returning(moderation_decisions.c.id)
    )
    return int(row.scalar_one())


def _check(field: str, value: str, width: int, *, allowed: tuple[str, ...] = ()) -> None:
    # SQLite stores an over-long string silently and PostgreSQL refuses it mid-transaction;
    # refusing it here gives one clear error on both.
    if not value or len(value) > width:
        raise InvalidInput(field, f"{field} must be 1 to {width} characters")
    if allowed and value not in allowed:
        raise InvalidInput(field, f"{field} must be one of {', '.join(allowed)}")
