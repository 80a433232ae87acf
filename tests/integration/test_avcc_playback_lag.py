"""avcc's playback lag alert on real parts (seed 000 §9.3.4): "stop the sink past 50,000
events → the alert fires; restart → it drains and clears".

A hub on embedded defaults runs no consumer group (the sink, ``avcc-sink``, is the one that
matters; the detector is kept out too so nothing else reads the topic while the backlog
builds) and samples lag every 0.1 s. A platform node posts playback events through the API,
4,000 to a request. At exactly 50,000 waiting the real rule stays quiet under promtool; one
more request past the line and it fires, rendered as the rule renders it. Telemetry lag is
alerted, never gated: avcc's admission gate stays open and an application is admitted. The
sink started, the lag drains to 0, the rule is quiet again and the analytics store holds every
event the API accepted.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from aigc_hub.pipelines.avcc.events import PLAYBACK_TOPIC
from aigc_hub.tenancy import create_tenant
from tests.support.alerts import (
    exported_lag,
    gate_gauge,
    lag_totals,
    promtool_evaluates_lag,
    until,
)
from tests.support.avcc import AvccStack, apply, avcc_stack, coded_work, noise_png
from tests.support.hubs import make_broker

SINK = "avcc-sink"
ALERT = "AigcHubPlaybackLagHigh"
#: The seed's line (lag > 50,000): this many waiting do not cross it, one more does.
THRESHOLD = 50_000
#: Events per request, as the platform nodes send them.
BATCH = 4_000
NODE = "8361"
#: Works played: several, so the events spread over the topic's partitions by key.
CODES = 8


@dataclass
class Posted:
    """What the API accepted, counted as the analytics store should hold it."""

    events: int = 0
    plays: int = 0
    completes: int = 0


def bodies(codes: list[str], count: int, posted: Posted) -> Iterator[bytes]:
    """Request bodies of ``count`` plays and completions (one in five completes), at most
    :data:`BATCH` a request, counted into ``posted`` as they are made.

    Built as plain dicts dumped by orjson, without the gateway's models: 54,000 events cost
    a fraction of a second here, so the test's time is the API's and the sink's."""
    now = int(time.time() * 1000)
    for start in range(0, count, BATCH):
        events: list[dict[str, Any]] = []
        for i in range(start, min(count, start + BATCH)):
            kind = "complete" if i % 5 == 4 else "play"
            events.append(
                {
                    "event_id": str(uuid.uuid4()),
                    "timestamp": now + i % 1000,
                    "payload": {
                        "avcc_code": codes[i % len(codes)],
                        "platform_node": NODE,
                        "user_hash": f"sha256:u{i % 997}",
                        "event_type": kind,
                        "duration_sec": 1800 if kind == "complete" else 600,
                        "revenue_cny": 0.0,
                    },
                }
            )
            posted.plays += kind == "play"
            posted.completes += kind == "complete"
        yield orjson.dumps({"events": events})


async def post_events(
    node: httpx.AsyncClient, codes: list[str], count: int, posted: Posted
) -> None:
    """Post ``count`` events as the node does; each request must be accepted whole."""
    for body in bodies(codes, count, posted):
        answer = await node.post(
            "/v1/avcc/playback", content=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 202, answer.text
        posted.events += answer.json()["accepted"]


@contextlib.asynccontextmanager
async def sinkless_stack(db_url: str, tmp_path: Path) -> AsyncIterator[AvccStack]:
    """The avcc stack with no consumer group running (the sink and the detector included)
    and the lag monitor sampling every 0.1 s (the test waits on its samples)."""
    async with avcc_stack(
        db_url,
        make_broker("embedded", tmp_path),
        tmp_path,
        groups=[],
        scan=False,
        lag=True,
        hub_options={"lag_interval_s": 0.1},
    ) as stack:
        yield stack


async def node_key(stack: AvccStack) -> str:
    """A platform node's key, from the admin API."""
    async with stack.client(await stack.admin()) as admin:
        answer = await admin.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "site"})
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["key"]
    return key


def promtool_evaluates(lag: Mapping[str, float], tmp_path: Path, *, fires: bool) -> None:
    promtool_evaluates_lag(ALERT, SINK, PLAYBACK_TOPIC, lag, tmp_path, fires=fires)


async def test_sink_stopped_past_50000_fires_the_alert_without_gating_and_restarted_clears_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with sinkless_stack(sqlite_url, tmp_path) as stack:
        tenant, tenant_key = await create_tenant(stack.hub.engine, "studio")
        codes = [await coded_work(stack.hub, tenant.id) for _ in range(CODES)]
        posted = Posted()
        began = time.monotonic()
        async with (
            stack.client(await node_key(stack)) as node,
            stack.client(tenant_key) as client,
        ):
            # 50,000 waiting is on the line, not past it: the rule stays quiet
            await post_events(node, codes, THRESHOLD, posted)
            assert posted.events == THRESHOLD
            await until(lag_totals(client, SINK, PLAYBACK_TOPIC, THRESHOLD), 30)
            on_the_line = await exported_lag(client, SINK, PLAYBACK_TOPIC)
            assert len(on_the_line) > 1  # the backlog is spread over partitions
            promtool_evaluates(on_the_line, tmp_path, fires=False)

            await post_events(node, codes, BATCH, posted)
            past = THRESHOLD + BATCH
            assert posted.events == past
            await until(lag_totals(client, SINK, PLAYBACK_TOPIC, past), 30)
            posted_s = time.monotonic() - began
            promtool_evaluates(
                await exported_lag(client, SINK, PLAYBACK_TOPIC), tmp_path, fires=True
            )

            # The monitor sees the breach, yet the telemetry road closes no gate.
            assert f"{SINK}/{PLAYBACK_TOPIC}" in stack.hub.lag.overloaded
            admitted = await apply(client, noise_png(1))
            assert admitted.status_code == 201, admitted.text
            assert await gate_gauge(client, "avcc") == 1

            stack.start_group(SINK)
            drain_began = time.monotonic()
            await until(lag_totals(client, SINK, PLAYBACK_TOPIC, 0), 90)
            drained_s = time.monotonic() - drain_began
            promtool_evaluates(
                await exported_lag(client, SINK, PLAYBACK_TOPIC), tmp_path, fires=False
            )

        totals = await (await stack.avcc.analytics()).totals()
        print(
            f"\n{posted.events} events posted in {posted_s:.1f} s; the sink drained them in "
            f"{drained_s:.1f} s ({posted.events / drained_s:.0f}/s)"
        )
        assert (totals.events, totals.plays, totals.completes, totals.purchases) == (
            posted.events,
            posted.plays,
            posted.completes,
            0,
        )
