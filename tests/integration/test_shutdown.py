"""Graceful shutdown: stop fetching, finish in-flight work within the deadline, commit it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.failpoints import Crash, Failpoints
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until


async def test_stop_finishes_in_flight_work_and_commits_its_offset(
    tmp_path: Path, sqlite_url: str
) -> None:
    gate = asyncio.Event()
    behaviour = fx.Behaviour(fail_times={"held": 0}, gate=gate)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(
        sqlite_url, broker, [fx.make_pipeline(behaviour)], clock=ManualClock()
    ) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("held", 1), fx.request("free", 2)])
        stop = asyncio.Event()
        runtime = hub.runtime(hub.handler_specs[0])
        await hub.relay.drain()
        run = asyncio.create_task(runtime.run(stop, shutdown_deadline=10))

        async def free_done() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 1 and ("held", 1) in behaviour.calls

        await wait_until(free_done, timeout=20)
        stop.set()  # "held" is mid-handler, waiting on the gate
        await asyncio.sleep(0.1)
        assert not run.done(), "shutdown must wait for in-flight work"
        gate.set()
        await asyncio.wait_for(run, 10)
        assert sorted(r[2] for r in await fx.effect_rows(hub.engine)) == ["free", "held"]
        lag = await broker.lag(fx.GROUP, [fx.TOPIC])
        assert sum(p.lag for p in lag) == 0  # both offsets committed on the way out


async def test_work_past_the_deadline_is_abandoned_and_redelivered(
    tmp_path: Path, sqlite_url: str
) -> None:
    gate = asyncio.Event()
    behaviour = fx.Behaviour(fail_times={"stuck": 0}, gate=gate)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(
        sqlite_url, broker, [fx.make_pipeline(behaviour)], clock=ManualClock()
    ) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("stuck", 1)])
        await hub.relay.drain()
        stop = asyncio.Event()
        first = hub.runtime(hub.handler_specs[0])
        run = asyncio.create_task(first.run(stop, shutdown_deadline=0.2))

        async def called() -> bool:
            return ("stuck", 1) in behaviour.calls

        await wait_until(called, timeout=20)
        stop.set()
        await asyncio.wait_for(run, 10)  # returns after the deadline, abandoning the handler
        assert await fx.effect_rows(hub.engine) == []
        lag = await broker.lag(fx.GROUP, [fx.TOPIC])
        assert sum(p.lag for p in lag) == 1  # not committed: it will be delivered again

        gate.set()
        stop2 = asyncio.Event()
        second = asyncio.create_task(hub.runtime(hub.handler_specs[0]).run(stop2))

        async def applied() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 1

        await wait_until(applied, timeout=20)
        stop2.set()
        await second
        assert len(await fx.effect_rows(hub.engine)) == 1


class _Stubborn:
    """A part that ignores cancellation (as a swallowed CancelledError does) but obeys stop."""

    def __init__(self) -> None:
        self.stopped = False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue  # swallowed
        self.stopped = True


async def test_when_one_part_raises_the_others_stop_even_if_they_swallow_a_cancel(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    failpoints = Failpoints()
    failpoints.crash_at("consumer.after_commit", after=1)
    stubborn = _Stubborn()
    async with hub_for(
        sqlite_url, make_broker("embedded", tmp_path), [fx.make_pipeline()], failpoints=failpoints
    ) as hub:
        monkeypatch.setattr(hub, "relays", lambda: [hub.relay, stubborn])
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("k", 1), fx.request("k", 2)])
        stop = asyncio.Event()
        with pytest.raises(Crash):
            await asyncio.wait_for(hub.run(stop), 20)  # never hangs on the stubborn part
        assert stop.is_set() and stubborn.stopped
