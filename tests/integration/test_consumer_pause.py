"""A consumer group whose pause check gives a reason takes no records until it stops giving
one; what was published meanwhile is then handled, none lost (seed 004 §3.9.4)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from aigc_hub.observability import metrics
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until

EVENTS = 20


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_a_paused_group_takes_nothing_until_its_check_clears(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    reason: str | None = "scratch disk 97% full"
    checks = 0

    def pause() -> str | None:
        nonlocal checks
        checks += 1
        return reason

    broker = make_broker(broker_kind, tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(fx.Behaviour())]) as hub:
        spec = dataclasses.replace(hub.handler_specs[0], pause=pause)
        runtime = hub.runtime(spec)
        stop = asyncio.Event()
        run = asyncio.create_task(runtime.run(stop))
        gauge = metrics.CONSUMER_PAUSED.labels(spec.group)

        async def reported() -> bool:
            return bool(gauge._value.get() == 1)

        await wait_until(reported)
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"key-{i}", i) for i in range(EVENTS)])
        await hub.relay.drain()
        seen = checks

        async def checked_thrice() -> bool:
            # Each pause check is a fetch the paused group did not make.
            return checks >= seen + 3

        await wait_until(checked_thrice)
        assert runtime.finished == 0 and await fx.effect_rows(hub.engine) == []

        reason = None

        async def all_handled() -> bool:
            return runtime.finished == EVENTS

        await wait_until(all_handled, timeout=30)
        assert gauge._value.get() == 0
        stop.set()
        await run
        rows = await fx.effect_rows(hub.engine)
    assert sorted(r[2] for r in rows) == sorted(f"key-{i}" for i in range(EVENTS))
