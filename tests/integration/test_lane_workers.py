"""A consumer group serves its lanes with a bounded pool of tasks, not one task per key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until

KEYS = 10_000
WORKERS = 16


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_tasks_stay_bounded_under_ten_thousand_distinct_keys(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    most_tasks = most_workers = 0

    def count_tasks(_key: str, _n: int) -> None:
        nonlocal most_tasks, most_workers
        running = asyncio.all_tasks()
        most_tasks = max(most_tasks, len(running))
        most_workers = max(most_workers, sum(t.get_name() == lane_name for t in running))

    behaviour = fx.Behaviour(on_call=count_tasks)
    broker = make_broker(broker_kind, tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(behaviour)]) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"key-{i}", i) for i in range(KEYS)])
        await hub.relay.drain()
        before = len(asyncio.all_tasks())
        # Room for every record at once: one task per key would mean 10,000 tasks.
        spec = hub.handler_specs[0]
        lane_name = f"{spec.group}-lane"
        runtime = hub.runtime(spec, lane_workers=WORKERS, max_in_flight=2 * KEYS)
        stop = asyncio.Event()
        run = asyncio.create_task(runtime.run(stop))

        async def all_applied() -> bool:
            return runtime.finished == KEYS

        await wait_until(all_applied, timeout=120)
        stop.set()
        await run
        rows = await fx.effect_rows(hub.engine)

    assert len(rows) == KEYS and len({r[1] for r in rows}) == KEYS
    assert most_workers == WORKERS  # the pool was used in full, and never more
    # Besides the workers: the run task, its loops, the committer, the engine's and the
    # broker's helpers: a few dozen at most, where one task per key would be 10,000.
    assert most_tasks <= before + WORKERS + 32, most_tasks
