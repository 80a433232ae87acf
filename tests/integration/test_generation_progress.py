"""Progress steps are hot, not facts (seed 004 §3.6.4), on SQLite and PostgreSQL: a provider's
37 % raises the cache's value and notifies watchers, writes no row of the tasks table, and
the task's snapshot shows it; key stages (RUNNING, SUCCEEDED) still write the row."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus as N
from aigc_hub.pipelines.generation.states import TaskStatus as S
from aigc_hub.reliability import notifications
from aigc_hub.store.engine import reader
from aigc_hub.store.tables import outbox
from aigc_hub.testing import JobScript, Step
from tests.support.fake_generation import TENANT, FakeGeneration, fake_generation

WRITES_TASKS = re.compile(r"^\s*(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+generation_tasks\b", re.I)


@contextmanager
def statements_writing_tasks(g: FakeGeneration) -> Iterator[list[str]]:
    """Every SQL statement the hub sends meanwhile that writes the tasks table."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if WRITES_TASKS.match(statement):
            seen.append(statement)

    engine = g.hub.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", note)


async def poll_round(g: FakeGeneration) -> None:
    """Let the next poll of every job fall due, emit it, and apply the answers."""
    await g.advance(g.settings.poll_max_s * 1.3)
    await g.scan("generation-polls")
    await g.settle()


async def progress_notifications(g: FakeGeneration, task_id: str) -> list[float]:
    """The progress values of the task's ``progress`` notifications, in outbox order."""
    async with reader(g.hub.engine) as conn:
        rows = await conn.execute(
            sa.select(outbox.c.value)
            .where(outbox.c.event_type == notifications.EVENT_TYPE)
            .order_by(outbox.c.id)
        )
        payloads = [Envelope.from_bytes(r.value).payload for r in rows]
    return [
        p["progress"]
        for p in payloads
        if p.get("subject_id") == task_id and p.get("kind") == "progress"
    ]


async def test_progress_steps_raise_the_hot_value_and_write_no_task_row(
    db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        steps = [Step(N.RUNNING, 0.2), Step(N.RUNNING, 0.5), Step(N.RUNNING, 0.8)]
        g.provider.script("progress", JobScript(steps=[*steps, Step(N.SUCCEEDED, 1.0)]))
        task_id = await g.create("progress")
        await g.settle()
        await poll_round(g)  # SUBMITTED -> RUNNING at 0.2: a key stage, written
        assert (await g.task(task_id))["progress"] == 0.2

        with statements_writing_tasks(g) as writes:
            await poll_round(g)  # 0.5
            await poll_round(g)  # 0.8

        assert writes == []
        row = await g.task(task_id)
        assert (row["status"], row["progress"]) == (S.RUNNING, 0.2)  # the key stage's figure
        seen = await services.get_task(g.hub, tenant_id=TENANT, task_id=task_id)
        assert seen["progress"] == 0.8  # the snapshot shows the hot one
        page, _ = await services.list_tasks(g.hub, tenant_id=TENANT)
        assert [t["progress"] for t in page if t["task_id"] == task_id] == [0.8]
        assert await progress_notifications(g, task_id) == [0.5, 0.8]

        with statements_writing_tasks(g) as writes:
            await poll_round(g)  # SUCCEEDED: key stages again
        assert writes  # the row moves on
        assert await g.status(task_id) == S.SUCCEEDED
        assert (await services.get_task(g.hub, tenant_id=TENANT, task_id=task_id))[
            "progress"
        ] == 1.0
