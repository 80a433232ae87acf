"""Submitting an attempt to its provider, and asking a provider to cancel (seed 004 §3.7.1).

The submit is the one call that may not be blindly repeated. Before calling, the attempt is
marked ``submit_started_at`` in a checkpoint (``ctx.checkpoint``: its own short transaction,
the handlers' one write outside the staged ones); a delivery that finds the mark
already set (a crash or timeout after the call may have reached the provider) *queries by
the request key* instead of submitting, and only a confirmed NOT_FOUND allows a new submit.
No provider call happens inside a database transaction. Every other change (the submit's
finish, SUBMIT_UNKNOWN) is staged with ``ctx.write`` and commits with the inbox mark; so is
the answer itself, applied by the state handler's guarded apply (seed 004 §3.4 step 18a:
the job recorded, the task SUBMITTED) rather than published for the observer to apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.pipelines.generation import events, records
from aigc_hub.pipelines.generation.adapters.base import (
    NormalizedStatus,
    ProviderError,
    ProviderResult,
    RetryClass,
)
from aigc_hub.pipelines.generation.handlers import observer
from aigc_hub.pipelines.generation.models import task_attempts
from aigc_hub.pipelines.generation.requests import request_of
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import AttemptStatus, TaskStatus
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub


def observed(
    cause: Envelope,
    result: ProviderResult,
    *,
    task_id: str,
    attempt_id: str,
    provider: str,
    source: str,
) -> Envelope:
    """A provider answer as the one observation event the state handler applies."""
    observation = events.StatusObserved.of(
        result, task_id=task_id, attempt_id=attempt_id, provider=provider, source=source
    )
    return cause.derive(
        events.STATUS_OBSERVED, observation.model_dump(), key=task_id, source="generation"
    )


def _apply(
    gen: Generation,
    cause: Envelope,
    d: events.AttemptDispatched,
    result: ProviderResult,
    source: str,
    ctx: HandlerContext,
) -> list[Envelope]:
    """Stage the provider's answer through the one state handler's apply (no event)."""
    observation = events.StatusObserved.of(
        result, task_id=d.task_id, attempt_id=d.attempt_id, provider=d.provider, source=source
    )
    observer.stage(gen, observation, cause, ctx)
    return []


async def submit_attempt(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    hub = gen.hub
    d = ctx.payload_as(events.AttemptDispatched)
    async with reader(hub.engine) as conn:
        task = await records.load(conn, d.task_id)
        attempt = await records.load_attempt(conn, d.attempt_id)
    if task is None or attempt is None or task["current_attempt_id"] != d.attempt_id:
        return []
    if attempt.status != TaskStatus.DISPATCHING.value:
        return []  # already answered (a redelivery)
    adapter = gen.providers.get(d.provider)
    breaker = gen.providers.breakers[d.provider]
    now = hub.clock.now_ms()

    async def mark_started(conn: AsyncConnection) -> str | None:
        started = await conn.execute(
            sa.update(task_attempts)
            .where(task_attempts.c.id == d.attempt_id, task_attempts.c.submit_started_at.is_(None))
            .values(submit_started_at=now)
            .returning(task_attempts.c.id)
        )
        found = started.scalar_one_or_none()
        return None if found is None else str(found)

    first = await ctx.checkpoint(
        "submit_started_at must be durable before the provider call, so a retry after a crash "
        "queries by request key instead of submitting twice",
        mark_started,
    )
    try:
        if first is None:
            # We may have called before: ask, never resend blindly.
            result = await adapter.query(provider_job_id=None, request_key=d.request_key)
            if result.normalized_status is not NormalizedStatus.NOT_FOUND:
                breaker.forfeit(d.attempt_id)  # no submit made: not a trial's outcome
                return _apply(gen, env, d, result, "reconcile", ctx)
        if TaskStatus(task["status"]) is TaskStatus.CANCEL_REQUESTED:
            # Canceled before the provider ever had it: confirmed non-submission.
            breaker.forfeit(d.attempt_id)
            gone = ProviderResult(None, NormalizedStatus.NOT_FOUND)
            return _apply(gen, env, d, gone, "submit", ctx)
        callback = f"{gen.settings.callback_base_url.rstrip('/')}/v1/callbacks/{d.provider}"
        prepared = await adapter.prepare_input(
            request_of(task, request_key=d.request_key, callback_url=callback)
        )
        result = await adapter.submit(prepared)
    except ProviderError as exc:
        breaker.record(d.attempt_id, False)
        return _submit_failed(gen, env, d, exc, ctx)
    except Exception as exc:
        breaker.record(d.attempt_id, False)
        return _submit_failed(gen, env, d, adapter.classify_error(exc, during="submit"), ctx)
    breaker.record(d.attempt_id, True)
    ctx.write(
        sa.update(task_attempts)
        .where(task_attempts.c.id == d.attempt_id)
        .values(submit_finished_at=hub.clock.now_ms())
    )
    return _apply(gen, env, d, result, "submit", ctx)


def _submit_failed(
    gen: Generation,
    env: Envelope,
    d: events.AttemptDispatched,
    exc: ProviderError,
    ctx: HandlerContext,
) -> list[Envelope]:
    if exc.retry_class is RetryClass.UNKNOWN_OUTCOME:
        mark_unknown(gen, env, d, ctx)
        return []
    if exc.retry_class in (RetryClass.RATE_LIMITED, RetryClass.RETRYABLE):
        # Refused before acceptance (429/5xx): the next delivery queries by key, then resubmits.
        raise Retry(exc.retry_after_s or 2.0)
    failed = ProviderResult(
        None,
        NormalizedStatus.FAILED,
        retry_class=exc.retry_class,
        provider_error_code=exc.code or "rejected",
    )
    return _apply(gen, env, d, failed, "submit", ctx)


def mark_unknown(
    gen: Generation, env: Envelope, d: events.AttemptDispatched, ctx: HandlerContext
) -> None:
    """The submit timed out: the job may exist. Stage SUBMIT_UNKNOWN until a query tells."""
    now = gen.hub.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        task = await records.load(conn, d.task_id)
        if task is None or task["status"] != TaskStatus.DISPATCHING.value:
            return []
        await records.move_attempt(
            conn, d.attempt_id, AttemptStatus.SUBMIT_UNKNOWN, values={"unknown_since": now}
        )
        notes = await records.move(
            conn,
            task,
            TaskStatus.SUBMIT_UNKNOWN,
            cause="submit.timeout",
            cause_env=env,
            now_ms=now,
            deadline_ms=now + int(gen.settings.unknown_recheck_s * 1000),
        )
        return [*notes]

    ctx.write(record)


async def cancel_at_provider(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Ask the provider to stop; its answer arrives as an observation like any other."""
    hub = gen.hub
    c = ctx.payload_as(events.CancelRequested)
    async with reader(hub.engine) as conn:
        task = await records.load(conn, c.task_id)
        if task is None or task["status"] != TaskStatus.CANCEL_REQUESTED.value:
            return []
        job = await records.load_job(conn, task["current_attempt_id"])
    if job is None:
        return await _cancel_unrecorded(hub, gen, env, task)
    adapter = gen.providers.get(job.provider)
    try:
        result = await adapter.cancel(job.provider_job_id)
    except ProviderError as exc:
        raise Retry(exc.retry_after_s or 5.0) from exc
    return [
        observed(
            env,
            result,
            task_id=c.task_id,
            attempt_id=job.attempt_id,
            provider=job.provider,
            source="cancel",
        )
    ]


async def _cancel_unrecorded(
    hub: Hub, gen: Generation, env: Envelope, task: Mapping[str, Any]
) -> list[Envelope]:
    """Cancel an attempt whose job is not recorded. A submit not yet made, or still in flight,
    sees CANCEL_REQUESTED itself; one that timed out (SUBMIT_UNKNOWN) never answers again, so
    ask by the request key: NOT_FOUND ends the task CANCELED, a found job is asked to stop."""
    async with reader(hub.engine) as conn:
        attempt = await records.load_attempt(conn, task["current_attempt_id"])
    if attempt is None or attempt.status != TaskStatus.SUBMIT_UNKNOWN.value:
        return []
    adapter = gen.providers.get(attempt.provider)
    try:
        result = await adapter.query(provider_job_id=None, request_key=attempt.provider_request_key)
        if result.provider_job_id is not None and not result.normalized_status.terminal:
            result = await adapter.cancel(result.provider_job_id)
    except ProviderError as exc:
        raise Retry(exc.retry_after_s or 5.0) from exc
    return [
        observed(
            env,
            result,
            task_id=str(task["id"]),
            attempt_id=attempt.id,
            provider=attempt.provider,
            source="cancel",
        )
    ]


async def on_dispatch(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-submitter``: submit a dispatched attempt, or cancel one at its provider."""
    if env.event_type == events.ATTEMPT_DISPATCHED:
        return await submit_attempt(gen, env, ctx)
    if env.event_type == events.CANCEL_REQUESTED:
        return await cancel_at_provider(gen, env, ctx)
    return []
