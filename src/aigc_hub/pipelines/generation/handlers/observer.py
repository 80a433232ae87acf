"""The one state handler: every provider observation — callback, poll, submit answer,
reconciliation — becomes a :class:`~.events.StatusObserved` and is applied here
(seed 004 §3.6.4). Duplicates, reordering and late events are harmless: the guarded update,
the allowed-transitions table and the provider's own clock decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import ids
from aigc_hub.core.envelope import Envelope
from aigc_hub.pipelines.generation import events, records, rules
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus
from aigc_hub.pipelines.generation.models import provider_jobs, task_attempts
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import AttemptStatus, TaskStatus
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.dialects import dialect_of

S = TaskStatus
N = NormalizedStatus


def _wake(cause: Envelope, tenant_id: str) -> Envelope:
    """Tell the scheduler a slot is free (it runs a pass)."""
    return cause.derive(
        events.SLOT_FREED,
        events.SlotFreed(tenant_id=tenant_id).model_dump(),
        key=f"slots:{tenant_id}",
        source="generation.observer",
    )


async def apply(
    conn: AsyncConnection,
    gen: Generation,
    obs: events.StatusObserved,
    cause: Envelope,
    now_ms: int,
) -> list[Envelope]:
    """Apply one observation in the caller's transaction; returns the events it causes."""
    task = await records.load(conn, obs.task_id)
    if task is None or task["current_attempt_id"] != obs.attempt_id:
        return []  # an old attempt's news, or not ours
    status = S(task["status"])
    if rules.provider_part_over(status):
        return []  # a late event changes nothing
    job = await _job(conn, obs.attempt_id)
    seen = N(obs.normalized_status)
    known_at = None if job is None else job["observed_at_ms"]
    if rules.is_reordered(seen, obs.observed_at_ms, known_at):
        return []
    out: list[Envelope] = []
    if obs.provider_job_id and job is None:
        await _record_job(conn, task, obs, now_ms, gen)
    elif job is not None:
        await _update_job(conn, job, obs, now_ms, gen)
    settings = gen.settings
    if seen in (N.ACCEPTED, N.RUNNING):
        if status not in (S.SUBMITTED, S.RUNNING):
            # (A task got to SUBMITTED or RUNNING only here, with its attempt moved in the
            # same transaction: a repeated or progress report has nothing to move.)
            await records.move_attempt(conn, obs.attempt_id, AttemptStatus.SUBMITTED)
        target = S.RUNNING if seen is N.RUNNING else S.SUBMITTED
        if status is S.CANCEL_REQUESTED:
            return out  # still waiting for the provider to stop
        if status is target or (status is S.RUNNING and target is S.SUBMITTED):
            # A progress step is hot, not a fact (seed 004 §3.6.4): it raises the value in the
            # cache and tells watchers, and writes no task row. Should this handling's commit
            # fail, the retry finds the value raised and sends no second notification; the
            # value itself is there for readers either way.
            progress = obs.progress
            key = records.progress_key(task["id"])
            if (
                progress is not None
                and (task["progress"] or 0) < progress
                and await gen.hub.cache.progress.raise_to(key, progress, records.PROGRESS_TTL_MS)
            ):
                out.append(
                    records.status_notification(
                        task,
                        status,
                        int(task["status_version"]),
                        now_ms,
                        cause_env=cause,
                        progress=progress,
                        kind="progress",
                    )
                )
            return out
        deadline = now_ms + int(settings.running_silence_s * 1000)
        values: dict[str, Any] = {}
        if obs.progress is not None:
            values["progress"] = obs.progress
        return out + await records.move(
            conn,
            task,
            target,
            cause=f"observed.{obs.source}",
            cause_env=cause,
            now_ms=now_ms,
            values=values,
            deadline_ms=deadline,
        )
    if seen is N.SUCCEEDED:
        await records.move_attempt(conn, obs.attempt_id, AttemptStatus.SUCCEEDED)
        notes = await records.move(
            conn,
            task,
            S.OUTPUT_FETCHING,
            cause=f"observed.{obs.source}",
            cause_env=cause,
            now_ms=now_ms,
            values={"actual_cost": obs.actual_cost, "progress": 1.0},
            deadline_ms=now_ms + int(settings.fetch_deadline_s * 1000),
        )
        urgent = rules.fetch_is_urgent(obs.output_expires_at_ms, now_ms, settings)
        if urgent:
            await conn.execute(
                sa.update(provider_jobs)
                .where(provider_jobs.c.attempt_id == obs.attempt_id)
                .values(urgent_fetch_at=now_ms)
            )
        fetch = cause.derive(
            events.FETCH_URGENT_REQUESTED if urgent else events.FETCH_REQUESTED,
            events.FetchRequested(
                task_id=task["id"], attempt_id=obs.attempt_id, callback_id=obs.callback_id
            ).model_dump(),
            key=task["id"],
            source="generation.observer",
        )
        await release_slots(conn, gen, obs.attempt_id)
        return [*notes, fetch, _wake(cause, task["tenant_id"])]
    if seen in (N.FAILED, N.CANCELED):
        await records.move_attempt(conn, obs.attempt_id, AttemptStatus(seen.value))
        target, values = rules.ended_by_provider(status, seen, obs.provider_error_code)
        if obs.actual_cost:
            values["actual_cost"] = obs.actual_cost
        notes = await records.move(
            conn,
            task,
            target,
            cause=f"observed.{obs.source}",
            cause_env=cause,
            now_ms=now_ms,
            values=values,
        )
        await release_slots(conn, gen, obs.attempt_id)
        return [*notes, _wake(cause, task["tenant_id"])]
    if seen is N.NOT_FOUND:
        return await _not_accepted(conn, gen, task, status, obs, cause, now_ms)
    return out  # UNKNOWN: nothing learned


async def _not_accepted(
    conn: AsyncConnection,
    gen: Generation,
    task: Mapping[str, Any],
    status: TaskStatus,
    obs: events.StatusObserved,
    cause: Envelope,
    now_ms: int,
) -> list[Envelope]:
    """The provider confirms it never took this attempt: only now may another one start."""
    if status not in (S.DISPATCHING, S.SUBMIT_UNKNOWN, S.CANCEL_REQUESTED):
        return []
    await records.move_attempt(conn, obs.attempt_id, AttemptStatus.NOT_ACCEPTED)
    await release_slots(conn, gen, obs.attempt_id)
    wake = _wake(cause, task["tenant_id"])
    if status is S.CANCEL_REQUESTED:
        notes = await records.move(
            conn, task, S.CANCELED, cause="reconcile.not_accepted", cause_env=cause, now_ms=now_ms
        )
        return [*notes, wake]
    if int(task["attempt_count"]) >= gen.settings.max_attempts:
        notes = await records.move(
            conn,
            task,
            S.FAILED,
            cause="reconcile.not_accepted",
            cause_env=cause,
            now_ms=now_ms,
            values={"failure_class": "provider", "failure_code": "not_accepted"},
        )
        return [*notes, wake]
    notes = await records.move(
        conn,
        task,
        S.QUEUED,
        cause="reconcile.not_accepted",
        cause_env=cause,
        now_ms=now_ms,
        values={"current_attempt_id": None},
        deadline_ms=now_ms + int(gen.settings.queued_deadline_s * 1000),
    )
    requeued = cause.derive(
        events.TASK_QUEUED,
        events.TaskQueued(task_id=task["id"], priority=int(task["priority"])).model_dump(),
        key=task["id"],
        source="generation.observer",
    )
    return [*notes, requeued]


async def _job(conn: AsyncConnection, attempt_id: str) -> Mapping[str, Any] | None:
    row = await records.load_job(conn, attempt_id)
    return None if row is None else dict(row._mapping)


async def _record_job(
    conn: AsyncConnection,
    task: Mapping[str, Any],
    obs: events.StatusObserved,
    now_ms: int,
    gen: Generation,
) -> None:
    attempt = await records.load_attempt(conn, obs.attempt_id)
    terminal = N(obs.normalized_status).terminal
    await conn.execute(
        dialect_of(conn)
        .insert(provider_jobs)
        .values(
            id=ids.new_id_str(),
            task_id=task["id"],
            attempt_id=obs.attempt_id,
            tenant_id=task["tenant_id"],
            provider=obs.provider,
            provider_job_id=obs.provider_job_id,
            provider_request_key=attempt.provider_request_key if attempt else None,
            normalized_status=obs.normalized_status,
            progress=obs.progress,
            observed_at_ms=obs.observed_at_ms,
            last_observed_at=now_ms,
            next_poll_at=rules.next_poll(gen.settings, 0, now_ms, terminal=terminal),
            poll_count=0,
            actual_cost=obs.actual_cost,
            output_expires_at=obs.output_expires_at_ms,
            created_at=now_ms,
            updated_at=now_ms,
        )
        .on_conflict_do_nothing()
    )


async def _update_job(
    conn: AsyncConnection,
    job: Mapping[str, Any],
    obs: events.StatusObserved,
    now_ms: int,
    gen: Generation,
) -> None:
    terminal = N(obs.normalized_status).terminal
    values: dict[str, Any] = {
        "normalized_status": obs.normalized_status,
        "last_observed_at": now_ms,
        "updated_at": now_ms,
    }
    if obs.progress is not None:
        values["progress"] = obs.progress
    if obs.observed_at_ms is not None:
        values["observed_at_ms"] = max(obs.observed_at_ms, job["observed_at_ms"] or 0)
    if obs.actual_cost is not None:
        values["actual_cost"] = obs.actual_cost
    if obs.output_expires_at_ms is not None:
        values["output_expires_at"] = obs.output_expires_at_ms
    if terminal:
        values["next_poll_at"] = None
    elif obs.source == "callback" and job["next_poll_at"] is not None:
        # A live callback channel: the next poll can wait longer (polls are the safety net).
        values["next_poll_at"] = rules.next_poll(
            gen.settings, int(job["poll_count"]) + 2, now_ms, terminal=False
        )
    await conn.execute(
        sa.update(provider_jobs).where(provider_jobs.c.id == job["id"]).values(**values)
    )


async def release_slots(conn: AsyncConnection, gen: Generation, attempt_id: str) -> None:
    """Give back the attempt's permits (idempotent; the slot scanner fixes a lost release)."""
    row = (
        await conn.execute(sa.select(task_attempts.c.slots).where(task_attempts.c.id == attempt_id))
    ).first()
    if row is not None and row.slots:
        await gen.slots.release(attempt_id, list(row.slots))


def stage(
    gen: Generation, obs: events.StatusObserved, cause: Envelope, ctx: HandlerContext
) -> None:
    """Stage :func:`apply` of ``obs`` in ``ctx``'s commit (with its inbox mark).

    The observer does so for what reaches it on ``provider.status.observe`` (callbacks); the
    submitter and the poller do so for the answer they just got, instead of publishing it
    for the observer: the same guarded apply, one event and one commit fewer per answer.
    """
    now = ctx.clock.now_ms()

    async def write(conn: AsyncConnection) -> list[Envelope | Routed]:
        return list(await apply(conn, gen, obs, cause, now))

    ctx.write(write)


async def on_observed(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-observer``: stage :func:`apply` of one observation in the handler's commit."""
    stage(gen, ctx.payload_as(events.StatusObserved), env, ctx)
    return []
