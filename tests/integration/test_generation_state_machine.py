"""The generation state machine driven through its real paths by the fake provider.

Each scenario creates a task, scripts the provider and steps the hub (outbox, handlers,
scanners, the manual clock) until the task ends; it asserts the path the task's history
recorded. One test runs every scenario on one hub and compares the transitions the
``task_events`` table recorded with those ``states.py`` allows, so a transition added there
without a scenario reaching it fails. SQLite file and PostgreSQL; no media tools.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus as N
from aigc_hub.pipelines.generation.models import (
    assets,
    credit_ledger,
    generation_tasks,
    task_attempts,
    task_events,
)
from aigc_hub.pipelines.generation.states import TRANSITIONS, TaskStatus
from aigc_hub.store.engine import reader
from aigc_hub.testing import Cancel, JobScript, Step, Submit
from tests.support.fake_generation import TENANT, FakeGeneration, fake_generation

S = TaskStatus
Scenario = Callable[[FakeGeneration], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


async def ledger_entries(g: FakeGeneration, task_id: str) -> list[str]:
    async with reader(g.hub.engine) as conn:
        rows = await conn.execute(
            sa.select(credit_ledger.c.type)
            .where(credit_ledger.c.task_id == task_id)
            .order_by(credit_ledger.c.id)
        )
        return [str(r.type) for r in rows]


async def poll_round(g: FakeGeneration) -> None:
    """Let the next poll of every job fall due, emit it, and apply the answers."""
    await g.advance(g.settings.poll_max_s * 1.3)
    await g.scan("generation-polls")
    await g.settle()


# -- submit ------------------------------------------------------------------------------------


@scenario
async def accepted_then_polled_running_then_succeeded(g: FakeGeneration) -> None:
    task = await g.create("accepted, polled to success")
    await g.settle()
    assert await g.status(task) == S.SUBMITTED
    await poll_round(g)
    assert (await g.task(task))["progress"] == 0.5
    await poll_round(g)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.RUNNING, S.OUTPUT_FETCHING,
        S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    assert await ledger_entries(g, task) == ["RESERVE", "SETTLE"]


@scenario
async def submit_answers_running(g: FakeGeneration) -> None:
    g.provider.script("running at once", JobScript(submit=[Submit.RUN], steps=[Step(N.SUCCEEDED)]))
    task = await g.create("running at once")
    await g.settle()
    assert await g.status(task) == S.RUNNING
    await poll_round(g)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.RUNNING, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip


@scenario
async def submit_answers_finished(g: FakeGeneration) -> None:
    g.provider.script("finished at once", JobScript(submit=[Submit.FINISH]))
    task = await g.create("finished at once")
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    # the asset row holds what the probe read from the served bytes (fake_video's defaults)
    async with reader(g.hub.engine) as conn:
        asset = (
            await conn.execute(
                sa.select(assets).where(assets.c.id == (await g.task(task))["result_asset_id"])
            )
        ).one()
    assert (asset.width, asset.height, asset.codec, asset.duration_ms) == (320, 180, "h264", 2000)


@scenario
async def an_output_the_media_worker_cannot_read_fails_in_post_processing(
    g: FakeGeneration,
) -> None:
    # The fake video passes the fetcher's (fake) probe; the media toolkit, asked for a
    # variant, sniffs bytes it does not know and refuses them before any tool runs.
    g.provider.script("unreadable media", JobScript(submit=[Submit.FINISH]))
    g.settings.media_profiles = "poster"
    try:
        task = await g.create("unreadable media")
        await g.settle()
    finally:
        g.settings.media_profiles = ""
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.FAILED,
    ]  # fmt: skip
    row = await g.task(task)
    assert row["failure_class"] == "invalid_output"
    # the fake provider reports no cost for it: the whole hold goes back
    assert await ledger_entries(g, task) == ["RESERVE", "RELEASE"]


@scenario
async def submit_rejected_fails_and_releases_the_hold(g: FakeGeneration) -> None:
    g.provider.script("rejected", JobScript(submit=[Submit.REJECT]))
    task = await g.create("rejected")
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.FAILED]
    row = await g.task(task)
    assert (row["failure_class"], row["failure_code"]) == ("provider", "invalid_input")
    assert await ledger_entries(g, task) == ["RESERVE", "RELEASE"]


@scenario
async def rate_limited_submit_waits_then_submits_once_more(g: FakeGeneration) -> None:
    g.provider.script("rate limited", JobScript(submit=[Submit.RATE_LIMITED, Submit.FINISH]))
    before = len(g.provider.calls_of("submit"))
    task = await g.create("rate limited")
    await g.pump_until(lambda: len(g.provider.calls_of("submit")) > before)
    assert await g.status(task) == S.DISPATCHING  # the submitter waits out Retry-After
    await g.advance_until(lambda: len(g.provider.calls_of("submit")) > before + 1)
    await g.settle()
    assert await g.status(task) == S.SUCCEEDED
    key = g.request_key("rate limited")
    assert [c.method for c in g.provider.calls if c.request_key == key][:3] == [
        "submit",
        "query",
        "submit",
    ]  # asked by key before sending again
    assert len(g.provider.jobs_for_key(key)) == 1


@scenario
async def unavailable_provider_is_asked_by_key_before_the_submit_is_sent_again(
    g: FakeGeneration,
) -> None:
    g.provider.script("503 first", JobScript(submit=[Submit.UNAVAILABLE, Submit.ACCEPT]))
    before = len(g.provider.calls_of("submit"))
    task = await g.create("503 first")
    await g.pump_until(lambda: len(g.provider.calls_of("submit")) > before)
    await g.advance_until(lambda: len(g.provider.calls_of("submit")) > before + 1)
    await g.settle()
    assert await g.status(task) == S.SUBMITTED
    key = g.request_key("503 first")
    assert [c.method for c in g.provider.calls if c.request_key == key] == [
        "submit", "query", "submit"
    ]  # fmt: skip
    await poll_round(g)
    await poll_round(g)
    assert await g.status(task) == S.SUCCEEDED


@scenario
async def unrecognized_answer_is_reconciled_at_the_dispatching_deadline(g: FakeGeneration) -> None:
    g.provider.script("odd answer", JobScript(submit=[Submit.UNRECOGNIZED]))
    task = await g.create("odd answer")
    await g.settle()
    assert await g.status(task) == S.DISPATCHING
    await g.advance(g.settings.dispatching_deadline_s + 1)
    assert "submit_rechecked" in await g.scan("generation-deadlines")
    await g.settle()
    assert await g.status(task) == S.RUNNING  # found by its request key, not submitted again
    key = g.request_key("odd answer")
    assert len([c for c in g.provider.calls_of("submit") if c.request_key == key]) == 1
    assert len(g.provider.jobs_for_key(key)) == 1
    await poll_round(g)
    assert await g.status(task) == S.SUCCEEDED


@scenario
async def silent_running_job_is_polled_at_its_deadline(g: FakeGeneration) -> None:
    g.provider.script("silent", JobScript(submit=[Submit.RUN], steps=[Step(N.SUCCEEDED)]))
    task = await g.create("silent")
    await g.settle()
    assert await g.status(task) == S.RUNNING
    await g.advance(g.settings.running_silence_s + 1)
    assert "silence_polled" in await g.scan("generation-deadlines")  # no poll scanner ran
    await g.settle()
    assert await g.status(task) == S.SUCCEEDED


# -- a submit whose answer was lost (SUBMIT_UNKNOWN) -------------------------------------------


async def timed_out(g: FakeGeneration, prompt: str, script: JobScript) -> str:
    """Create a task whose submit times out; return it once the recheck poll was answered."""
    g.provider.script(prompt, script)
    task = await g.create(prompt)
    await g.settle()
    assert await g.status(task) == S.SUBMIT_UNKNOWN
    await g.advance(g.settings.unknown_recheck_s)
    assert "reconcile_queried" in await g.scan("generation-deadlines")
    await g.settle()
    return task


@scenario
async def unknown_submit_found_queued(g: FakeGeneration) -> None:
    steps = [Step(N.ACCEPTED), Step(N.SUCCEEDED)]
    script = JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT], steps=steps)
    task = await timed_out(g, "lost answer, queued", script)
    assert await g.status(task) == S.SUBMITTED
    await poll_round(g)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.SUBMITTED, S.OUTPUT_FETCHING,
        S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    key = g.request_key("lost answer, queued")
    assert len([c for c in g.provider.calls_of("submit") if c.request_key == key]) == 1


@scenario
async def unknown_submit_found_running(g: FakeGeneration) -> None:
    script = JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT])
    task = await timed_out(g, "lost answer, running", script)
    assert await g.status(task) == S.RUNNING
    await poll_round(g)
    assert await g.status(task) == S.SUCCEEDED
    assert len(g.provider.jobs_for_prompt("lost answer, running")) == 1


@scenario
async def unknown_submit_found_finished(g: FakeGeneration) -> None:
    script = JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT], steps=[Step(N.SUCCEEDED)])
    task = await timed_out(g, "lost answer, finished", script)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.OUTPUT_FETCHING, S.POST_PROCESSING,
        S.SUCCEEDED,
    ]  # fmt: skip


@scenario
async def unknown_submit_found_failed(g: FakeGeneration) -> None:
    steps = [Step(N.FAILED, error_code="content_policy")]
    script = JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT], steps=steps)
    task = await timed_out(g, "lost answer, failed", script)
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.FAILED]
    assert (await g.task(task))["failure_code"] == "content_policy"
    assert await ledger_entries(g, task) == ["RESERVE", "RELEASE"]


@scenario
async def unknown_submit_never_arrived_is_requeued_and_resubmitted(g: FakeGeneration) -> None:
    script = JobScript(submit=[Submit.TIMEOUT_BEFORE_ACCEPT, Submit.FINISH])
    task = await timed_out(g, "never arrived", script)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.QUEUED, S.DISPATCHING,
        S.OUTPUT_FETCHING, S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    # the second attempt has its own request key, and only it made a job
    async with reader(g.hub.engine) as conn:
        keys = (
            (
                await conn.execute(
                    sa.select(task_attempts.c.provider_request_key)
                    .where(task_attempts.c.task_id == task)
                    .order_by(task_attempts.c.attempt_no)
                )
            )
            .scalars()
            .all()
        )
    assert len(keys) == 2 and keys[0] != keys[1]
    assert [j.request_key for j in g.provider.jobs_for_prompt("never arrived")] == [keys[1]]


@scenario
async def unrecognized_answer_then_job_lost_requeues_from_dispatching(g: FakeGeneration) -> None:
    g.provider.script("lost job", JobScript(submit=[Submit.UNRECOGNIZED, Submit.FINISH]))
    task = await g.create("lost job")
    await g.settle()
    assert await g.status(task) == S.DISPATCHING  # the answer taught us nothing
    (job,) = g.provider.jobs_for_prompt("lost job")
    g.provider.forget(job)
    await poll_round(g)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.QUEUED, S.DISPATCHING, S.OUTPUT_FETCHING,
        S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip


# -- polled failures, fetch ----------------------------------------------------------------


@scenario
async def accepted_then_polled_failed(g: FakeGeneration) -> None:
    g.provider.script("fails queued", JobScript(steps=[Step(N.FAILED, error_code="capacity")]))
    task = await g.create("fails queued")
    await g.settle()
    await poll_round(g)
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.FAILED]


@scenario
async def accepted_then_polled_finished(g: FakeGeneration) -> None:
    g.provider.script("quick", JobScript(steps=[Step(N.SUCCEEDED)]))
    task = await g.create("quick")
    await g.settle()
    await poll_round(g)
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.OUTPUT_FETCHING, S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip


@scenario
async def running_then_polled_failed(g: FakeGeneration) -> None:
    steps = [Step(N.FAILED, error_code="render_failed")]
    g.provider.script("fails running", JobScript(submit=[Submit.RUN], steps=steps))
    task = await g.create("fails running")
    await g.settle()
    await poll_round(g)
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.RUNNING, S.FAILED]


@scenario
async def unreadable_output_fails_the_task(g: FakeGeneration) -> None:
    g.provider.script("garbage", JobScript(submit=[Submit.FINISH], output=b"<html>oops</html>"))
    task = await g.create("garbage")
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.OUTPUT_FETCHING, S.FAILED]
    row = await g.task(task)
    assert (row["failure_class"], row["failure_code"]) == ("invalid_output", "unreadable_video")
    assert row["result_asset_id"] is None


@scenario
async def expired_output_url_is_fetched_again(g: FakeGeneration) -> None:
    g.provider.script("expired", JobScript(submit=[Submit.FINISH], expired_fetches=1))
    before = len(g.provider.calls_of("fetch_output"))
    task = await g.create("expired")
    await g.pump_until(lambda: len(g.provider.calls_of("fetch_output")) > before)
    assert await g.status(task) == S.OUTPUT_FETCHING
    await g.advance_until(lambda: len(g.provider.calls_of("fetch_output")) > before + 1)
    await g.settle()
    assert await g.status(task) == S.SUCCEEDED
    assert len(g.provider.calls_of("fetch_output")) == before + 2


# -- cancel ------------------------------------------------------------------------------------


async def cancel(g: FakeGeneration, task: str) -> None:
    await services.cancel_task(g.gen, tenant_id=TENANT, task_id=task)


@scenario
async def canceled_while_queued(g: FakeGeneration) -> None:
    task = await g.create("cancel queued")
    await cancel(g, task)  # before the scheduler saw it
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.CANCELED]
    assert await ledger_entries(g, task) == ["RESERVE", "RELEASE"]


@scenario
async def queued_too_long_fails(g: FakeGeneration) -> None:
    task = await g.create("never scheduled")  # the scheduler never gets to it
    await g.advance(g.settings.queued_deadline_s + 1)
    assert "failed_queue_timeout" in await g.scan("generation-deadlines")
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.FAILED]
    assert (await g.task(task))["failure_code"] == "queue_timeout"


@scenario
async def canceled_while_dispatching_never_reaches_the_provider(g: FakeGeneration) -> None:
    g.provider.script("cancel dispatching", JobScript(submit=[Submit.RATE_LIMITED]))
    before = len(g.provider.calls_of("submit"))
    task = await g.create("cancel dispatching")
    await g.pump_until(lambda: len(g.provider.calls_of("submit")) > before)
    await cancel(g, task)
    queries = len(g.provider.calls_of("query"))
    # the submitter's Retry-After ends: it asks by key, then finds the cancel
    await g.advance_until(lambda: len(g.provider.calls_of("query")) > queries)
    await g.settle()
    assert await g.path(task) == [S.QUEUED, S.DISPATCHING, S.CANCEL_REQUESTED, S.CANCELED]
    assert g.provider.jobs_for_prompt("cancel dispatching") == []


@scenario
async def canceled_while_submitted_stops_at_the_provider(g: FakeGeneration) -> None:
    task = await g.create("cancel submitted")
    await g.settle()
    await cancel(g, task)
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMITTED, S.CANCEL_REQUESTED, S.CANCELED,
    ]  # fmt: skip
    assert [j.status for j in g.provider.jobs_for_prompt("cancel submitted")] == [N.CANCELED]


@scenario
async def canceled_while_running_but_it_finished_anyway(g: FakeGeneration) -> None:
    g.provider.script("finishes anyway", JobScript(submit=[Submit.RUN], cancel=Cancel.FINISH))
    task = await g.create("finishes anyway")
    await g.settle()
    await cancel(g, task)
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.RUNNING, S.CANCEL_REQUESTED, S.OUTPUT_FETCHING,
        S.POST_PROCESSING, S.SUCCEEDED,
    ]  # fmt: skip
    assert await ledger_entries(g, task) == ["RESERVE", "SETTLE"]


@scenario
async def canceled_while_unknown_asks_the_provider_by_request_key(g: FakeGeneration) -> None:
    script = JobScript(submit=[Submit.TIMEOUT_AFTER_ACCEPT], steps=[])
    g.provider.script("cancel unknown", script)
    task = await g.create("cancel unknown")
    await g.settle()
    assert await g.status(task) == S.SUBMIT_UNKNOWN
    await cancel(g, task)
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.CANCEL_REQUESTED, S.CANCELED,
    ]  # fmt: skip
    assert [j.status for j in g.provider.jobs_for_prompt("cancel unknown")] == [N.CANCELED]


@scenario
async def canceled_while_unknown_and_never_submitted_ends_canceled(g: FakeGeneration) -> None:
    g.provider.script("cancel never arrived", JobScript(submit=[Submit.TIMEOUT_BEFORE_ACCEPT]))
    task = await g.create("cancel never arrived")
    await g.settle()
    await cancel(g, task)
    await g.settle()
    assert await g.path(task) == [
        S.QUEUED, S.DISPATCHING, S.SUBMIT_UNKNOWN, S.CANCEL_REQUESTED, S.CANCELED,
    ]  # fmt: skip
    assert g.provider.jobs_for_prompt("cancel never arrived") == []
    assert await ledger_entries(g, task) == ["RESERVE", "RELEASE"]


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_task_takes_the_path_its_provider_leads_it(
    name: str, db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        await SCENARIOS[name](g)


async def test_every_allowed_transition_is_taken_by_some_real_path(
    db_url: str, tmp_path: Path
) -> None:
    async with fake_generation(db_url, tmp_path) as g:
        for run in SCENARIOS.values():
            g.close_breakers()  # each scenario as on a fresh hub
            await run(g)
        async with reader(g.hub.engine) as conn:
            statuses = (await conn.execute(sa.select(generation_tasks.c.status))).scalars()
            assert {S(s).terminal for s in statuses} == {True}  # each scenario ends its task
            rows = await conn.execute(
                sa.select(task_events.c.from_status, task_events.c.to_status)
                .where(task_events.c.from_status.is_not(None))
                .distinct()
            )
            taken = {(S(r.from_status), S(r.to_status)) for r in rows}
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert taken <= allowed
    assert sorted(allowed - taken) == [], "allowed but never taken"
