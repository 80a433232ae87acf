"""A parked head is settled only as the version that was tried: a second copy of it (a timer
scan that raced the first run's commit, a member that lost the partition) changes nothing, so
a record cannot be rescheduled twice for one try or dead-lettered twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.errors import PermanentError, RetryableError
from aigc_hub.messaging.base import Record
from aigc_hub.reliability.redelivery import BLOCKED, WAITING, Parked, ParkRequest
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.failures import STALE, FailureRouter
from tests.support import effects as fx
from tests.support.hubs import DELAYED, hub_for, make_broker, wait_until

GROUP = "fence-test"


def _request(offset: int, due_at: int | None) -> ParkRequest:
    return ParkRequest(
        consumer=GROUP,
        key="k",
        event_id=f"e{offset}",
        topic="t",
        partition=0,
        offset=offset,
        value=b"{}",
        headers={},
        attempts=4 if due_at is not None else 0,
        due_at=due_at,
    )


def _context(head: Parked, clock: ManualClock, engine: object) -> HandlerContext:
    record = Record(head.topic, head.partition, head.offset, "k", head.value, head.headers, 0)
    return HandlerContext(
        consumer=GROUP,
        pipeline="test",
        record=record,
        engine=engine,  # type: ignore[arg-type]
        clock=clock,
        redelivery=head,
    )


async def test_a_stale_copy_of_a_head_reschedules_and_dead_letters_nothing(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    async with hub_for(db_url, make_broker("memory", tmp_path), [], clock=clock) as hub:
        store = hub.redeliveries
        async with hub.engine.begin() as conn:
            await store.park(conn, _request(0, due_at=clock.now_ms()))
            await store.park(conn, _request(1, due_at=None))  # behind the head
        [copy] = await store.due(GROUP, clock.now_ms())
        [twin] = await store.due(GROUP, clock.now_ms())  # a second scan read the same version
        parked: list[str] = []
        released: list[str] = []
        router = FailureRouter(
            hub.engine,
            hub.dlq,
            store,
            clock,
            DELAYED,
            on_parked=parked.append,
            on_released=released.append,
        )

        outcome = await router.give_up(_context(copy, clock, hub.engine), None, RetryableError("x"))
        assert outcome == "rescheduled"
        twin_outcome = await router.give_up(
            _context(twin, clock, hub.engine), None, RetryableError("x")
        )
        assert twin_outcome == STALE
        head, behind = await store.list(GROUP)
        assert head.attempts == copy.attempts + 1 and head.redeliveries == 1
        assert parked == ["k"]  # the stale copy woke nobody

        # the same for giving up: the stale copy neither dead-letters nor releases the key
        gave_up = await router.give_up(_context(twin, clock, hub.engine), None, PermanentError("p"))
        assert gave_up == STALE
        assert await hub.dlq.count() == 0
        async with hub.engine.begin() as conn:
            assert await store.finish_head(conn, twin, clock.now_ms()) is None
        assert [r.state for r in await store.list(GROUP)] == [WAITING, BLOCKED]

        # the current version does both, once
        done = await router.give_up(_context(head, clock, hub.engine), None, PermanentError("p"))
        assert done == "dead_lettered" and await hub.dlq.count() == 1
        [promoted] = await store.list(GROUP)
        assert (promoted.seq, promoted.state, promoted.due_at) == (
            behind.seq,
            WAITING,
            clock.now_ms(),
        )
        assert released == [] and parked == ["k", "k"]  # the key stays held by its next record


async def test_a_timer_scan_that_read_a_head_before_its_commit_does_not_try_it_again(
    db_url: str, tmp_path: Path
) -> None:
    """The race behind the fence, made to happen: the scan after the one that found the head
    answers the rows it would have read had it begun before that head's commit."""
    clock = ManualClock()
    behaviour = fx.Behaviour(fail_times={"k": 4})  # the first delivery's 4 tries fail
    broker = make_broker("memory", tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(behaviour)], clock=clock) as hub:
        store = hub.redeliveries
        real_due = store.due
        found: list[Parked] = []
        answered_stale = asyncio.Event()

        async def settled() -> bool:
            return not await store.list(fx.GROUP)

        async def racing_due(consumer: str, now_ms: int, **kw: Any) -> list[Parked]:
            rows = await real_due(consumer, now_ms, **kw)
            if rows and not found:
                found.extend(rows)
            elif found and not answered_stale.is_set():
                await wait_until(settled, timeout=30)  # the head's try commits meanwhile
                answered_stale.set()
                return [*found, *rows]
            return rows

        store.due = racing_due  # type: ignore[method-assign]
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("k", 0)])
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def stale_answered() -> bool:
            return answered_stale.is_set()

        await wait_until(stale_answered, timeout=60, clock=clock, step_s=20.0)
        for _ in range(20):  # time for a stale copy to be tried, were it let through
            await clock.advance(1.0)
            await asyncio.sleep(0.02)
        stop.set()
        await run
        assert [r[2] for r in await fx.effect_rows(hub.engine)] == ["k"]
    assert behaviour.calls.count(("k", 0)) == 5  # 4 failed tries, 1 redelivery: no 6th
