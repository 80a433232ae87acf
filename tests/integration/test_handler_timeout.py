"""A handler run that outlives its group's timeout fails as retryable (``HandlerTimeout``), on
SQLite and PostgreSQL: retried in process, and parked for a delayed redelivery when it keeps
hanging; nothing of the timed-out run is written."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.store.tables import redeliveries
from tests.support import effects as fx
from tests.support.hubs import IN_PROCESS, hub_for, wait_until


async def test_a_hanging_run_times_out_and_is_retried_then_parked(db_url: str) -> None:
    clock = ManualClock()
    behaviour = fx.Behaviour(hang_times={"slow": 1, "stuck": 1 + IN_PROCESS.max_retries})
    pipeline = fx.make_pipeline(behaviour, timeout=0.2)
    async with hub_for(db_url, MemoryBroker(clock=clock), [pipeline], clock=clock) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("slow", 1), fx.request("stuck", 2)])
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def parked_error() -> str | None:
            async with hub.engine.connect() as conn:
                found = await conn.execute(sa.select(redeliveries.c.error_class))
                return next((str(r.error_class) for r in found), None)

        async def settled() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 1 and await parked_error() is not None

        await wait_until(settled, timeout=30, clock=clock)  # steps over the retry waits
        stop.set()
        await run

        rows = await fx.effect_rows(hub.engine)
        assert [(key, n) for _, _, key, n in rows] == [("slow", 1)]  # retried, applied once
        assert behaviour.calls.count(("slow", 1)) == 2
        assert behaviour.calls.count(("stuck", 2)) == 1 + IN_PROCESS.max_retries
        assert await parked_error() == "HandlerTimeout"
