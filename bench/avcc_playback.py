"""avcc playback telemetry: ingest events/s end to end into DuckDB, DuckDB's own batch-insert
rate beside it, and the detector's latency from a planted spike to its anomaly row.

The hub runs on embedded defaults (a SQLite file, the embedded log, DuckDB in its data dir)
in ``aigc-hub`` processes, as a user runs it: ``--layout up`` is one ``aigc-hub up``;
``--layout split`` is ``aigc-hub api`` (the gateway and the relay) beside ``aigc-hub worker
--group avcc-sink --group avcc-detector``. This process is the platform node: it registers
itself, builds its request bodies before the clock starts (4,000 events each, 200 coded
works, event time in order) and posts them with ``--inflight`` requests in flight.

Part ``ingest``, in alternating rounds with ``duckdb``:

* ``ingest``: the figures are events accepted per second (first POST to the last 202) and
  events stored per second (first POST until the sink's committed offsets cover them all:
  the sink commits a batch after DuckDB stored it), with the hub processes' CPU seconds;
* ``duckdb``: the same events through the sink's own code without the broker and the API:
  ``playback_rows.decode`` of the records, then ``AnalyticsStore.write`` of 20,000-row
  batches into a fresh DuckDB file, timed apart (the limit the sink cannot beat).

Part ``latency``: a live stream through the API at ``--live-rate`` events a second (event
time = now) over six codes; after ``--warmup-s`` seconds one code gets ten times its plays
in one second; the figure is the time from that POST to the spike's row in
``avcc_playback_anomalies``, ``--spikes`` times.

After the run the DuckDB file is opened and its count compared with what was accepted.

    python bench/avcc_playback.py                          # both parts, layout split
    python bench/avcc_playback.py --part ingest --events 400000 --rounds 2 --layout up
    python bench/avcc_playback.py --part latency --live-rate 2000 --spikes 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import orjson
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import loopback  # the bench folder's shared pieces (bench/loopback.py)
from tests.support.avcc import coded_work

from aigc_hub.core.clock import SystemClock
from aigc_hub.messaging import embedded_schema as log_schema
from aigc_hub.messaging.base import Record, partition_for
from aigc_hub.pipelines.avcc import playback_rows
from aigc_hub.pipelines.avcc.analytics.base import SinkBatch
from aigc_hub.pipelines.avcc.analytics.duckdb import DuckDBAnalytics
from aigc_hub.pipelines.avcc.settlement_tables import avcc_playback_anomalies
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate
from aigc_hub.tenancy import create_admin_key, create_tenant

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "topic.playback.event"
SINK = "avcc-sink"
BATCH = 4000
NODE = "8361"
SINK_BATCH = 20_000


def hub_env(workdir: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_DATABASE_URL": f"sqlite:///{workdir / 'hub.db'}",
        "AIGC_HUB_LOG_PATH": str(workdir / "log.db"),
        "AIGC_HUB_DATA_DIR": str(workdir),
        "AIGC_HUB_BLOB_URL": f"file://{workdir / 'blobs'}",
        "AIGC_HUB_PIPELINES": "avcc",
        "AIGC_HUB_AVCC_LOG_KEY_PATH": str(workdir / "log-key.pem"),
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "AIGC_HUB_API_PORT": str(port),
    }


@contextlib.asynccontextmanager
async def hub_processes(
    layout: str, workdir: Path, port: int
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """The hub's processes for ``layout``, yielded once the API answers; SIGTERMed after."""
    env = hub_env(workdir, port)
    commands = (
        [["up", "--port", str(port)]]
        if layout == "up"
        else [["api"], ["worker", "--group", SINK, "--group", "avcc-detector"]]
    )
    out = workdir / "hub.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with out.open("ab") as log:
            for command in commands:
                procs.append(
                    subprocess.Popen(  # noqa: ASYNC220 (started once; nothing to wait on)
                        [sys.executable, "-m", "aigc_hub", *command],
                        env=env,
                        cwd=ROOT,
                        stdout=log,
                        stderr=log,
                    )
                )
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as c:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get("/healthz")).status_code == 200:
                        break
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise SystemExit("the hub did not start:\n" + out.read_text()[-3000:])
                await asyncio.sleep(0.2)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()


async def prepare(workdir: Path, port: int) -> tuple[str, list[str]]:
    """Two tenants' 200 coded works, an admin key, and this node's key (through the API)."""
    engine = store_engine.create_engine(f"sqlite:///{workdir / 'hub.db'}")
    try:
        tenants = [(await create_tenant(engine, f"studio-{i}"))[0] for i in range(2)]
        hub = types.SimpleNamespace(engine=engine)  # coded_work reads only .engine
        codes = [await coded_work(hub, tenants[i % 2].id) for i in range(200)]  # type: ignore[arg-type]
        admin = await create_admin_key(engine)
    finally:
        await engine.dispose()
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {admin}"},
        trust_env=False,
    ) as client:
        answer = await client.post("/v1/avcc/admin/nodes", json={"code": NODE, "name": "bench"})
    answer.raise_for_status()
    return str(answer.json()["key"]), codes


def events(
    count: int, codes: Sequence[str], start_ms: int, span_ms: int
) -> list[dict[str, object]]:
    """``count`` events in event-time order over ``span_ms`` (plays, completes, a few buys)."""
    rng = random.Random(count)
    out: list[dict[str, object]] = []
    for i in range(count):
        roll = rng.random()
        kind = "purchase" if roll < 0.001 else "complete" if roll < 0.2 else "play"
        out.append(
            {
                "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "timestamp": start_ms + i * span_ms // count,
                "payload": {
                    "avcc_code": rng.choice(codes),
                    "platform_node": NODE,
                    "user_hash": f"sha256:u{rng.randrange(200_000)}",
                    "event_type": kind,
                    "duration_sec": 0 if kind == "purchase" else 600,
                    "revenue_cny": rng.randint(100, 9999) / 100 if kind == "purchase" else 0.0,
                },
            }
        )
    return out


def bodies(evs: Sequence[dict[str, object]]) -> list[bytes]:
    return [orjson.dumps({"events": evs[i : i + BATCH]}) for i in range(0, len(evs), BATCH)]


async def post_all(
    port: int, key: str, payloads: Sequence[bytes], inflight: int
) -> tuple[int, float]:
    """Post every body, ``inflight`` at a time, in order; (events accepted, last 202 time)."""
    accepted = 0
    last = 0.0
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in payloads:
        queue.put_nowait(body)

    async def poster(client: httpx.AsyncClient) -> None:
        nonlocal accepted, last
        while not queue.empty():
            body = queue.get_nowait()
            answer = await client.post(
                "/v1/avcc/playback", content=body, headers={"Content-Type": "application/json"}
            )
            if answer.status_code != 202:
                raise SystemExit(f"refused: {answer.status_code} {answer.text[:300]}")
            accepted += int(answer.json()["accepted"])
            last = time.monotonic()

    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
        timeout=120,
    ) as client:
        await asyncio.gather(*(poster(client) for _ in range(inflight)))
    return accepted, last


async def sink_committed(log_path: Path) -> int:
    """Records of the playback topic the sink has committed (stored), over all partitions."""
    gp, p, t = log_schema.group_partitions, log_schema.partitions, log_schema.topics
    engine = store_engine.create_engine(f"sqlite:///{log_path}")
    try:
        async with engine.connect() as conn:
            total = await conn.scalar(
                sa.select(sa.func.coalesce(sa.func.sum(gp.c.committed), 0))
                .join(p, p.c.id == gp.c.tp_id)
                .join(t, t.c.id == p.c.topic_id)
                .where(gp.c.grp == SINK, t.c.name == TOPIC)
            )
    finally:
        await engine.dispose()
    return int(total or 0)


async def ingest_round(
    port: int,
    key: str,
    workdir: Path,
    payloads: Sequence[bytes],
    inflight: int,
    procs: Sequence[subprocess.Popen[bytes]],
) -> dict[str, float]:
    base = await sink_committed(workdir / "log.db")
    cpu0 = sum(loopback.tree_cpu_seconds(p.pid) for p in procs)
    began = time.monotonic()
    accepted, last = await post_all(port, key, payloads, inflight)
    deadline = time.monotonic() + 900
    while await sink_committed(workdir / "log.db") < base + accepted:
        if time.monotonic() > deadline:
            raise SystemExit("the sink did not store everything within 900 s")
        await asyncio.sleep(0.05)
    stored = time.monotonic()
    cpu = sum(loopback.tree_cpu_seconds(p.pid) for p in procs) - cpu0
    return {
        "events": accepted,
        "accepted_per_s": accepted / (last - began),
        "stored_per_s": accepted / (stored - began),
        "hub_cpu_s": cpu,
    }


def records_of(evs: Sequence[dict[str, object]]) -> list[Record]:
    """The records the gateway would publish for ``evs`` (offsets per partition from 0)."""
    next_offset = [0] * 24
    out = []
    for ev in evs:
        code = ev["payload"]["avcc_code"]  # type: ignore[index]
        part = partition_for(str(code), 24)
        value = orjson.dumps({**ev, "source": "gateway-svc"})
        out.append(Record(TOPIC, part, next_offset[part], str(code), value, {}, 0))
        next_offset[part] += 1
    return out


async def duckdb_round(records: Sequence[Record], workdir: Path, n: int) -> dict[str, float]:
    """The sink's decode and DuckDB write of ``records`` without broker or API, timed apart."""
    store = DuckDBAnalytics(str(workdir / f"alone-{n}.duckdb"), SystemClock())
    decode_s = write_s = 0.0
    try:
        for i in range(0, len(records), SINK_BATCH):
            chunk = records[i : i + SINK_BATCH]
            t0 = time.perf_counter()
            decoded = playback_rows.decode(chunk, {})
            t1 = time.perf_counter()
            await store.write(SinkBatch(TOPIC, decoded.table, decoded.reached, decoded.positions))
            write_s += time.perf_counter() - t1
            decode_s += t1 - t0
    finally:
        await store.close()
    return {"decode_per_s": len(records) / decode_s, "write_per_s": len(records) / write_s}


async def latency_round(
    port: int, key: str, workdir: Path, codes: Sequence[str], rate: int, warmup_s: float
) -> float:
    """Seconds from a spike's POST to its row, with a live stream around it."""
    live = list(codes[:6])
    rng = random.Random()
    engine = store_engine.create_engine(f"sqlite:///{workdir / 'hub.db'}")
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
    ) as client:

        async def send(evs: list[dict[str, object]]) -> None:
            answer = await client.post(
                "/v1/avcc/playback",
                content=orjson.dumps({"events": evs}),
                headers={"Content-Type": "application/json"},
            )
            answer.raise_for_status()

        def second_of(code_list: Sequence[str], n: int, at_ms: int) -> list[dict[str, object]]:
            return [
                {
                    "event_id": str(uuid.uuid4()),
                    "timestamp": at_ms + i * 1000 // max(n, 1),
                    "payload": {
                        "avcc_code": code_list[i % len(code_list)],
                        "platform_node": NODE,
                        "user_hash": f"sha256:live{rng.randrange(1_000_000)}",
                        "event_type": "complete" if i % 5 == 4 else "play",
                        "duration_sec": 60,
                        "revenue_cny": 0.0,
                    },
                }
                for i in range(n)
            ]

        # A fresh code per round: its baseline is this round's warm-up.
        spiked = live[rng.randrange(len(live))]
        ends = time.monotonic() + warmup_s
        while time.monotonic() < ends:
            now_ms = int(time.time() * 1000)
            await send(second_of(live, rate, now_ms - now_ms % 1000))
            await asyncio.sleep(1 - (time.time() % 1))
        now_ms = int(time.time() * 1000)
        window = now_ms - now_ms % 1000
        planted = second_of(live, rate, window) + second_of(
            [spiked], 10 * rate // len(live), window
        )
        sent_at = time.monotonic()
        await send(planted)
        found_at = None
        deadline = time.monotonic() + 60
        while found_at is None and time.monotonic() < deadline:
            now_ms = int(time.time() * 1000)
            await send(second_of(live, rate // 10, now_ms))  # the stream goes on
            async with engine.connect() as conn:
                hit = await conn.scalar(
                    sa.select(sa.func.count()).where(
                        avcc_playback_anomalies.c.kind == "spike",
                        avcc_playback_anomalies.c.subject == spiked,
                        avcc_playback_anomalies.c.window_start == window,
                    )
                )
            if hit:
                found_at = time.monotonic()
            else:
                await asyncio.sleep(0.05)
    await engine.dispose()
    if found_at is None:
        raise SystemExit(f"the spike on {spiked} was not found within 60 s")
    return found_at - sent_at


def stored_in_duckdb(workdir: Path) -> int:
    import duckdb

    with duckdb.connect(str(workdir / "avcc" / "playback.duckdb"), read_only=True) as conn:
        row = conn.execute("SELECT count(*) FROM playback_events").fetchone()
    return int(row[0]) if row else 0


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="avcc-playback-"))
    migrate.upgrade(f"sqlite:///{workdir / 'hub.db'}")
    port = loopback.free_port()
    print(f"layout {args.layout}; {loopback.machine_load()}")
    accepted_total = 0
    async with hub_processes(args.layout, workdir, port) as procs:
        key, codes = await prepare(workdir, port)
        if args.part in ("ingest", "both"):
            span = args.events * 2  # 500 events a second of event time
            start = int(time.time() * 1000) - span - 600_000
            evs = events(args.events, codes, start, span)
            payloads = bodies(evs)
            records = records_of(evs)
            rows: dict[str, list[float]] = {}
            for n in range(args.rounds):
                # Each round's events are new to the sink and the detector: new ids, later times.
                if n:
                    evs = events(args.events, codes, start + n * span, span)
                    payloads = bodies(evs)
                result = await ingest_round(port, key, workdir, payloads, args.inflight, procs)
                accepted_total += int(result["events"])
                alone = await duckdb_round(records, workdir, n)
                for name, value in {**result, **alone}.items():
                    rows.setdefault(name, []).append(value)
                print(
                    f"round {n + 1}: {int(result['events'])} events: accepted "
                    f"{result['accepted_per_s']:,.0f}/s, stored {result['stored_per_s']:,.0f}/s "
                    f"end to end (hub CPU {result['hub_cpu_s']:.1f} s); the sink's code alone: "
                    f"decode {alone['decode_per_s']:,.0f}/s, "
                    f"DuckDB write {alone['write_per_s']:,.0f}/s"
                )
            med = {k: statistics.median(v) for k, v in rows.items()}
            print(
                f"median: accepted {med['accepted_per_s']:,.0f}/s, "
                f"stored {med['stored_per_s']:,.0f}/s; "
                f"DuckDB alone {med['write_per_s']:,.0f}/s → end to end = "
                f"{med['stored_per_s'] / med['write_per_s']:.2f}× DuckDB's own rate"
            )
        if args.part in ("latency", "both"):
            seen = []
            for _ in range(args.spikes):
                seen.append(
                    await latency_round(port, key, workdir, codes, args.live_rate, args.warmup_s)
                )
                print(f"spike → anomaly row: {seen[-1]:.2f} s")
            print(f"latency: median {statistics.median(seen):.2f} s, max {max(seen):.2f} s")
    if args.part in ("ingest", "both"):
        stored = stored_in_duckdb(workdir)
        print(f"DuckDB holds {stored} events; the ingest rounds' API accepted {accepted_total}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=["ingest", "latency", "both"], default="both")
    parser.add_argument("--layout", choices=["up", "split"], default="split")
    parser.add_argument("--events", type=int, default=200_000, help="events per ingest round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=2, help="requests in flight")
    parser.add_argument("--live-rate", type=int, default=1200, help="live events a second")
    parser.add_argument("--warmup-s", type=float, default=15.0)
    parser.add_argument("--spikes", type=int, default=3)
    args = parser.parse_args()
    if (
        not 1 <= args.events <= 5_000_000
        or not 1 <= args.rounds <= 10
        or not 1 <= args.spikes <= 10
    ):
        parser.error("--events 1..5,000,000, --rounds 1..10, --spikes 1..10 (a bounded run)")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
