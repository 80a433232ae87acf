"""Playback on the engines of scale: PostgreSQL, a Kafka-protocol broker (Tansu; the telemetry
producer profile), ClickHouse's engine (chDB behind clickhouse-connect) as the analytics
store, and settlement booking purchases on PostgreSQL, all through the real API.

The embedded path has its own million-event test (``test_avcc_playback_volume.py``); this
one shows the same roads on the other engines: every accepted event stored once, a planted
flood found, each purchase booked once into the ledger in three lines summing to it.
"""

from __future__ import annotations

import random
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies, settlement_ledger
from aigc_hub.tenancy import create_tenant
from tests.support.avcc import AvccStack, avcc_stack, coded_work
from tests.support.hubs import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

NODE = "8361"
EVENTS = 5_000
FLOODER = "sha256:flooder"


def batches(codes: list[str], start_ms: int) -> tuple[list[bytes], int, Decimal, int]:
    """Request bodies of EVENTS events over 100 s of event time, a flood planted in one
    second; and the events, revenue and purchases they hold."""
    rng = random.Random(11)
    evs: list[dict[str, Any]] = []
    revenue, purchases = Decimal("0.00"), 0
    for i in range(EVENTS):
        kind = "purchase" if i % 200 == 0 else "complete" if i % 5 == 4 else "play"
        price = Decimal(rng.randint(100, 9999)) / 100 if kind == "purchase" else Decimal("0.00")
        revenue += price
        purchases += kind == "purchase"
        evs.append(
            {
                "event_id": str(uuid.uuid4()),
                "timestamp": start_ms + i * 100_000 // EVENTS,
                "payload": {
                    "avcc_code": rng.choice(codes),
                    "platform_node": NODE,
                    "user_hash": f"sha256:u{rng.randrange(50_000)}",
                    "event_type": kind,
                    "duration_sec": 0 if kind == "purchase" else 300,
                    "revenue_cny": float(price),
                },
            }
        )
    flood_at = (start_ms + 50_000) // 1000 * 1000
    flood = [
        {
            "event_id": str(uuid.uuid4()),
            "timestamp": flood_at + i * 5,
            "payload": {
                "avcc_code": codes[i % len(codes)],
                "platform_node": NODE,
                "user_hash": FLOODER,
                "event_type": "play",
                "duration_sec": 5,
                "revenue_cny": 0.0,
            },
        }
        for i in range(150)
    ]
    evs = sorted(evs + flood, key=lambda e: e["timestamp"])
    bodies = [orjson.dumps({"events": evs[i : i + 1000]}) for i in range(0, len(evs), 1000)]
    return bodies, len(evs), revenue, purchases


async def ledger(stack: AvccStack) -> tuple[int, int]:
    entries = settlement_ledger.entries
    async with stack.hub.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(entries.c.amount), 0))
            )
        ).one()
    return int(row[0]), int(row[1])


async def test_playback_on_postgresql_kafka_and_clickhouse_engine(
    pg_url: str, kafka_endpoint: Any, tmp_path: Path
) -> None:
    async with avcc_stack(
        pg_url,
        kafka_endpoint.broker(),
        tmp_path,
        groups=["avcc-sink", "avcc-detector", "avcc-settlement"],
        scan=False,
        analytics_url=f"chdb://{tmp_path / 'clickhouse'}",
    ) as stack:
        tenants = [(await create_tenant(stack.hub.engine, f"studio-{i}"))[0] for i in range(2)]
        codes = [await coded_work(stack.hub, tenants[i % 2].id) for i in range(40)]
        async with stack.client(await stack.admin()) as admin:
            answer = await admin.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "site"})
        key = answer.json()["key"]
        bodies, sent, revenue, purchases = batches(codes, int(time.time() * 1000) - 600_000)
        accepted = 0
        async with stack.client(key) as node:
            for body in bodies:
                answer = await node.post(
                    "/v1/avcc/playback", content=body, headers={"Content-Type": "application/json"}
                )
                assert answer.status_code == 202, answer.text
                accepted += answer.json()["accepted"]
        assert accepted == sent

        store = await stack.avcc.analytics()
        assert store.engine == "clickhouse"

        async def stored() -> bool:
            return (await store.totals()).events >= accepted

        await wait_until(stored, timeout=300)
        totals = await store.totals()
        assert (totals.events, totals.purchases, totals.revenue) == (accepted, purchases, revenue)

        async def booked() -> bool:
            return (await ledger(stack))[0] >= 3 * purchases

        await wait_until(booked, timeout=300)
        lines, fen = await ledger(stack)
        assert (lines, fen) == (3 * purchases, int(revenue * 100))

        async def flood_found() -> bool:
            async with stack.hub.engine.connect() as conn:
                found = await conn.scalar(
                    sa.select(sa.func.count()).where(
                        avcc_playback_anomalies.c.kind == "flood",
                        avcc_playback_anomalies.c.subject == FLOODER,
                    )
                )
            return bool(found)

        await wait_until(flood_found, timeout=120)
