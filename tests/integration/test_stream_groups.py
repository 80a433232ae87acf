"""Stream groups (the telemetry road) on the embedded log and on Kafka (Tansu), run by a
real hub: batch cuts, empty ticks, commits only after the handler, a failing batch handed
again, stop and crash leaving the batch in hand uncommitted for the next member."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import Clock, ManualClock
from aigc_hub.core.failpoints import Crash, Failpoints
from aigc_hub.messaging.base import Broker
from tests.support.hubs import hub_for, make_broker, wait_until
from tests.support.streams import Recorder, fresh, lag_of, publish, stream_pipeline

#: Tansu answers a group join after half the session timeout (1 s): allow for joins.
TIMEOUT_S = 30.0


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    """The embedded log, or a Kafka broker on the session's Tansu."""
    if request.param == "kafka":
        endpoint = request.getfixturevalue("kafka_endpoint")
        kafka: Broker = endpoint.broker()
        return kafka
    return make_broker("embedded", tmp_path)


@contextlib.asynccontextmanager
async def running(hub: Hub, group: str, **options: float) -> AsyncIterator[asyncio.Event]:
    """Run stream group ``group`` of ``hub`` until the block ends (its stop is yielded)."""
    [spec] = [s for s in hub.stream_specs if s.group == group]
    stop = asyncio.Event()
    task = asyncio.create_task(hub.stream_runtime(spec, **options).run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


def failures(group: str) -> float:
    """``aigc_hub_stream_failures_total`` of ``group`` for ConnectionError, as exported."""
    labels = {"group": group, "error_class": "ConnectionError"}
    return REGISTRY.get_sample_value("aigc_hub_stream_failures_total", labels) or 0.0


async def test_batches_are_cut_at_max_records_and_a_short_one_waits_max_wait_s(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group, wait_s = fresh("t.play"), fresh("g.sink"), 1.0
    handler = Recorder()
    pipeline = stream_pipeline(topic, group, handler, max_records=10, max_wait_s=wait_s)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub:
        await publish(broker, topic, 25)
        async with running(hub, group):

            async def all_handed() -> bool:
                return len(handler.handled()) == 25

            await wait_until(all_handed, timeout=TIMEOUT_S)
        assert [len(b) for b in handler.batches()] == [10, 10, 5]
        assert len(set(handler.handled())) == 25  # each record once
        # the short batch's records were fetched after the second batch returned; it was
        # handed over no sooner than max_wait_s after that
        second = handler.calls.index(handler.batches()[1])
        third = handler.calls.index(handler.batches()[2])
        assert handler.called_at[third] - handler.returned_at[second] >= wait_s - 0.01
        assert await lag_of(broker, group, topic) == 0


async def test_an_idle_group_gets_an_empty_batch_every_max_wait_s(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group, wait_s = fresh("t.play"), fresh("g.detector"), 0.2
    handler = Recorder()
    pipeline = stream_pipeline(topic, group, handler, max_wait_s=wait_s)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub, running(hub, group):

        async def three_ticks() -> bool:
            return len(handler.returned_at) >= 3

        await wait_until(three_ticks, timeout=TIMEOUT_S)
        ticks = list(zip(handler.calls, handler.called_at, strict=True))[:3]
        assert all(batch == [] for batch, _at in ticks)
        # a tick comes after max_wait_s without records, counted from the previous return
        for i in range(1, 3):
            assert handler.called_at[i] - handler.returned_at[i - 1] >= wait_s - 0.01


async def test_a_batch_is_committed_only_after_its_handler_returns(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    gate = asyncio.Event()
    handler = Recorder(gate=gate)
    pipeline = stream_pipeline(topic, group, handler, max_records=100)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub:
        async with running(hub, group):
            await publish(broker, topic, 40)

            async def holding_records() -> bool:
                return bool(handler.calls and handler.calls[-1])

            await wait_until(holding_records, timeout=TIMEOUT_S)
            in_hand = len(handler.calls[-1])
            assert await lag_of(broker, group, topic) >= in_hand  # handler busy: no commit
            gate.set()

            async def committed() -> bool:
                return await lag_of(broker, group, topic) == 0

            await wait_until(committed, timeout=TIMEOUT_S)
        assert sorted(handler.handled()) == sorted(set(handler.handled()))
        assert len(handler.handled()) == 40


async def test_a_member_stopped_mid_batch_past_its_grace_leaves_the_batch_to_the_next_member(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    stuck = Recorder(gate=asyncio.Event())  # never opened: the handler outlives the grace
    pipeline = stream_pipeline(topic, group, stuck, max_records=100)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub:
        await publish(broker, topic, 30)
        async with running(hub, group, grace_s=0.2) as stop:

            async def holding_all() -> bool:
                return len(stuck.handled()) == 30

            await wait_until(holding_all, timeout=TIMEOUT_S)
            stop.set()
        assert not any(stuck.done)  # no batch of records returned
        assert await lag_of(broker, group, topic) == 30  # nothing committed on the way out

        # the next member of the group (same spec, its handler swapped) reads them again
        [spec] = hub.stream_specs
        again = Recorder()
        stop2 = asyncio.Event()
        next_member = hub.stream_runtime(dataclasses.replace(spec, handler=again))
        task = asyncio.create_task(next_member.run(stop2))

        async def re_read() -> bool:
            return len(again.handled()) >= 30 and await lag_of(broker, group, topic) == 0

        await wait_until(re_read, timeout=TIMEOUT_S)
        stop2.set()
        await asyncio.wait_for(task, TIMEOUT_S)
        assert sorted(again.handled()) == sorted(stuck.handled())


async def test_a_crash_between_handler_and_commit_hands_the_batch_to_the_next_member(
    sqlite_url: str, tmp_path: Path
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    failpoints = Failpoints()
    failpoints.crash_at("stream.before_commit")
    handler = Recorder()
    pipeline = stream_pipeline(topic, group, handler, max_records=100)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(sqlite_url, broker, [pipeline], failpoints=failpoints) as hub:
        await publish(broker, topic, 20)
        [spec] = hub.stream_specs
        with pytest.raises(Crash):
            await asyncio.wait_for(hub.stream_runtime(spec).run(asyncio.Event()), TIMEOUT_S)
        first = handler.handled()
        assert len(first) == 20
        assert await lag_of(broker, group, topic) == 20  # the crash came before the commit

        failpoints.disarm("stream.before_commit")
        async with running(hub, group):

            async def re_read() -> bool:
                return await lag_of(broker, group, topic) == 0

            await wait_until(re_read, timeout=TIMEOUT_S)
        assert sorted(handler.handled()[20:]) == sorted(first)


async def test_a_failing_handler_gets_the_same_batch_again_and_no_record_is_skipped(
    sqlite_url: str, broker: Broker
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    handler = Recorder(fail_batches=2)
    pipeline = stream_pipeline(topic, group, handler, max_records=1000)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub:
        await publish(broker, topic, 50)
        async with running(hub, group):

            async def handled_once() -> bool:
                return handler.failed == 2 and await lag_of(broker, group, topic) == 0

            await wait_until(handled_once, timeout=TIMEOUT_S)
        first, second, third, *rest = handler.batches()
        assert first == second == third  # the failed batch, handed over again unchanged
        assert sorted((r.partition, r.offset) for b in (third, *rest) for r in b) == sorted(
            set(handler.handled())
        )
        assert len(set(handler.handled())) == 50
        assert failures(group) == 2


async def test_a_stop_during_the_back_off_ends_the_run_and_leaves_the_batch_uncommitted(
    sqlite_url: str, tmp_path: Path
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    handler = Recorder(fail_batches=1_000)
    pipeline = stream_pipeline(topic, group, handler, max_records=100)
    broker = make_broker("embedded", tmp_path)
    # a manual clock never ends the back-off by itself: only the stop can
    clock: Clock = ManualClock()
    async with hub_for(sqlite_url, broker, [pipeline], clock=clock) as hub:
        await publish(broker, topic, 10)
        async with running(hub, group) as stop:

            async def failed_once() -> bool:
                return handler.failed == 1

            await wait_until(failed_once, timeout=TIMEOUT_S)
            stop.set()
        assert handler.failed == 1  # not handed again on the way out
        assert await lag_of(broker, group, topic) == 10


async def test_a_failed_offset_commit_is_carried_by_the_next_commit(
    sqlite_url: str, tmp_path: Path
) -> None:
    topic, group = fresh("t.play"), fresh("g.sink")
    failpoints = Failpoints()
    refusals = {"left": 1}

    def refuse_once() -> None:
        if refusals["left"]:
            refusals["left"] -= 1
            raise ConnectionError("offset commit refused")

    failpoints.arm("stream.before_commit", refuse_once)
    handler = Recorder()
    pipeline = stream_pipeline(topic, group, handler, max_records=100)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(sqlite_url, broker, [pipeline], failpoints=failpoints) as hub:
        await publish(broker, topic, 10)
        async with running(hub, group):

            async def commit_refused() -> bool:
                return refusals["left"] == 0

            await wait_until(commit_refused, timeout=TIMEOUT_S)
            assert await lag_of(broker, group, topic) == 10
            await publish(broker, topic, 5, start=10)

            async def caught_up() -> bool:
                return len(handler.handled()) == 15 and await lag_of(broker, group, topic) == 0

            await wait_until(caught_up, timeout=TIMEOUT_S)
        assert len(set(handler.handled())) == 15  # the first batch was not handed again
