"""vistack: danmaku ingest end to end, POST → live feed latency, and the transcoder's gRPC
overhead against the bare FFmpeg DASH command.

The hub runs as the tests' vistack stack runs it, which is what ``aigc-hub up`` runs for
this pipeline on embedded defaults: one process holding the HTTP API (real uvicorn on
loopback), the consumer groups on one event loop, SQLite and the embedded log. Clients are
aiohttp in a process of their own (bounded concurrency).

Parts (``--parts``, all by default):

- ``ingest``  ``--rounds`` alternating rounds of ``--danmaku`` posts from 50 users over
              ``--concurrency`` connections: the pipeline (POST → outbox → ``danmaku``
              topic → batch writers → rows) against a baseline a competent engineer would
              write without a broker: the same FastAPI route validating the same body and
              inserting the row into SQLite in the request, concurrent requests sharing
              commits (one writer task taking every row waiting, one transaction each).
              Danmaku/s from the first POST to the last row stored.
- ``feed``    one viewer on the live feed; posts sent open-loop at ``--rate``/s for
              ``--seconds``: latency from each POST's send to its arrival on the feed,
              p50/p99/max.
- ``transcode`` ``--transcode-rounds`` alternating rounds on the same ``--clip-s`` 720p
              clip with audio: the bare FFmpeg DASH command for the same ladder (360p and
              720p, same codecs, 2 s segments, a local file to a local dir) against one
              ProcessVideo call through the gRPC client to a transcoder over loopback
              (download from the local blob store, the same DASH run in the media sandbox,
              the poster, the upload of every file): medians and the overhead.

    python bench/vistack.py                     # a few minutes on 2 cores
    python bench/vistack.py --parts transcode --transcode-rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa
import uvicorn
from bench.loopback import free_port, machine_load, percentile
from fastapi import FastAPI
from tests.support.hubs import make_broker
from tests.support.sse import FrameReader
from tests.support.vistack import make_clip, published_video, vistack_stack

from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.core.ids import new_id
from aigc_hub.media import commands, tools
from aigc_hub.pipelines.vistack import danmaku
from aigc_hub.pipelines.vistack.adapters.transcoder import TranscoderClient
from aigc_hub.pipelines.vistack.models import vistack_danmaku
from aigc_hub.pipelines.vistack.transcoder.server import start
from aigc_hub.pipelines.vistack.transcoder.service import TranscoderService
from aigc_hub.store import migrate
from aigc_hub.tenancy import create_tenant, create_tenant_key

USERS = 50


def body(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "offsetMs": rng.randrange(600_000),
        "text": f"danmaku {i}",
        "color": "#ffffff",
        "mode": rng.choice(["scroll", "top", "bottom"]),
    }


def run_poster(
    url: str, keys: list[str], paths: list[str], n: int, concurrency: int, rate: float
) -> dict[str, Any]:
    """Post from a process of its own (so the clients' CPU is not the hub's): its answer is
    the seconds taken and, per danmaku id, the wall time its POST was sent."""
    spec = {"url": url, "keys": keys, "paths": paths, "n": n, "c": concurrency, "rate": rate}
    done = subprocess.run(
        [sys.executable, __file__, "--role", "poster", "--spec", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def poster(spec: dict[str, Any]) -> None:
    """The poster process: ``n`` posts over ``c`` connections, open-loop at ``rate``/s when
    given (else as fast as answered); prints one JSON line. aiohttp, not httpx: httpx's
    connection pool, not the hub, bounds a run near 150 posts/s on this machine."""
    rng = random.Random(spec["n"])
    keys, paths, n, rate = spec["keys"], spec["paths"], spec["n"], spec["rate"]
    session = aiohttp.ClientSession(
        spec["url"],
        connector=aiohttp.TCPConnector(limit=spec["c"]),
        timeout=aiohttp.ClientTimeout(total=120),
    )
    sent: dict[str, float] = {}
    gate = asyncio.Semaphore(spec["c"])

    async def one(i: int) -> None:
        async with gate:
            at = time.time()
            headers = {"Authorization": f"Bearer {keys[i % len(keys)]}"}
            async with session.post(
                paths[i % len(paths)], json=body(rng, i), headers=headers
            ) as answer:
                text = await answer.text()
                assert answer.status == 202, text
                sent[json.loads(text)["id"]] = at

    started = time.perf_counter()
    tasks = []
    for i in range(n):
        if rate:
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    await session.close()
    print(json.dumps({"elapsed": elapsed, "sent": sent}))


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached in time")
        await asyncio.sleep(0.02)


async def pipeline_round(work: Path, n: int, concurrency: int) -> float:
    """Danmaku/s through the pipeline: first POST to last row stored."""
    url = f"sqlite:///{work / 'hub.db'}"
    migrate.upgrade(url)
    async with vistack_stack(
        url, make_broker("embedded", work), work, danmaku_per_s=1e6, danmaku_burst=1e6
    ) as stack:
        hub = stack.hub
        tenant, key = await create_tenant(hub.engine, "bench")
        keys = [key] + [await create_tenant_key(hub.engine, tenant.id) for _ in range(USERS - 1)]
        videos = [await published_video(hub, tenant.id) for _ in range(4)]
        paths = [f"/v1/vistack/videos/{v}/danmaku" for v in videos]

        async def stored() -> bool:
            async with hub.engine.connect() as conn:
                count = await conn.scalar(sa.select(sa.func.count()).select_from(vistack_danmaku))
            return int(count or 0) >= n

        started = time.perf_counter()
        await asyncio.to_thread(run_poster, stack.api_url, keys, paths, n, concurrency, 0)
        await until(stored, 600)
        return n / (time.perf_counter() - started)


def baseline_app(db: Path) -> FastAPI:
    """The same route, its rows inserted in the request; concurrent requests share commits
    (a writer task takes every row waiting and commits them in one transaction)."""
    app = FastAPI()
    conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS danmaku (id TEXT PRIMARY KEY, video_id TEXT, user_id TEXT,"
        " offset_ms INTEGER, text TEXT, color TEXT, mode TEXT, posted_at INTEGER)"
    )
    waiting: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
    wake = asyncio.Event()

    async def writer() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch = waiting[:]
            del waiting[: len(batch)]

            def commit(rows: list[tuple[Any, ...]] = [r for r, _ in batch]) -> None:  # noqa: B006
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO danmaku VALUES (?,?,?,?,?,?,?,?)", rows)
                conn.execute("COMMIT")

            await asyncio.to_thread(commit)
            for _, done in batch:
                done.set_result(None)

    tasks: list[asyncio.Task[None]] = []

    @app.post("/v1/vistack/videos/{video_id}/danmaku", status_code=202)
    async def post(video_id: str, body: danmaku.DanmakuPost) -> dict[str, str]:
        danmaku_id = f"dm_{new_id().hex}"
        row = (danmaku_id, video_id, "u", body.offsetMs, body.text, body.color, body.mode, 0)
        if not tasks:  # started on the server's loop with the first request
            tasks.append(asyncio.create_task(writer()))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.append((row, done))
        wake.set()
        await done
        return {"id": danmaku_id}

    return app


async def baseline_round(work: Path, n: int, concurrency: int) -> float:
    db = work / "baseline.db"
    app = baseline_app(db)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        paths = [f"/v1/vistack/videos/vid_{i}/danmaku" for i in range(4)]
        url = f"http://127.0.0.1:{port}"
        started = time.perf_counter()
        await asyncio.to_thread(run_poster, url, ["k"], paths, n, concurrency, 0)
        return n / (time.perf_counter() - started)
    finally:
        server.should_exit = True
        await serving


async def ingest(args: argparse.Namespace) -> None:
    pipe, base = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            base.append(await baseline_round(Path(tmp), args.danmaku, args.concurrency))
        with tempfile.TemporaryDirectory() as tmp:
            pipe.append(await pipeline_round(Path(tmp), args.danmaku, args.concurrency))
        print(f"ingest round {r + 1}: pipeline {pipe[-1]:,.0f}/s, baseline {base[-1]:,.0f}/s")
    p, b = statistics.median(pipe), statistics.median(base)
    print(
        f"danmaku ingest (median of {args.rounds}, {args.danmaku} posts, {args.concurrency} "
        f"connections): pipeline {p:,.0f}/s end to end, baseline {b:,.0f}/s, ratio {p / b:.2f}"
    )


async def feed(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        url = f"sqlite:///{work / 'hub.db'}"
        migrate.upgrade(url)
        async with vistack_stack(
            url, make_broker("embedded", work), work, danmaku_per_s=1e6, danmaku_burst=1e6
        ) as stack:
            hub = stack.hub
            tenant, key = await create_tenant(hub.engine, "bench")
            video = await published_video(hub, tenant.id)
            got: dict[str, float] = {}
            total = int(args.rate * args.seconds)
            async with (
                stack.client(key) as viewer,
                viewer.stream("GET", f"/v1/vistack/videos/{video}/danmaku/live") as live,
            ):
                reader = FrameReader(live)
                assert (await reader.next()).comments == ["ready"]

                async def watch() -> None:
                    while len(got) < total:
                        frame = await reader.next(timeout=120)
                        if frame.event == "danmaku":
                            got[frame.json()["danmakuId"]] = time.time()

                watching = asyncio.create_task(watch())
                path = f"/v1/vistack/videos/{video}/danmaku"
                posted = await asyncio.to_thread(
                    run_poster, stack.api_url, [key], [path], total, 64, args.rate
                )
                await asyncio.wait_for(watching, 120)
                await reader.aclose()
            sent: dict[str, float] = posted["sent"]
            latencies = sorted((got[k] - sent[k]) * 1000 for k in sent)
            print(
                f"danmaku POST → live feed at {args.rate}/s for {args.seconds} s "
                f"({total} posts): p50 {percentile(latencies, 50):.0f} ms, "
                f"p99 {percentile(latencies, 99):.0f} ms, max {latencies[-1]:.0f} ms"
            )


def bare_dash(source: Path, out: Path) -> None:
    """The FFmpeg DASH command a competent engineer writes for the same ladder."""
    out.mkdir()
    rungs = [commands.Rung("360p", 640, 360, 800, 96), commands.Rung("720p", 1280, 720, 2500, 128)]
    args = commands.dash(["-i", str(source)], rungs, has_audio=True, frame_rate=25, max_s=3600)
    subprocess.run([tools.executable("ffmpeg"), *args], cwd=out.parent, check=True)


async def transcode(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clip = make_clip(work / "clip.mp4", seconds=args.clip_s, size="1280x720")
        store = LocalBlobStore(work / "blobs", secret=b"bench-blob-secret-16")
        await store.put("t/bench/vistack/upl_1/source", clip.read_bytes())
        running = await start(TranscoderService(store, scratch_root=work), "127.0.0.1:0")
        client = TranscoderClient(running.address)
        bare, grpc_s = [], []
        try:
            for r in range(args.transcode_rounds):
                run_dir = work / f"bare-{r}"
                run_dir.mkdir()
                t0 = time.perf_counter()
                await asyncio.to_thread(bare_dash, clip, run_dir / "out")
                bare.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await client.process(
                    video_id="vid_bench",
                    tenant_id="bench",
                    source_key="t/bench/vistack/upl_1/source",
                    output_prefix=f"t/bench/dash/vid_bench/{r}/",
                    cover_key=f"t/bench/cover/vid_bench/{r}.jpg",
                    heights=[360, 720],
                    deadline_s=600,
                )
                grpc_s.append(time.perf_counter() - t0)
                print(f"transcode round {r + 1}: bare {bare[-1]:.2f} s, gRPC {grpc_s[-1]:.2f} s")
        finally:
            await client.close()
            await running.stop(1)
            await store.close()
    b, g = statistics.median(bare), statistics.median(grpc_s)
    print(
        f"transcode of a {args.clip_s:.0f} s 720p clip (median of {args.transcode_rounds}): "
        f"bare ffmpeg DASH {b:.2f} s, ProcessVideo over gRPC {g:.2f} s, "
        f"overhead {100 * (g - b) / b:+.1f} %"
    )


async def main(args: argparse.Namespace) -> None:
    print(f"machine load before: {machine_load()}")
    if "ingest" in args.parts:
        await ingest(args)
    if "feed" in args.parts:
        await feed(args)
    if "transcode" in args.parts:
        await transcode(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["ingest", "feed", "transcode"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--danmaku", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--transcode-rounds", type=int, default=5)
    parser.add_argument("--clip-s", type=float, default=20)
    parser.add_argument(
        "--role", choices=["bench", "poster"], default="bench", help=argparse.SUPPRESS
    )
    parser.add_argument("--spec", default="{}", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.role == "poster":
        asyncio.run(poster(json.loads(parsed.spec)))
    else:
        asyncio.run(main(parsed))
