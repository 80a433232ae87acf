"""The circuit breaker on the real routing and submit path: a provider whose submits fail is
routed around, and stays routed around however well it answers polls for other jobs."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.messaging.base import Record
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import events, services
from aigc_hub.pipelines.generation.adapters.base import (
    GenerationRequest,
    NormalizedStatus,
    PreparedInput,
    ProviderError,
    ProviderResult,
    RetryClass,
)
from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter
from aigc_hub.pipelines.generation.handlers.poller import poll_job
from aigc_hub.pipelines.generation.handlers.scheduler import schedule
from aigc_hub.pipelines.generation.handlers.submitter import submit_attempt
from aigc_hub.pipelines.generation.models import task_attempts
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, Generation, build
from aigc_hub.runtime.context import HandlerContext
from tests.support.hubs import hub_for

UNUSED = "http://127.0.0.1:9"  # never called: both adapters answer without the network


class RefusingSubmits(LocalProviderAdapter):
    """The cheapest provider: every submit fails (5xx), every query says the job runs."""

    name = "refusing"

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        raise ProviderError("503 from provider", retry_class=RetryClass.RETRYABLE)

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        return ProviderResult(provider_job_id or "job-1", NormalizedStatus.RUNNING, progress=0.5)


class Dearer(LocalProviderAdapter):
    """A provider one credit dearer per task: used only when ``refusing`` is routed around."""

    name = "dearer"

    def estimate_cost(self, request: GenerationRequest) -> int:
        return super().estimate_cost(request) + 1


def context(
    hub: Hub, env: Envelope, payload: events.AttemptDispatched | events.PollRequested
) -> HandlerContext:
    record = Record("generation", 0, 0, env.key, env.to_bytes(), {}, 0)
    return HandlerContext(
        consumer="test",
        pipeline="generation",
        record=record,
        engine=hub.engine,
        clock=hub.clock,
        payload=payload,
    )


async def attempts(hub: Hub) -> list[events.AttemptDispatched]:
    async with hub.engine.connect() as conn:
        rows = await conn.execute(sa.select(task_attempts).order_by(task_attempts.c.created_at))
        return [
            events.AttemptDispatched(
                task_id=r.task_id,
                attempt_id=r.id,
                provider=r.provider,
                model=r.model,
                request_key=r.provider_request_key,
            )
            for r in rows
        ]


async def create(gen: Generation, n: int) -> None:
    body = services.CreateTask(model="local-v1", prompt="p", duration_s=1, resolution="160x90")
    await services.create_task(gen, tenant_id="t", body=body, idempotency_key=f"k{n}")


async def test_a_provider_failing_its_submits_is_not_reclosed_by_good_polls_of_other_jobs(
    sqlite_url: str,
) -> None:
    adapters = [RefusingSubmits(UNUSED), Dearer(UNUSED)]
    pipeline = generation.with_state(
        lambda hub, _settings: build(hub, GenerationSettings(), adapters=adapters)
    )
    async with hub_for(sqlite_url, MemoryBroker(), [pipeline]) as hub:
        gen = hub.state_of(STATE)
        await services.grant_credits(hub, tenant_id="t", amount=1_000, grant_id="g")
        for n in range(5):
            await create(gen, n)
        assert await schedule(gen) == 5
        dispatched = await attempts(hub)
        assert {d.provider for d in dispatched} == {"refusing"}  # the cheapest, while closed
        for d in dispatched:
            env = Envelope.new(
                events.ATTEMPT_DISPATCHED, d.model_dump(), key=d.task_id, source="test"
            )
            with pytest.raises(Retry):
                await submit_attempt(gen, env, context(hub, env, d))
        assert gen.providers.breakers["refusing"].open  # 5 of 5 submits failed
        for d in dispatched:  # the jobs' polls answer fine
            poll = events.PollRequested(task_id=d.task_id, attempt_id=d.attempt_id)
            env = Envelope.new(
                events.POLL_REQUESTED, poll.model_dump(), key=d.task_id, source="test"
            )
            ctx = context(hub, env, poll)
            # The good answer is applied in the poll's own commit: one staged write, no event.
            assert await poll_job(gen, env, ctx) == []
            assert len(ctx.writes) == 1
        assert gen.providers.breakers["refusing"].open
        await create(gen, 99)
        assert await schedule(gen) == 1
        assert (await attempts(hub))[-1].provider == "dearer"
