"""Exactly-once effect: duplicates on purpose, and mid-run the consumer raises at a failpoint
(in-process, no process dies) before the same ``Hub`` runs it again; nothing lost or doubled.
The OS-process kill twins are ``test_embedded_profile`` and ``test_scale_profile``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aigc_hub.core.failpoints import Crash, Failpoints
from tests.support import effects as fx
from tests.support.hubs import DoublePublisher, hub_for, make_broker, wait_until

N = 10_000
KEYS = 997


async def _count_records(broker: object, topic: str) -> int:
    lag = await broker.lag("__count__", [topic])  # type: ignore[attr-defined]
    return sum(p.end_offset for p in lag)


@pytest.mark.slow
async def test_effects_once_despite_double_publish_and_a_raise_after_commit_then_same_hub_rerun(
    db_url: str, tmp_path: Path
) -> None:
    inner = make_broker("embedded", tmp_path)
    broker = DoublePublisher(inner)
    failpoints = Failpoints()
    failpoints.crash_at("consumer.after_commit", after=N // 3)
    async with hub_for(db_url, broker, [fx.make_pipeline()], failpoints=failpoints) as hub:  # type: ignore[arg-type]

        async def enqueue() -> None:
            for start in range(0, N, 200):
                async with hub.transaction() as conn:
                    await conn.execute(
                        fx.facts.insert(),
                        [{"key": f"task-{i % KEYS}", "n": i} for i in range(start, start + 200)],
                    )
                    await hub.outbox.add(
                        conn, [fx.request(f"task-{i % KEYS}", i) for i in range(start, start + 200)]
                    )

        producer = asyncio.create_task(enqueue())
        raised = 0
        while True:
            stop = asyncio.Event()
            run = asyncio.create_task(hub.run(stop))

            async def effects_done() -> bool:
                return producer.done() and len(await fx.effect_rows(hub.engine)) >= N

            waiter = asyncio.create_task(wait_until(effects_done, timeout=240))
            done, _ = await asyncio.wait({run, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if run in done:
                with pytest.raises(Crash):
                    run.result()
                raised += 1
                waiter.cancel()
                continue  # run the same hub's consumer again, as a supervisor would
            waiter.result()

            async def all_committed() -> bool:
                lag = await inner.lag(fx.GROUP, [fx.TOPIC])
                return sum(p.lag for p in lag) == 0

            # every record (duplicates too) handled and committed: late duplicates are in
            await wait_until(all_committed, timeout=60)
            stop.set()
            await run
            break
        await producer

        rows = await fx.effect_rows(hub.engine)
        event_ids = [r[1] for r in rows]
        assert raised == 1
        assert len(rows) == N, f"{len(rows) - len(set(event_ids))} duplicate effects"
        assert len(set(event_ids)) == N
        assert sorted(r[3] for r in rows) == list(range(N))
        # every event went out at least twice (more where the raise cut a relay pass short)
        assert await _count_records(inner, fx.TOPIC) >= 2 * N
        lag = await inner.lag(fx.GROUP, [fx.TOPIC])
        assert sum(p.lag for p in lag) == 0
