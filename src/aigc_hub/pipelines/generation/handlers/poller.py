"""Polling: the status channel for jobs without reliable callbacks, and the safety net for
lost ones (seed 004 §3.6.4). The poll scanner emits ``PollRequested`` for jobs whose
``next_poll_at`` passed; this handler asks the provider (rate-limited per provider) and turns
the answer into one ``StatusObserved``, applied in the same commit. Backoff: exponential
with jitter, reset by progress.
"""

from __future__ import annotations

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.pipelines.generation import events, records
from aigc_hub.pipelines.generation.adapters.base import ProviderError
from aigc_hub.pipelines.generation.handlers import observer
from aigc_hub.pipelines.generation.models import provider_jobs
from aigc_hub.pipelines.generation.rules import next_poll
from aigc_hub.pipelines.generation.state import Generation
from aigc_hub.pipelines.generation.states import TaskStatus
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store.engine import reader


async def poll_job(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    hub = gen.hub
    p = ctx.payload_as(events.PollRequested)
    async with reader(hub.engine) as conn:
        task = await records.load(conn, p.task_id)
        attempt = await records.load_attempt(conn, p.attempt_id)
        job = await records.load_job(conn, p.attempt_id)
    if task is None or attempt is None or task["current_attempt_id"] != p.attempt_id:
        return []
    if TaskStatus(task["status"]).terminal:
        return []
    decision = await hub.cache.limiter.acquire(
        f"poll:{attempt.provider}", gen.settings.poll_rate_per_s, gen.settings.poll_rate_per_s
    )
    if not decision.allowed:
        raise Retry(max(decision.retry_after_s, 0.05))
    adapter = gen.providers.get(attempt.provider)
    try:
        result = await adapter.query(
            provider_job_id=job.provider_job_id if job is not None else None,
            request_key=attempt.provider_request_key,
        )
    except ProviderError as exc:
        # Not the breaker's business: it gates new submits (see CircuitBreaker).
        raise Retry(exc.retry_after_s or 5.0) from exc
    now = hub.clock.now_ms()
    if job is not None:
        polls = int(job.poll_count) + 1
        progressed = (result.progress or 0) > (job.progress or 0)
        ctx.write(
            sa.update(provider_jobs)
            .where(provider_jobs.c.id == job.id)
            .values(
                poll_count=0 if progressed else polls,
                next_poll_at=next_poll(
                    gen.settings,
                    0 if progressed else polls,
                    now,
                    terminal=result.normalized_status.terminal,
                ),
            )
        )
    # Applied in this commit by the state handler's guarded apply (no event for it).
    observation = events.StatusObserved.of(
        result, task_id=p.task_id, attempt_id=p.attempt_id, provider=attempt.provider, source="poll"
    )
    observer.stage(gen, observation, env, ctx)
    return []


async def on_poll(gen: Generation, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """``generation-poller``: ask the provider about one job (:func:`poll_job`)."""
    return await poll_job(gen, env, ctx)
