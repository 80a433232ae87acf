"""A million playback events through the API into the analytics store, watched by the
detector (seed 000 §9.2.4, §9.3.1): the issue's first Must-show.

One platform node reports a stream of 1,000,000 events over 200 coded works (plays,
completions, a few purchases; 35 minutes of event time, in order, 4,000 to a request) to a
hub on embedded defaults running the sink (``avcc-sink``) and the detector
(``avcc-detector``). Two things are planted in it: a play spike on one code (400 plays and
100 completions in one second, where the code plays about twice a second) and a flood by one
user hash (300 events in one second). The stored counts and revenue must equal what the API
accepted; on the embedded log a publish is durable before the API answers, so the
at-most-once allowance is 0 here (the test prints it). The detector must find the spike and
the flood, and nothing else in the rest of the stream.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies
from aigc_hub.tenancy import create_tenant
from tests.support.avcc import AvccStack, avcc_stack, coded_work
from tests.support.hubs import make_broker, wait_until

EVENTS = 1_000_000
BATCH = 4000
CODES = 200
NODE = "8361"
SPAN_MS = 35 * 60 * 1000
FLOODER = "sha256:flooder"
GROUPS = ["avcc-sink", "avcc-detector"]


@dataclass
class Sent:
    """What the API accepted, summed as the store should hold it."""

    events: int = 0
    plays: int = 0
    completes: int = 0
    purchases: int = 0
    revenue: Decimal = Decimal("0.00")
    by_type: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, revenue: Decimal) -> None:
        self.events += 1
        self.plays += kind == "play"
        self.completes += kind == "complete"
        self.purchases += kind == "purchase"
        self.revenue += revenue


def _event(ts: int, code: str, user: str, kind: str, revenue: Decimal) -> dict[str, Any]:
    return {
        "event_id": str(uuid.uuid4()),
        "timestamp": ts,
        "payload": {
            "avcc_code": code,
            "platform_node": NODE,
            "user_hash": user,
            "event_type": kind,
            "duration_sec": 0 if kind == "purchase" else 600,
            "revenue_cny": float(revenue),
        },
    }


def stream(
    codes: list[str], start_ms: int, spike: tuple[str, int], flood_at: int, sent: Sent
) -> Iterator[bytes]:
    """Request bodies of the whole stream, in event-time order, summing into ``sent``."""
    rng = random.Random(2026)
    spike_code, spike_at = spike
    planted: list[tuple[int, str, str, str]] = []
    for i in range(500):  # the spike: plays at the code's usual completion rate
        planted.append(
            (spike_at + i, spike_code, f"sha256:fan{i}", "complete" if i % 5 == 4 else "play")
        )
    for i in range(300):  # the flood: one user hash on many codes
        planted.append((flood_at + i * 3, rng.choice(codes), FLOODER, "play"))
    planted.sort()
    clean = EVENTS - len(planted)
    step = SPAN_MS / clean
    batch: list[dict[str, Any]] = []
    p = 0
    for i in range(clean):
        ts = start_ms + int(i * step)
        while p < len(planted) and planted[p][0] <= ts:
            at, code, user, kind = planted[p]
            batch.append(_event(at, code, user, kind, Decimal("0.00")))
            sent.add(kind, Decimal("0.00"))
            p += 1
            if len(batch) >= BATCH:
                yield orjson.dumps({"events": batch})
                batch = []
        roll = rng.random()
        kind = "purchase" if roll < 0.001 else "complete" if roll < 0.2 else "play"
        revenue = Decimal(rng.randint(100, 9999)) / 100 if kind == "purchase" else Decimal("0.00")
        batch.append(
            _event(ts, rng.choice(codes), f"sha256:u{rng.randrange(200_000)}", kind, revenue)
        )
        sent.add(kind, revenue)
        if len(batch) >= BATCH:
            yield orjson.dumps({"events": batch})
            batch = []
    for at, code, user, kind in planted[p:]:
        batch.append(_event(at, code, user, kind, Decimal("0.00")))
        sent.add(kind, Decimal("0.00"))
    if batch:
        yield orjson.dumps({"events": batch})


async def anomalies(stack: AvccStack) -> set[tuple[str, str]]:
    async with stack.hub.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(avcc_playback_anomalies.c.kind, avcc_playback_anomalies.c.subject)
            )
        ).all()
    return {(r.kind, r.subject) for r in rows}


async def test_a_million_events_are_stored_whole_and_only_the_planted_anomalies_found(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with avcc_stack(
        sqlite_url, make_broker("embedded", tmp_path), tmp_path, groups=GROUPS, scan=False
    ) as stack:
        tenants = [(await create_tenant(stack.hub.engine, f"studio-{i}"))[0] for i in range(2)]
        codes = [await coded_work(stack.hub, tenants[i % 2].id) for i in range(CODES)]
        async with stack.client(await stack.admin()) as admin:
            answer = await admin.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "site"})
        key = answer.json()["key"]
        now = int(time.time() * 1000)
        start = now - SPAN_MS - 5 * 60_000
        # Both inside one second of event time (the detector's window is 1 s).
        spike = (codes[7], (start + SPAN_MS // 2) // 1000 * 1000 + 100)
        flood_at = (start + SPAN_MS // 3) // 1000 * 1000 + 50
        sent = Sent()
        accepted = 0
        began = time.monotonic()
        async with stack.client(key) as node:
            for body in stream(codes, start, spike, flood_at, sent):
                answer = await node.post(
                    "/v1/avcc/playback",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                assert answer.status_code == 202, answer.text
                accepted += answer.json()["accepted"]
        posted_s = time.monotonic() - began
        assert accepted == sent.events == EVENTS

        store = await stack.avcc.analytics()

        async def all_stored() -> bool:
            return (await store.totals()).events >= accepted

        await wait_until(all_stored, timeout=600)
        stored_s = time.monotonic() - began
        totals = await store.totals()
        lost = accepted - totals.events
        print(
            f"\n{accepted} events accepted in {posted_s:.1f} s, {totals.events} stored after "
            f"{stored_s:.1f} s ({accepted / stored_s:.0f}/s end to end); lost {lost} "
            "(at-most-once allowance on the embedded log: 0, a publish is durable before 202)"
        )
        assert lost == 0
        assert (totals.plays, totals.completes, totals.purchases) == (
            sent.plays,
            sent.completes,
            sent.purchases,
        )
        assert totals.revenue == sent.revenue

        expected = {("spike", spike[0]), ("flood", FLOODER)}

        async def planted_found() -> bool:
            return expected <= await anomalies(stack)

        await wait_until(planted_found, timeout=120)
        assert await anomalies(stack) == expected
