"""Lag → gate: a stopped group falls past its threshold, the gate closes; drained, it opens."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from pathlib import Path

import pytest

from aigc_hub.core.clock import ManualClock
from aigc_hub.reliability.admission import AdmissionGate
from aigc_hub.reliability.lag import LagMonitor, Threshold, parse_thresholds
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until


@pytest.mark.parametrize(
    "broker_kind", ["memory", "embedded", pytest.param("kafka", marks=pytest.mark.kafka)]
)
async def test_gate_closes_past_the_threshold_and_opens_after_draining(
    sqlite_url: str, tmp_path: Path, broker_kind: str, request: pytest.FixtureRequest
) -> None:
    clock: ManualClock | None = ManualClock()
    if broker_kind == "kafka":  # records carry the cluster's real time there
        clock = None
        broker = request.getfixturevalue("kafka_endpoint").broker()
    else:
        broker = make_broker(broker_kind, tmp_path, clock)
    async with hub_for(sqlite_url, broker, [fx.make_pipeline()], clock=clock) as hub:
        monitor = LagMonitor(
            broker,
            hub.clock,
            {fx.GROUP: [fx.TOPIC]},
            hub.catalog,
            thresholds={fx.TOPIC: Threshold(max_lag=100, max_age_s=60)},
        )
        gate = AdmissionGate(monitor)
        await monitor.sample()
        assert gate.admit("effects").admitted

        # the consumer group is stopped; producers keep going past the threshold
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request(f"k{i}", i) for i in range(300)])
        await hub.relay.drain()
        [sample] = await monitor.sample()
        assert sample.lag == 300 and sample.breached
        verdict = gate.admit("effects")
        assert not verdict.admitted
        assert 1 <= verdict.retry_after_s <= 300
        assert "300 records behind" in verdict.reason
        assert gate.admit("avcc").admitted  # other pipelines are not held back

        # the group comes back and drains; the gate opens again
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def drained() -> bool:
            [s] = await monitor.sample()
            return s.lag == 0

        await wait_until(drained, timeout=30)
        stop.set()
        await run
        assert gate.admit("effects").admitted


async def test_age_alone_breaches_and_half_the_threshold_clears(
    sqlite_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    broker = make_broker("memory", tmp_path, clock)
    async with hub_for(sqlite_url, broker, [fx.make_pipeline()], clock=clock) as hub:
        monitor = LagMonitor(
            broker,
            hub.clock,
            {fx.GROUP: [fx.TOPIC]},
            hub.catalog,
            thresholds={fx.TOPIC: Threshold(max_lag=1_000, max_age_s=60)},
        )
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("k", 1)])
        await hub.relay.drain()
        [s] = await monitor.sample()
        assert not s.breached
        await clock.advance(61)  # one record, but it waited too long
        [s] = await monitor.sample()
        assert s.breached and s.oldest_age_s > 60


def test_threshold_settings_parse() -> None:
    assert parse_thresholds("transcode=500/120, comment=/30,danmaku=10") == {
        "transcode": Threshold(500, 120.0),
        "comment": Threshold(None, 30.0),
        "danmaku": Threshold(10, None),
    }
    for bad in ("transcode", "transcode=", "=5", "x=abc"):
        with pytest.raises(ValueError, match="bad lag threshold"):
            parse_thresholds(bad)


async def test_alerts_are_posted_to_the_webhook_on_firing_and_resolving(
    sqlite_url: str, tmp_path: Path
) -> None:
    received: list[dict[str, object]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        clock = ManualClock()
        broker = make_broker("memory", tmp_path, clock)
        async with hub_for(sqlite_url, broker, [fx.make_pipeline()], clock=clock) as hub:
            url = f"http://127.0.0.1:{server.server_address[1]}/alerts"
            monitor = LagMonitor(
                broker,
                clock,
                {fx.GROUP: [fx.TOPIC]},
                hub.catalog,
                thresholds={fx.TOPIC: Threshold(max_lag=5)},
                webhook_url=url,
            )
            async with hub.transaction() as conn:
                await hub.outbox.add(conn, [fx.request(f"k{i}", i) for i in range(10)])
            await hub.relay.drain()
            await monitor.sample()
            stop = asyncio.Event()
            run = asyncio.create_task(hub.run(stop))

            async def resolved() -> bool:
                await monitor.sample()
                return len(received) == 2

            await wait_until(resolved, timeout=20)
            stop.set()
            await run
    finally:
        server.shutdown()
        server.server_close()
    assert [a["state"] for a in received] == ["firing", "resolved"]
    assert received[0]["topic"] == fx.TOPIC and received[0]["lag"] == 10
    assert received[0]["group"] == fx.GROUP


async def test_an_unreachable_broker_closes_every_gate(sqlite_url: str, tmp_path: Path) -> None:
    broker = make_broker("memory", tmp_path)
    async with hub_for(sqlite_url, broker, [fx.make_pipeline()]) as hub:
        gate = AdmissionGate(hub.lag)
        await hub.lag.sample()
        assert gate.admit("effects").admitted

        async def down(group: str, topics: list[str]) -> list[object]:
            raise ConnectionError("broker down")

        hub.lag.broker.lag = down  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):
            await hub.lag.sample()
        verdict = gate.admit("effects")
        assert not verdict.admitted and verdict.broker_unreachable
        assert verdict.retry_after_s > 0
