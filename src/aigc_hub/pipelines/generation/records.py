"""Generation's repository: load a task, and move a task or an attempt to a new state.

How a task or an attempt changes state: the backbone's transition-with-history helper
(:func:`aigc_hub.store.transitions.move`) with generation's tables, plus generation's rule
of what closes the ledger on which terminal state (seed 004 §3.5.1, §3.8.2).

Callers read the task, decide, and call :func:`move` with the status and version they read;
if another writer moved the task first the update matches nothing and
:class:`~aigc_hub.core.errors.StaleTransition` is raised: re-read, then decide again.
Attempts move through :func:`move_attempt`, guarded by their status (they keep no version
and no history of their own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.cache.base import Cache
from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import ledger
from aigc_hub.pipelines.generation.models import (
    generation_tasks,
    provider_jobs,
    task_attempts,
    task_events,
)
from aigc_hub.pipelines.generation.states import ATTEMPTS, STAGE, TASKS, AttemptStatus, TaskStatus
from aigc_hub.reliability.notifications import Notification, notification_envelope
from aigc_hub.reliability.outbox import Routed
from aigc_hub.store import transitions
from aigc_hub.store.transitions import History, Stateful

SUBJECT = "generation_task"

#: How long a hot progress value lives in the cache (it only matters while the task runs).
PROGRESS_TTL_MS = 24 * 3600 * 1000


def progress_key(task_id: str) -> str:
    """The cache key of a task's hot progress (seed 004 §3.7: ``task:progress:{task_id}``)."""
    return f"task:progress:{task_id}"


async def hot_progress(cache: Cache, task_ids: Sequence[str]) -> dict[str, float]:
    """The tasks' hot progress values, by task id (those the cache holds)."""
    keys = {progress_key(t): t for t in task_ids}
    found = await cache.progress.read(list(keys))
    return {keys[key]: value for key, value in found.items()}


#: Tasks: versioned, every move recorded in ``task_events`` (the console's timeline).
TASK_ROWS = Stateful(generation_tasks, TASKS, history=History(task_events))

#: Attempts: no ``status_version`` column and no history table of their own.
ATTEMPT_ROWS = Stateful(task_attempts, ATTEMPTS, history=None, version_column=None)


async def load(conn: AsyncConnection, task_id: str) -> dict[str, Any] | None:
    """The task row, or None."""
    row = (
        await conn.execute(sa.select(generation_tasks).where(generation_tasks.c.id == task_id))
    ).first()
    return None if row is None else dict(row._mapping)


async def load_attempt(conn: AsyncConnection, attempt_id: str) -> sa.Row[Any] | None:
    """The attempt row, or None."""
    query = sa.select(task_attempts).where(task_attempts.c.id == attempt_id)
    return (await conn.execute(query)).first()


async def load_job(conn: AsyncConnection, attempt_id: str) -> sa.Row[Any] | None:
    """The provider job recorded for an attempt, or None (not submitted, or not yet known)."""
    query = sa.select(provider_jobs).where(provider_jobs.c.attempt_id == attempt_id)
    return (await conn.execute(query)).first()


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
    changes: dict[str, Any] = {"updated_at": now_ms, "deadline_at": deadline_ms, **(values or {})}
    if to.terminal:
        changes["terminal_at"] = now_ms
        changes["deadline_at"] = None
    if to is TaskStatus.QUEUED:
        changes["queued_at"] = now_ms
    moved = await transitions.move(
        conn,
        TASK_ROWS,
        task["id"],
        current=current,
        to=to,
        seen_version=int(task["status_version"]),
        values=changes,
        record={
            "task_id": task["id"],
            "tenant_id": task["tenant_id"],
            "cause": cause,
            "cause_id": cause_env.event_id if cause_env is not None else None,
            "detail": dict(detail or {}),
            "at": now_ms,
        },
        announce=lambda version: [
            status_notification(
                task, to, version, now_ms, cause_env=cause_env, progress=changes.get("progress")
            )
        ],
    )
    if to.terminal:
        actual_cost = changes.get("actual_cost", task["actual_cost"])
        await close_ledger(conn, {**task, **changes}, to, now_ms, actual_cost=actual_cost)
    return list(moved.events)


#: A staged fact change (``ctx.write``): runs in the handler's commit, returns its events.
StagedWrite = Callable[[AsyncConnection], Awaitable[list[Envelope | Routed]]]


def failing(
    task_id: str,
    *,
    while_in: TaskStatus,
    cause: str,
    cause_env: Envelope,
    now_ms: int,
    failure_class: str,
    failure_code: str,
    detail: Mapping[str, Any],
    first: Callable[[AsyncConnection, Mapping[str, Any]], Awaitable[None]] | None = None,
) -> StagedWrite:
    """A staged write ending task ``task_id`` FAILED if it is still ``while_in`` when the
    commit runs (a task moved on meanwhile is left alone); ``first(conn, task)`` writes what
    goes with the failure, in the same transaction."""

    async def fail(conn: AsyncConnection) -> list[Envelope | Routed]:
        current = await load(conn, task_id)
        if current is None or current["status"] != while_in.value:
            return []
        if first is not None:
            await first(conn, current)
        notes = await move(
            conn,
            current,
            TaskStatus.FAILED,
            cause=cause,
            cause_env=cause_env,
            now_ms=now_ms,
            values={"failure_class": failure_class, "failure_code": failure_code[:60]},
            detail=detail,
        )
        return [*notes]

    return fail


async def move_attempt(
    conn: AsyncConnection,
    attempt_id: str,
    to: AttemptStatus,
    *,
    values: Mapping[str, Any] | None = None,
) -> bool:
    """Move attempt ``attempt_id`` to ``to`` as it stands now; False when it already is there
    (a repeated observation) or does not exist.

    Raises :class:`~aigc_hub.core.states.TransitionNotAllowed` for a move its machine forbids.
    """
    return await transitions.move_from_any(conn, ATTEMPT_ROWS, attempt_id, to=to, values=values)


#: The failure class of output that moderation refused (its hold is released, not charged).
MODERATION = "moderation"


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
    Output refused by moderation is never charged (the tenant gets nothing to use): its whole
    hold is released, and what the provider billed stays recorded on the task as our cost.
    The one rule for the normal path and the ledger scanner, so both pick the same business
    key and only one of them can write it.
    """
    reserved = int(task["reserved_amount"])
    actual = actual_cost
    if to is TaskStatus.SUCCEEDED and actual is None:
        actual = task["estimated_cost"]
    ids = {"tenant_id": task["tenant_id"], "task_id": task["id"], "now_ms": now_ms}
    if to is TaskStatus.FAILED and task.get("failure_class") == MODERATION:
        actual = None
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
