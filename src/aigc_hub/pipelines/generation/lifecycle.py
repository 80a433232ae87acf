"""How a task changes state: one guarded update, its history row, its ledger action and its
notification, all in the caller's transaction (seed 004 §3.5.1, §3.8.2).

Callers read the task, decide, and call :func:`move` with the status and version they read;
if another writer moved the task first the update matches nothing and
:class:`~aigc_hub.core.errors.StaleTransition` is raised: re-read, then decide again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import StaleTransition
from aigc_hub.pipelines.generation import ledger
from aigc_hub.pipelines.generation.models import generation_tasks, task_events
from aigc_hub.pipelines.generation.states import STAGE, TaskStatus, can_move
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.store.transitions import transition

SUBJECT = "generation_task"


async def load(conn: AsyncConnection, task_id: str) -> dict[str, Any] | None:
    """The task row, or None."""
    row = (
        await conn.execute(sa.select(generation_tasks).where(generation_tasks.c.id == task_id))
    ).first()
    return None if row is None else dict(row._mapping)


async def move(
    conn: AsyncConnection,
    task: Mapping[str, Any],
    to: TaskStatus,
    *,
    cause: str,
    now_ms: int,
    cause_env: Envelope | None = None,
    values: Mapping[str, Any] | None = None,
    detail: Mapping[str, Any] | None = None,
    deadline_ms: int | None = None,
) -> list[Envelope]:
    """Move ``task`` (as read) to ``to``; returns the notification to publish with it.

    Terminal states close the ledger in the same transaction (:func:`close_ledger`).
    """
    current = TaskStatus(task["status"])
    if not can_move(current, to):
        raise StaleTransition(f"task {task['id']}: {current} -> {to} is not allowed")
    changes: dict[str, Any] = {"updated_at": now_ms, "deadline_at": deadline_ms, **(values or {})}
    if to.terminal:
        changes["terminal_at"] = now_ms
        changes["deadline_at"] = None
    if to is TaskStatus.QUEUED:
        changes["queued_at"] = now_ms
    version = await transition(
        conn,
        generation_tasks,
        task["id"],
        to=to.value,
        allowed_from=[current.value],
        seen_version=int(task["status_version"]),
        values=changes,
    )
    await conn.execute(
        task_events.insert().values(
            task_id=task["id"],
            tenant_id=task["tenant_id"],
            from_status=current.value,
            to_status=to.value,
            status_version=version,
            cause=cause,
            cause_id=cause_env.event_id if cause_env is not None else None,
            detail=dict(detail or {}),
            at=now_ms,
        )
    )
    if to.terminal:
        actual_cost = changes.get("actual_cost", task["actual_cost"])
        await close_ledger(conn, task, to, now_ms, actual_cost=actual_cost)
    return [
        status_notification(
            task, to, version, now_ms, cause_env=cause_env, progress=changes.get("progress")
        )
    ]


async def close_ledger(
    conn: AsyncConnection,
    task: Mapping[str, Any],
    to: TaskStatus,
    now_ms: int,
    *,
    actual_cost: int | None,
) -> tuple[ledger.EntryType, bool]:
    """Close ``task``'s hold for its terminal status ``to``; returns the entry type the rule
    chose and whether it was written (False: that business key was already closed).

    SUCCEEDED charges the actual cost (the estimate when the provider told none); FAILED
    and CANCELED charge what the provider reports it billed, else release the whole hold.
    The one rule for the normal path and the ledger scanner, so both pick the same business
    key and only one of them can write it.
    """
    reserved = int(task["reserved_amount"])
    actual = actual_cost
    if to is TaskStatus.SUCCEEDED and actual is None:
        actual = task["estimated_cost"]
    ids = {"tenant_id": task["tenant_id"], "task_id": task["id"], "now_ms": now_ms}
    if to is TaskStatus.SUCCEEDED or actual:  # success settles even at zero cost
        settled = await ledger.settle(conn, reserved=reserved, actual=int(actual or 0), **ids)
        return ledger.EntryType.SETTLE, settled
    released = await ledger.release(conn, reserved=reserved, **ids)
    return ledger.EntryType.RELEASE, released


def status_notification(
    task: Mapping[str, Any],
    status: TaskStatus,
    version: int | None,
    now_ms: int,
    *,
    cause_env: Envelope | None = None,
    progress: float | None = None,
    kind: str = "status",
) -> Envelope:
    """The hint that ``task`` changed; clients re-read the task for facts."""
    note = Notification(
        tenant_id=task["tenant_id"],
        subject_type=SUBJECT,
        subject_id=task["id"],
        kind="progress" if kind == "progress" else "status",
        status=status.value,
        stage=STAGE[status],
        progress=progress,
        status_version=version,
        occurred_at_ms=now_ms,
    )
    return notification_envelope(note, cause=cause_env, source="generation")
