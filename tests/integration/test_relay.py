"""Relay: a raise between publish and mark (in-process failpoint), then the same hub's relay
runs again and republishes; a rollback publishes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.core.failpoints import Crash, Failpoints
from aigc_hub.observability import metrics
from aigc_hub.store import tables
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until


async def _unpublished(hub: object) -> int:
    async with hub.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(
            (
                await conn.execute(
                    sa.select(sa.func.count())
                    .select_from(tables.outbox)
                    .where(tables.outbox.c.published_at.is_(None))
                )
            ).scalar_one()
        )


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_relay_raising_after_publish_then_same_hub_rerun_republishes_and_inbox_drops_dups(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    broker = make_broker(broker_kind, tmp_path)
    failpoints = Failpoints()
    failpoints.crash_at("relay.after_publish")
    async with hub_for(db_url, broker, [fx.make_pipeline()], failpoints=failpoints) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"k{i}", i) for i in range(20)])
        with pytest.raises(Crash):
            await hub.relay.run_once()
        assert await _unpublished(hub) == 20  # published, but never marked
        assert await hub.relay.drain() == 20  # the same relay, run again, publishes them again
        assert await _unpublished(hub) == 0
        lag = await broker.lag("nobody", [fx.TOPIC])
        assert sum(p.end_offset for p in lag) == 40

        duplicates_before = metrics.INBOX_DUPLICATES.labels(fx.GROUP)._value.get()
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def consumed() -> bool:
            lag = await broker.lag(fx.GROUP, [fx.TOPIC])
            return sum(p.lag for p in lag) == 0

        await wait_until(consumed, timeout=30)
        stop.set()
        await run
        rows = await fx.effect_rows(hub.engine)
        assert len(rows) == 20 and len({r[1] for r in rows}) == 20
        assert metrics.INBOX_DUPLICATES.labels(fx.GROUP)._value.get() - duplicates_before == 20


async def test_rolled_back_transaction_publishes_nothing(db_url: str, tmp_path: Path) -> None:
    broker = make_broker("memory", tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline()]) as hub:
        with pytest.raises(RuntimeError):
            async with hub.transaction() as conn:
                await conn.execute(fx.facts.insert().values(key="k", n=1))
                await hub.outbox.add(conn, [fx.request("k", 1)])
                raise RuntimeError("service failed after writing its outbox row")
        assert await hub.relay.drain() == 0
        assert await _unpublished(hub) == 0
        lag = await broker.lag("nobody", [fx.TOPIC])
        assert sum(p.end_offset for p in lag) == 0
        async with hub.engine.connect() as c:
            assert (
                await c.execute(sa.select(sa.func.count()).select_from(fx.facts))
            ).scalar_one() == 0


async def test_relay_keeps_per_key_order_and_picks_up_late_commits(
    db_url: str, tmp_path: Path
) -> None:
    broker = make_broker("memory", tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline()]) as hub:
        for n in range(30):
            async with hub.transaction() as conn:
                await hub.outbox.add(conn, [fx.request(f"k{n % 3}", n)])
        hub.relay.batch_size = 7  # several passes
        assert await hub.relay.drain() == 30
        # a row written after the relay drained is still found (no high-water mark)
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("k0", 30)])
        assert await hub.relay.drain() == 1
        consumer = broker.consumer("reader", [fx.TOPIC])
        seen: dict[str, list[int]] = {}
        for _ in range(20):
            for rec in await consumer.fetch(100, timeout=0.2):
                from aigc_hub.core.envelope import Envelope

                env = Envelope.from_bytes(rec.value)
                seen.setdefault(env.key, []).append(int(env.payload["n"]))
            if sum(map(len, seen.values())) == 31:
                break
        await consumer.close()
        for key, ns in seen.items():
            assert ns == sorted(ns), key
        assert sum(map(len, seen.values())) == 31
