"""The repository of tasks: typed snapshots, look-ups and guarded moves with history.

Every change it writes to a task's status or progress also adds a notification to the outbox
in the same transaction, so ``GET /v1/events`` streams a task's stages and progress exactly
when (and only if) they committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.reliability.outbox import OutboxWriter
from aigc_hub.store.transitions import move

from .models import documents_tasks
from .states import TASKS, TaskStatus

#: The ``subject_type`` of a documents task's notifications.
SUBJECT = "documents_task"


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
    outbox: OutboxWriter,
    values: Mapping[str, object] | None = None,
) -> Task:
    """Move ``task`` (as read) to ``to`` with ``values``, recording why and announcing it;
    the task as it is now. StaleTransition when it moved meanwhile."""
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
        announce=lambda version: [
            notification({**task.row, **changes, "status": to.value}, version, at)
        ],
    )
    await outbox.add(conn, moved.events)
    return Task({**task.row, **changes, "status": to.value, "status_version": moved.version})


async def update(
    conn: AsyncConnection, task_id: str, at: int, *, outbox: OutboxWriter, **values: object
) -> None:
    """Set columns of a task that carry no state (progress, counts), leaving its status, and
    announce its progress."""
    t = documents_tasks
    row = (
        (
            await conn.execute(
                sa.update(t).where(t.c.id == task_id).values(updated_at=at, **values).returning(t)
            )
        )
        .mappings()
        .first()
    )
    if row is not None:
        await outbox.add(conn, [notification(row, None, at, kind="progress")])


def notification(
    row: Mapping[str, Any],
    version: int | None,
    at: int,
    *,
    kind: Literal["status", "progress"] = "status",
) -> Envelope:
    """The hint that the task ``row`` (as it is now) changed; clients re-read it for facts."""
    note = Notification(
        tenant_id=str(row["tenant_id"]),
        subject_type=SUBJECT,
        subject_id=str(row["id"]),
        kind=kind,
        status=str(row["status"]),
        stage=row.get("stage"),
        progress=int(row.get("progress") or 0) / 100,
        status_version=version if version is not None else row.get("status_version"),
        occurred_at_ms=at,
        data={
            "document_id": row.get("document_id"),
            "chunks_total": row.get("chunks_total"),
            "chunks_stored": row.get("chunks_stored"),
        },
    )
    return notification_envelope(note, source="documents")
