"""What one task costs the control plane, counted on the real engine and outbox (SQLite and
PostgreSQL): the write transactions and events of a task from create to SUCCEEDED through
the callback gateway (seed 004 §3.9.2 counts ~10 key writes and ~12 messages per task), the
gateway's one short transaction per webhook, and a fetch that starts from the archived
webhook's output instead of asking the provider again."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.generation import events
from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus as N
from aigc_hub.pipelines.generation.models import callback_events
from aigc_hub.pipelines.generation.states import TaskStatus as S
from aigc_hub.reliability import notifications
from aigc_hub.testing import JobScript
from tests.support.callback_gateway import Gateway, gateway_for
from tests.support.write_counts import WriteCounts, counting_writes

#: Transactions that are the backbone's bookkeeping, not the task's: the relay marking rows
#: published, scanner leases.
BOOKKEEPING = frozenset({"outbox", "leases"})
#: A task's write transactions from create to SUCCEEDED with three webhooks (RUNNING 0.25,
#: RUNNING 0.5, SUCCEEDED): create, dispatch, submit mark, submit answer applied, three
#: archives, three observations applied, the fetch, the media worker's end (12), and the
#: inbox marks of the
#: ``generation.dispatch`` deliveries a group ignores (the scheduler's AttemptDispatched,
#: the submitter's TaskQueued and SlotFreed…); the memory broker's deliveries commit one by
#: one here, where a busy hub groups them.
MAX_TASK_TRANSACTIONS = 17
#: Its events: TaskQueued, AttemptDispatched, FetchRequested, SlotFreed,
#: MediaProcessRequested, one StatusObserved per accepted webhook (3), and the watchers'
#: notifications (QUEUED, DISPATCHING, SUBMITTED, RUNNING, the 0.5 step, OUTPUT_FETCHING,
#: POST_PROCESSING, SUCCEEDED).
MAX_TASK_EVENTS = 16


@pytest.fixture
async def gateway(db_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with gateway_for(db_url, tmp_path) as made:
        yield made


def task_transactions(counts: WriteCounts) -> list[tuple[str, ...]]:
    return [t for t in counts.transactions if set(t) - BOOKKEEPING]


async def test_a_task_called_back_to_success_makes_few_transactions_and_events(
    gateway: Gateway,
) -> None:
    g = gateway.g
    with counting_writes(g.hub.engine) as counts:
        task = await g.create("counted")
        await g.settle()
        (job,) = g.provider.jobs_for_prompt("counted")
        for progress in (0.25, 0.5):
            g.provider.move(job, N.RUNNING, progress=progress)
            assert await gateway.send(job) == "accepted"
            await g.settle()
        g.provider.move(job, N.SUCCEEDED, progress=1.0)
        assert await gateway.send(job) == "accepted"
        await g.settle()
    assert await g.status(task) == S.SUCCEEDED
    assert len(await g.path(task)) == 7  # every move still recorded, POST_PROCESSING too
    written = task_transactions(counts)
    assert len(written) <= MAX_TASK_TRANSACTIONS, "\n".join(map(str, written))
    assert sum(counts.events.values()) <= MAX_TASK_EVENTS, counts.events
    # the submit answer is applied where it was received: observations are the webhooks'
    assert counts.events[events.STATUS_OBSERVED] == 3
    # one notification per move (QUEUED to SUCCEEDED, POST_PROCESSING too) and the 0.5 step
    assert counts.events[notifications.EVENT_TYPE] == 8, counts.events
    assert counts.events[events.MEDIA_PROCESS_REQUESTED] == 1
    # the success webhook named the output: no status query before the download
    assert g.provider.calls_of("query") == []
    assert len(g.provider.calls_of("fetch_output")) == 1


async def test_each_webhook_is_one_short_transaction_and_a_repeat_adds_no_row_or_event(
    gateway: Gateway,
) -> None:
    g = gateway.g
    await g.create("gated")
    await g.settle()
    (job,) = g.provider.jobs_for_prompt("gated")
    g.provider.move(job, N.RUNNING, progress=0.25)
    with counting_writes(g.hub.engine) as accepted:
        assert await gateway.send(job, msg_id="msg_once") == "accepted"
    assert accepted.transactions == [("callback_events", "outbox")]
    with counting_writes(g.hub.engine) as repeated:
        assert await gateway.send(job, msg_id="msg_once") == "duplicate"
    # only the archive insert runs, and it meets the webhook id: no row, no event
    assert repeated.transactions == [("callback_events",)]
    assert not repeated.events
    # a job we have no record of (as when our submit answer is not in yet)
    stranger = dataclasses.replace(job, id="job_unknown")
    with counting_writes(g.hub.engine) as unmatched:
        assert await gateway.send(stranger, msg_id="msg_unknown") == "unmatched"
    assert unmatched.transactions == [("callback_events",)]
    async with g.hub.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(callback_events.c.webhook_id, callback_events.c.status).order_by(
                    callback_events.c.id
                )
            )
        ).all()
    assert [tuple(r) for r in rows] == [("msg_once", "applied"), ("msg_unknown", "unmatched")]


async def test_an_archived_output_url_that_expired_is_fetched_again_after_a_query(
    gateway: Gateway,
) -> None:
    g = gateway.g
    g.provider.script("expiring", JobScript(steps=[], expired_fetches=1))
    task = await g.create("expiring")
    await g.settle()
    (job,) = g.provider.jobs_for_prompt("expiring")
    g.provider.move(job, N.SUCCEEDED, progress=1.0)
    assert await gateway.send(job) == "accepted"
    await g.settle()
    assert await g.status(task) == S.SUCCEEDED
    assert [c.method for c in g.provider.calls if c.method in ("query", "fetch_output")] == [
        "fetch_output",  # the archived URL: expired
        "query",  # a fresh one
        "fetch_output",
    ]
