"""The repository of tasks: typed snapshots, look-ups and guarded moves with history."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.store.transitions import move

from .models import documents_tasks
from .states import TASKS, TaskStatus


@dataclass(frozen=True)
class Task:
    """A task as read: the row's columns by name, its status typed."""

    row: Mapping[str, Any]

    @property
    def id(self) -> str:
        return str(self.row["id"])

    @property
    def document_id(self) -> str:
        return str(self.row["document_id"])

    @property
    def tenant_id(self) -> str:
        return str(self.row["tenant_id"])

    @property
    def status(self) -> TaskStatus:
        return TaskStatus(self.row["status"])

    @property
    def version(self) -> int:
        return int(self.row["status_version"])


async def load(conn: AsyncConnection, task_id: str) -> Task | None:
    """The task ``task_id``, or None."""
    row = (
        (await conn.execute(sa.select(documents_tasks).where(documents_tasks.c.id == task_id)))
        .mappings()
        .first()
    )
    return None if row is None else Task(dict(row))


async def load_by_document(conn: AsyncConnection, document_id: str) -> Task | None:
    """The task of document ``document_id``, or None."""
    table = documents_tasks
    row = (
        (await conn.execute(sa.select(table).where(table.c.document_id == document_id)))
        .mappings()
        .first()
    )
    return None if row is None else Task(dict(row))


async def move_task(
    conn: AsyncConnection,
    task: Task,
    to: TaskStatus,
    *,
    cause: str,
    at: int,
    values: Mapping[str, object] | None = None,
) -> Task:
    """Move ``task`` (as read) to ``to`` with ``values``, recording why; the task as it is
    now. StaleTransition when it moved meanwhile."""
    changes = {"updated_at": at, **(values or {})}
    moved = await move(
        conn,
        TASKS,
        task.id,
        current=task.status,
        to=to,
        seen_version=task.version,
        values=changes,
        record={"task_id": task.id, "cause": cause, "at": at},
    )
    return Task({**task.row, **changes, "status": to.value, "status_version": moved.version})


async def update(conn: AsyncConnection, task_id: str, at: int, **values: object) -> None:
    """Set columns of a task that carry no state (progress, counts), leaving its status."""
    await conn.execute(
        sa.update(documents_tasks)
        .where(documents_tasks.c.id == task_id)
        .values(updated_at=at, **values)
    )
