"""Moderation decisions recorded as appended ``moderation_decisions`` rows, on SQLite and on
PostgreSQL, inside the caller's transaction."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.errors import InvalidInput
from aigc_hub.moderation import Decision, LocalModeration, ModerationSettings, Verdict, record
from aigc_hub.store.tables import moderation_decisions as md


async def _rows(db: AsyncEngine) -> list[sa.Row[tuple[object, ...]]]:
    async with db.connect() as conn:
        result = await conn.execute(sa.select(md).order_by(md.c.id))
        return list(result.all())


async def test_a_review_is_recorded_with_versions_rules_and_evidence(db: AsyncEngine) -> None:
    moderation = LocalModeration(ModerationSettings(semantic=False))
    decision = await moderation.review_text("a nude deepfake of the mayor", tenant_id="t1")
    async with db.begin() as conn:
        row_id = await record(
            conn,
            decision,
            tenant_id="t1",
            subject_kind="prompt",
            subject_id="task-1",
            stage="input",
            now_ms=1_700_000_000_000,
        )
    (row,) = await _rows(db)
    assert row.id == row_id
    assert (row.tenant_id, row.subject_kind, row.subject_id, row.stage) == (
        "t1",
        "prompt",
        "task-1",
        "input",
    )
    assert row.verdict == "human_review"
    assert row.policy_version == "default-v1"
    assert row.model_version == "rules-only"
    assert sorted(row.hit_rules) == ["likeness.deepfake.keyword", "sexual.adult.keyword"]
    assert row.evidence_ref == decision.evidence_ref
    assert "mayor" not in row.evidence_ref
    assert row.created_at == 1_700_000_000_000


async def test_later_reviews_append_and_a_rolled_back_one_leaves_no_row(db: AsyncEngine) -> None:
    first = Decision(Verdict.REJECT, "v1", "frame-checks", ("frames.black",), "frames@0", "black")
    second = Decision(Verdict.ALLOW, "v2", "frame-checks", (), None, "no frame check hit")
    ids = []
    for decision in (first, second):
        async with db.begin() as conn:
            ids.append(
                await record(
                    conn,
                    decision,
                    tenant_id="t1",
                    subject_kind="output",
                    subject_id="asset-9",
                    stage="output",
                    now_ms=1,
                )
            )
    with pytest.raises(RuntimeError):
        async with db.begin() as conn:
            await record(
                conn, first, tenant_id="t1", subject_kind="output", subject_id="asset-9",
                stage="output", now_ms=2,
            )  # fmt: skip
            raise RuntimeError("the business change failed")
    rows = await _rows(db)
    assert [r.id for r in rows] == ids and ids[0] < ids[1]
    assert [(r.verdict, r.policy_version, r.hit_rules, r.evidence_ref) for r in rows] == [
        ("reject", "v1", ["frames.black"], "frames@0"),
        ("allow", "v2", [], None),
    ]


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("stage", {"stage": "later"}),
        ("subject_id", {"subject_id": "x" * 65}),
        ("subject_kind", {"subject_kind": ""}),
        ("tenant_id", {"tenant_id": "t" * 37}),
    ],
)
async def test_a_value_the_table_cannot_hold_is_refused_on_every_database(
    db: AsyncEngine, field: str, kwargs: dict[str, str]
) -> None:
    decision = Decision(Verdict.ALLOW, "v1", "rules-only", (), None, "no rule matched")
    args = {"tenant_id": "t1", "subject_kind": "prompt", "subject_id": "s1", "stage": "input"}
    args.update(kwargs)
    async with db.begin() as conn:
        with pytest.raises(InvalidInput) as caught:
            await record(conn, decision, now_ms=1, **args)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert await _rows(db) == []
