"""Provider callbacks through the real gateway, and doubled event delivery, on the fake
provider: what the hub makes of webhooks and of every event arriving twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus as N
from aigc_hub.pipelines.generation.states import TaskStatus as S
from aigc_hub.reliability import webhooks
from aigc_hub.testing import FakeProvider, JobScript, Step, Submit
from tests.support.callback_gateway import JSON, Gateway, gateway_for
from tests.support.fake_generation import WEBHOOK_SECRET, fake_generation


@pytest.fixture
async def gateway(db_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with gateway_for(db_url, tmp_path) as made:
        yield made


async def test_callbacks_move_a_task_to_success_and_a_repeated_one_is_a_duplicate(
    gateway: Gateway,
) -> None:
    g = gateway.g
    task = await g.create("called back")
    await g.settle()
    (job,) = g.provider.jobs_for_prompt("called back")
    g.provider.move(job, N.RUNNING, progress=0.25)
    assert await gateway.send(job, msg_id="msg_running") == "accepted"
    await g.settle()
    assert (await g.status(task), (await g.task(task))["progress"]) == (S.RUNNING, 0.25)
    assert await gateway.send(job, msg_id="msg_running") == "duplicate"
    g.provider.move(job, N.SUCCEEDED, progress=1.0)
    assert await gateway.send(job) == "accepted"
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.RUNNING, S.OUTPUT_FETCHING,
        S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    assert g.provider.calls_of("cancel") == []


async def test_an_older_callback_arriving_late_changes_nothing(gateway: Gateway) -> None:
    g = gateway.g
    task = await g.create("reordered")
    await g.settle()
    (job,) = g.provider.jobs_for_prompt("reordered")
    g.provider.move(job, N.RUNNING, progress=0.3)
    early = g.provider.callback_body(job)
    g.provider.move(job, N.RUNNING, progress=0.8)
    assert await gateway.send(job) == "accepted"
    await g.settle()
    assert await gateway.send(job, body=early) == "accepted"  # delivered out of order
    await g.settle()
    assert (await g.task(task))["progress"] == 0.8
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.RUNNING]


async def test_a_failure_callback_fails_a_running_task(gateway: Gateway) -> None:
    g = gateway.g
    task = await g.create("fails by callback")
    await g.settle()
    (job,) = g.provider.jobs_for_prompt("fails by callback")
    g.provider.move(job, N.RUNNING, progress=0.5)
    await gateway.send(job)
    await g.settle()
    g.provider.move(job, N.FAILED, error_code="content_policy")
    await gateway.send(job)
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.RUNNING, S.FAILED]
    assert (await g.task(task))["failure_code"] == "content_policy"


async def test_a_callback_that_is_no_job_update_is_refused_with_a_problem(
    gateway: Gateway,
) -> None:
    body = b'{"hello": "world"}'
    ts = gateway.g.clock.now_ms() // 1000
    headers = {**webhooks.sign_headers(WEBHOOK_SECRET, "msg_bad", ts, body), **JSON}
    response = await gateway.http.post("/v1/callbacks/local", content=body, headers=headers)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_every_event_delivered_twice_still_makes_one_job_and_one_path(
    db_url: str, tmp_path: Path
) -> None:
    # A provider without idempotency keys: a second submit would make a second job.
    provider = FakeProvider(idempotent=False)
    provider.script(
        "twice", JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT], steps=[Step(N.SUCCEEDED)])
    )
    async with fake_generation(db_url, tmp_path, provider, publish_twice=True) as g:
        published: list[bytes] = []
        g.broker.fail_publish = lambda batch: published.extend(m.value for m in batch)
        task = await g.create("twice")
        await g.settle()
        await g.advance(g.settings.unknown_recheck_s)
        await g.scan("generation-deadlines")
        await g.settle()
        assert await g.path(task) == [
            S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.OUTPUT_FETCHING, S.POST_PROCESSING,
            S.SUCCEEDED,
        ]  # fmt: skip
        dispatched = [v for v in published if events.ATTEMPT_DISPATCHED.encode() in v]
        assert len(dispatched) == 2 and dispatched[0] == dispatched[1]  # it was delivered twice
        assert len(provider.jobs_for_prompt("twice")) == 1
        assert len(provider.calls_of("submit")) == 1


async def test_a_submit_unknown_the_provider_cannot_look_up_fails_after_the_give_up_time(
    db_url: str, tmp_path: Path
) -> None:
    provider = FakeProvider(lookup_by_request_key=False)
    provider.script("unfindable", JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT]))
    async with fake_generation(db_url, tmp_path, provider, unknown_give_up_s=60.0) as g:
        task = await g.create("unfindable")
        await g.settle()
        settings = g.settings
        for _ in range(5):  # the rechecks at 10, 20 … 50 s learn nothing
            assert await g.status(task) == S.SUBMIT_UNKNOWN
            await g.advance(settings.unknown_recheck_s)
            assert await g.scan("generation-deadlines") == ["reconcile_queried"]
            await g.settle()
        await g.advance(settings.unknown_recheck_s)
        assert await g.scan("generation-deadlines") == ["failed_submit_unknown"]
        await g.settle()
        assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.FAILED]
        row = await g.task(task)
        assert (row["failure_class"], row["failure_code"]) == ("provider", "submit_unknown")
        assert await g.held_slots() == 0
        assert len(provider.calls_of("submit")) == 1
