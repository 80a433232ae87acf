"""Per-key order at concurrency 4: a failing key waits, every other key keeps flowing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aigc_hub.core.clock import ManualClock
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_failing_key_holds_only_itself(db_url: str, tmp_path: Path, broker_kind: str) -> None:
    clock = ManualClock()
    behaviour = fx.Behaviour(fail_times={"slow": 2})
    broker = make_broker(broker_kind, tmp_path)
    pipeline = fx.make_pipeline(behaviour, concurrency=4)
    async with hub_for(db_url, broker, [pipeline], clock=clock) as hub:
        async with hub.transaction() as conn:
            events = [fx.request("slow", n) for n in range(3)]
            events += [fx.request(f"other-{k}", n) for n in range(3) for k in range(10)]
            await hub.outbox.add(conn, events)
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def others_done() -> bool:
            rows = await fx.effect_rows(hub.engine)
            return sum(1 for r in rows if r[2].startswith("other-")) == 30

        # The clock does not move: "slow" sits in its first back-off; the others all finish.
        await wait_until(others_done, timeout=30)
        rows = await fx.effect_rows(hub.engine)
        assert not [r for r in rows if r[2] == "slow"], "later events of the failing key ran early"
        assert behaviour.calls.count(("slow", 0)) == 1
        assert ("slow", 1) not in behaviour.calls

        async def slow_done() -> bool:
            rows = await fx.effect_rows(hub.engine)
            return sum(1 for r in rows if r[2] == "slow") == 3

        await wait_until(slow_done, timeout=30, clock=clock, step_s=1.0)
        stop.set()
        await run

        rows = await fx.effect_rows(hub.engine)
        for key in {r[2] for r in rows}:
            ns = [r[3] for r in rows if r[2] == key]
            assert ns == sorted(ns) == [0, 1, 2], key
        assert [c for c in behaviour.calls if c[0] == "slow"] == [
            ("slow", 0),
            ("slow", 0),
            ("slow", 0),
            ("slow", 1),
            ("slow", 2),
        ]
