"""Generation's attempts move through the backbone's transition helper on SQLite and
PostgreSQL: a repeated observation is a no-op, an ended attempt never changes again."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.states import TransitionNotAllowed
from aigc_hub.pipelines.generation import records
from aigc_hub.pipelines.generation.models import task_attempts
from aigc_hub.pipelines.generation.states import AttemptStatus

A = AttemptStatus


@pytest.fixture
async def attempt(db: AsyncEngine) -> str:
    """A DISPATCHING attempt; returns its id."""
    async with db.begin() as conn:
        await conn.execute(
            task_attempts.insert().values(
                id="att-1",
                task_id="task-1",
                attempt_no=1,
                provider="fake",
                model="m",
                dispatch_token="att-1",
                provider_request_key="rk-1",
                status=A.DISPATCHING.value,
                slots=[],
                created_at=1,
            )
        )
    return "att-1"


async def _row(db: AsyncEngine, attempt_id: str) -> tuple[str, int | None]:
    async with db.connect() as conn:
        row = (
            await conn.execute(sa.select(task_attempts).where(task_attempts.c.id == attempt_id))
        ).one()
    return row.status, row.unknown_since


async def test_an_attempt_moves_with_its_values_and_a_repeat_is_a_no_op(
    db: AsyncEngine, attempt: str
) -> None:
    async with db.begin() as conn:
        assert await records.move_attempt(
            conn, attempt, A.SUBMIT_UNKNOWN, values={"unknown_since": 5}
        )
        assert await records.move_attempt(conn, attempt, A.SUBMITTED)
        assert not await records.move_attempt(conn, attempt, A.SUBMITTED)  # seen again
        assert not await records.move_attempt(conn, "no-such-attempt", A.SUBMITTED)
    assert await _row(db, attempt) == ("SUBMITTED", 5)


async def test_an_ended_attempt_refuses_a_late_move_and_keeps_its_end(
    db: AsyncEngine, attempt: str
) -> None:
    async with db.begin() as conn:
        await records.move_attempt(conn, attempt, A.SUCCEEDED)
    with pytest.raises(TransitionNotAllowed, match="generation_attempt: SUCCEEDED -> FAILED"):
        async with db.begin() as conn:
            await records.move_attempt(conn, attempt, A.FAILED)
    assert await _row(db, attempt) == ("SUCCEEDED", None)
