"""avcc's playback detector (the seed's flink-job): throughput on one core, and the latency
from a planted spike to its row.

Part ``throughput``: ``PlaybackDetector.consume`` (orjson decode, windows, the judges of
every window that closes) over ``--events`` records in batches of 5000, as the stream
runtime hands them over: 24 partitions, ``--codes`` codes (Zipf-like popularity),
``--users`` user hashes, event time advancing ``--rate`` events a second, so windows close
as they would live. One thread, so one core; the figure is records / CPU second of it.

Part ``latency``: live, in real time, on embedded defaults (a SQLite file, the embedded log
in a temporary folder): a publisher sends ``--live-rate`` events a second of six codes with
event time = now; a consumer of group ``avcc-detector`` hands the handler a batch as soon as
one is there (empty after 0.2 s, like the runtime's tick). After warm-up, one window of one
code gets 10x its plays; the figure is the time from the first spiked record's publish to
its row in ``avcc_playback_anomalies``. It is bounded by the window (1 s), the lateness
(1 s) and a batch's wait.

    python bench/avcc_detector.py
    python bench/avcc_detector.py --part throughput --events 2000000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.avcc import avcc_pipeline_in

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import SystemClock
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import OutgoingMessage, Record, partition_for
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.pipelines.avcc import events
from aigc_hub.pipelines.avcc.handlers.detector import PlaybackDetector, make_detector
from aigc_hub.pipelines.avcc.settings import AvccSettings
from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies
from aigc_hub.pipelines.avcc.state import STATE
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

T0 = 1_767_225_600_000
NODES = ("8361", "8362", "8363", "8364")


def value(ts: int, code: str, node: str, user: str, kind: str, revenue: float) -> bytes:
    """A record's value: the seed's envelope around a §9.2.4 payload."""
    return orjson.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "timestamp": ts,
            "source": events.GATEWAY_SVC,
            "payload": {
                "avcc_code": code,
                "platform_node": node,
                "user_hash": user,
                "event_type": kind,
                "duration_sec": 1800,
                "revenue_cny": revenue,
            },
        }
    )


def throughput(count: int, codes: int, users: int, rate: int) -> None:
    rng = random.Random(1)
    names = [f"MA.156.10005.8361/{i:08d}" for i in range(codes)]
    weights = [1 / (i + 1) for i in range(codes)]
    users_ = [f"sha256:{i:064x}" for i in range(users)]
    print(f"generating {count} records ...", flush=True)
    picked = rng.choices(names, weights, k=count)
    kinds = rng.choices(["play", "complete", "purchase"], [0.6, 0.36, 0.04], k=count)
    records = []
    for i, (code, kind) in enumerate(zip(picked, kinds, strict=True)):
        ts = T0 + i * 1000 // rate + rng.randrange(-300, 300)
        revenue = round(rng.uniform(3, 30), 2) if kind == "purchase" else 0.0
        body = value(ts, code, rng.choice(NODES), rng.choice(users_), kind, revenue)
        records.append(Record(events.PLAYBACK_TOPIC, partition_for(code, 24), i, code, body, {}, 0))
    # The million records held here are the bench's, not the detector's: keep the garbage
    # collector from scanning them again and again (a live process holds one batch).
    gc.freeze()
    # consume() never touches the database: an engine that never connects will do
    engine = store_engine.create_engine("postgresql://nobody@127.0.0.1:1/none")
    detector = PlaybackDetector(engine, SystemClock(), AvccSettings())
    found = 0
    now = T0
    cpu, wall = time.thread_time(), time.perf_counter()
    for at in range(0, count, 5000):
        now += 5000 * 1000 // rate
        found += len(detector.consume(records[at : at + 5000], now))
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    print(
        f"throughput: {count} records, {codes} codes, {users} users: "
        f"{count / cpu:,.0f} records/s per CPU second ({count / wall:,.0f}/s wall), "
        f"{found} anomalies, {detector.windows.late} late"
    )


async def latency(live_rate: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = f"sqlite:///{folder / 'hub.db'}"
        migrate.upgrade(url)
        broker = EmbeddedBroker(folder / "log.db")
        config = HubConfig(engine=store_engine.create_engine(url), broker=broker)
        hub = Hub(config, [avcc_pipeline_in(folder, spike_warmup_windows=5)])
        await hub.start()
        avcc = hub.state_of(STATE)
        handler = make_detector(avcc)
        consumer = broker.consumer("avcc-detector", [events.PLAYBACK_TOPIC])
        stop = asyncio.Event()

        async def consume() -> None:
            while not stop.is_set():
                await handler(await consumer.fetch(5000, timeout=0.2))

        codes = [f"MA.156.10005.8361/{i:08d}" for i in range(6)]
        spiked_at: dict[int, float] = {}

        async def publish() -> None:
            tick = 0.05
            per_tick = max(1, int(live_rate * tick))
            started = time.monotonic()
            for step in itertools.count():
                if stop.is_set():
                    return
                now_ms = int(time.time() * 1000)
                second = int(time.monotonic() - started)
                spike = second >= 12 and second % 6 == 0 and second not in spiked_at
                messages = []
                for _ in range(per_tick):
                    code = random.choice(codes)
                    messages.append(
                        OutgoingMessage(
                            events.PLAYBACK_TOPIC,
                            code,
                            value(
                                now_ms,
                                code,
                                "8361",
                                f"sha256:{random.randrange(10**6)}",
                                "play",
                                0.0,
                            ),
                        )
                    )
                if spike:
                    # 10x the plays of codes[0] for this one second, sent at once
                    spiked_at[second] = time.monotonic()
                    extra = per_tick * int(1 / tick) * 10 // len(codes)
                    messages += [
                        OutgoingMessage(
                            events.PLAYBACK_TOPIC,
                            codes[0],
                            value(now_ms, codes[0], "8361", f"sha256:s{i}", "play", 0.0),
                        )
                        for i in range(extra)
                    ]
                await broker.publish(messages)
                await asyncio.sleep(max(0.0, started + (step + 1) * tick - time.monotonic()))

        tasks = [asyncio.create_task(consume()), asyncio.create_task(publish())]
        delays: list[float] = []
        seen: set[int] = set()
        deadline = time.monotonic() + 12 + rounds * 6 + 15
        while len(delays) < rounds and time.monotonic() < deadline:
            async with hub.engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(avcc_playback_anomalies).where(
                            avcc_playback_anomalies.c.kind == "spike"
                        )
                    )
                ).all()
            for row in rows:
                if row.id not in seen:
                    seen.add(row.id)
                    # the spike's second: the latest planted before now
                    planted = max(spiked_at.values())
                    delays.append(time.monotonic() - planted)
            await asyncio.sleep(0.02)
        stop.set()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await consumer.close()
        await hub.close()
        print(
            f"latency: {len(delays)} planted spikes at {live_rate} events/s: "
            + ", ".join(f"{d:.2f} s" for d in delays)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["throughput", "latency", "both"], default="both")
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--codes", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=100_000, help="event-time events a second")
    parser.add_argument("--live-rate", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.part in ("throughput", "both"):
        throughput(args.events, args.codes, args.users, args.rate)
    if args.part in ("latency", "both"):
        asyncio.run(latency(args.live_rate, args.rounds))


if __name__ == "__main__":
    main()
