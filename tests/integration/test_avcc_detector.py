"""The playback detector (the seed's flink-job) on real parts: records published to the
embedded log's ``topic.playback.event`` (24 partitions, keyed by code), read back by a
consumer of group ``avcc-detector``, handed to the stream handler batch by batch with empty
ticks between, anomalies written to a migrated SQLite store.

The hub's clock is manual: processing time only moves when a test says so, which is what
makes partitions idle (and so closes the last windows) without waiting.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import ManualClock
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Consumer, OutgoingMessage, Record, partition_for
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.pipelines.avcc import events
from aigc_hub.pipelines.avcc.detector import Anomaly, AnomalyKind
from aigc_hub.pipelines.avcc.handlers import detector as detector_handler
from aigc_hub.pipelines.avcc.handlers.detector import PlaybackDetector, make_detector
from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies
from aigc_hub.pipelines.avcc.state import STATE
from aigc_hub.store import engine as store_engine
from tests.support.avcc import avcc_pipeline_in
from tests.support.playback_traffic import CODES, Plan, Traffic, envelope

WINDOWS = 100
IDLE_MS = 2000


@dataclass
class Rig:
    hub: Hub
    broker: EmbeddedBroker
    consumer: Consumer
    clock: ManualClock
    detector: PlaybackDetector

    async def feed(self, messages: Sequence[OutgoingMessage]) -> None:
        """Publish ``messages``, then hand every record of them to the detector as the stream
        runtime would: fetched batches, an empty batch when a fetch times out."""
        await self.broker.publish(messages)
        got, empties = 0, 0
        while got < len(messages):
            batch = await self.consumer.fetch(5000, timeout=0.5)
            await self.detector(batch)
            got += len(batch)
            empties = 0 if batch else empties + 1
            assert empties < 20, f"the log gave {got} of {len(messages)} records"
        # Processing time moves on a little per window (the stream is live, ~1 s a window).
        await self.clock.advance(0.2)

    async def go_quiet(self) -> None:
        """The stream stops: ticks until every partition is idle (the watermark lets go)."""
        await self.clock.advance(IDLE_MS / 1000)
        await self.detector([])

    async def anomalies(self) -> list[tuple[str, str, int]]:
        async with self.hub.engine.connect() as conn:
            rows = (await conn.execute(sa.select(avcc_playback_anomalies))).all()
        return sorted((r.kind, r.subject, r.window_start) for r in rows)

    async def rows(self) -> list[Any]:
        async with self.hub.engine.connect() as conn:
            return list((await conn.execute(sa.select(avcc_playback_anomalies))).all())


@contextlib.asynccontextmanager
async def rig(
    sqlite_url: str, tmp_path: Path, failpoints: Failpoints | None = None, **settings: Any
) -> AsyncIterator[Rig]:
    """A started hub running avcc (its state only: no group runs) over the embedded log, its
    ``avcc-detector`` handler, and a consumer of that group."""
    clock = ManualClock()
    broker = EmbeddedBroker(tmp_path / "log.db", clock=clock)
    config = HubConfig(
        engine=store_engine.create_engine(sqlite_url),
        broker=broker,
        clock=clock,
        failpoints=failpoints or Failpoints(),
    )
    hub = Hub(config, [avcc_pipeline_in(tmp_path, detector_idle_ms=IDLE_MS, **settings)])
    await hub.start()
    consumer = broker.consumer("avcc-detector", [events.PLAYBACK_TOPIC])
    detector = make_detector(hub.state_of(STATE))
    assert isinstance(detector, PlaybackDetector)
    try:
        yield Rig(hub, broker, consumer, clock, detector)
    finally:
        await consumer.close()
        await hub.close()


def _counted(kind: str) -> float:
    value = REGISTRY.get_sample_value("aigc_hub_avcc_playback_anomalies_total", {"kind": kind})
    return value or 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_clean_stream_of_five_codes_raises_no_anomaly(
    sqlite_url: str, tmp_path: Path, seed: int
) -> None:
    async with rig(sqlite_url, tmp_path) as r:
        traffic = Traffic(seed)
        for messages in traffic.windows(WINDOWS):
            await r.feed(messages)
        await r.go_quiet()
        assert await r.anomalies() == []
        # the watermark let go once the stream went quiet: it stands 1 s behind the last event
        assert r.detector.windows.open_windows == 2  # the last two: 1 s of lateness
        assert r.detector.windows.late == 0


async def test_planted_spike_flood_collapse_and_purchase_are_each_found_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    spiked, collapsed, overpaid = CODES[2], CODES[4], CODES[1]
    plan = Plan(
        spikes={60: (spiked, 10.0)},
        floods={70: ("sha256:flooder", "8362", 100)},
        collapses={80: collapsed},
        big_purchases={90: (overpaid, 900.0)},
    )
    before = {kind: _counted(kind) for kind in ("spike", "flood", "ratio", "revenue")}
    async with rig(sqlite_url, tmp_path) as r:
        traffic = Traffic(7)
        for messages in traffic.windows(WINDOWS, plan):
            await r.feed(messages)
        await r.go_quiet()
        start = traffic.window_start
        assert await r.anomalies() == sorted(
            [
                ("spike", spiked, start(60)),
                ("flood", "sha256:flooder", start(70)),
                ("ratio", collapsed, start(80)),
                ("revenue", overpaid, start(90)),
            ]
        )
        by_kind = {row.kind: row for row in await r.rows()}
        assert by_kind["spike"].observed > 5 * by_kind["spike"].expected
        assert by_kind["flood"].observed == 100
        assert by_kind["flood"].detail["platform_node"] == "8362"
        assert by_kind["ratio"].observed == 0.0
        assert by_kind["revenue"].observed == 900.0
        assert by_kind["revenue"].detail["check"] == "purchase_max"
        for kind in before:
            assert _counted(kind) == before[kind] + 1, kind


async def test_a_batch_seen_again_after_a_restart_writes_no_second_row(
    sqlite_url: str, tmp_path: Path
) -> None:
    """At least once: a new process (fresh state) reading the same records again finds the
    same anomaly and the unique key keeps one row."""
    plan = Plan(floods={20: ("sha256:flooder", "8361", 80)})
    traffic = Traffic(11)
    batches = list(traffic.windows(30, plan))
    async with rig(sqlite_url, tmp_path) as r:
        for messages in batches:
            await r.feed(messages)
        first = await r.rows()
        again = make_detector(r.hub.state_of(STATE))
        for messages in batches:
            records = [
                _as_record(m, offset) for offset, m in enumerate(messages, start=len(messages))
            ]
            await again(records)
        await r.clock.advance(IDLE_MS / 1000)
        await again([])
        assert [(row.kind, row.subject) for row in first] == [("flood", "sha256:flooder")]
        assert [(row.kind, row.subject, row.id) for row in await r.rows()] == [
            (row.kind, row.subject, row.id) for row in first
        ]


async def test_a_failed_write_is_logged_and_its_anomaly_written_on_the_next_tick(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failpoints = Failpoints()
    plan = Plan(floods={20: ("sha256:flooder", "8361", 80)})
    async with rig(sqlite_url, tmp_path, failpoints) as r:
        batches = list(Traffic(5).windows(24, plan))
        for messages in batches[:20]:
            await r.feed(messages)

        def refuse() -> None:
            raise ConnectionError("database unreachable")

        failpoints.arm(detector_handler.BEFORE_WRITE, refuse)
        for messages in batches[20:]:
            await r.feed(messages)  # counted; the write fails and is not raised
        assert failpoints.hits[detector_handler.BEFORE_WRITE] >= 1
        assert "not written (1 waiting" in caplog.text
        assert await r.anomalies() == []
        failpoints.disarm(detector_handler.BEFORE_WRITE)
        await r.detector([])
        assert [(k, s) for k, s, _ in await r.anomalies()] == [("flood", "sha256:flooder")]


async def test_findings_waiting_on_a_failing_database_are_capped_oldest_dropped(
    sqlite_url: str, tmp_path: Path
) -> None:
    failpoints = Failpoints()

    def refuse() -> None:
        raise ConnectionError("database unreachable")

    failpoints.arm(detector_handler.BEFORE_WRITE, refuse)
    async with rig(sqlite_url, tmp_path, failpoints) as r:
        cap = detector_handler.MAX_PENDING
        r.detector.pending = [
            Anomaly(AnomalyKind.FLOOD, f"sha256:u{i}", i * 1000, i * 1000 + 1000, 99, 1, 1)
            for i in range(cap + 5)
        ]
        await r.detector([])
        assert len(r.detector.pending) == cap
        assert r.detector.pending[0].subject == "sha256:u5"
        failpoints.disarm(detector_handler.BEFORE_WRITE)
        await r.detector([])
        assert len(await r.anomalies()) == cap
        assert r.detector.pending == []


async def test_malformed_and_late_records_are_counted_and_dropped(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with rig(sqlite_url, tmp_path) as r:
        traffic = Traffic(3)
        for messages in traffic.windows(10):
            await r.feed(messages)
        closed_before = r.detector.windows.watermark
        assert closed_before is not None
        late = envelope(traffic.window_start(0) + 10, CODES[0], "8361", "sha256:x", "play")
        bad = [
            b"not json",
            b'{"timestamp": 1}',
            envelope(traffic.window_start(9), "c", "1", "u", "play")[:-5],
        ]
        await r.feed([OutgoingMessage(events.PLAYBACK_TOPIC, CODES[0], v) for v in (late, *bad)])
        assert r.detector.windows.late == 1
        assert r.detector.malformed == 3


def _as_record(message: OutgoingMessage, offset: int) -> Record:
    """The record the log would give back for ``message`` (another fetch of it)."""
    return Record(
        message.topic,
        partition_for(message.key, 24),
        offset,
        message.key,
        message.value,
        {},
        0,
    )
