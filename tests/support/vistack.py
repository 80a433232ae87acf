"""A vistack stack for tests: a started hub (vistack only) behind a real uvicorn API, its
consumer groups (and scanners, when asked) running until the block ends; and what the
tests do with it: make a clip with FFmpeg, upload it as a user would, wait for videos."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx

from aigc_hub.blobs.base import BlobStore
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.cache.base import Cache
from aigc_hub.core.clock import Clock
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.media import tools
from aigc_hub.messaging.base import Broker
from aigc_hub.pipeline import Pipeline
from aigc_hub.pipelines.vistack.pipeline import pipeline as vistack_pipeline
from aigc_hub.pipelines.vistack.settings import VistackSettings
from aigc_hub.pipelines.vistack.state import STATE, Vistack
from aigc_hub.pipelines.vistack.transcoder import transcoder_pb2 as pb
from aigc_hub.pipelines.vistack.transcoder.server import start
from aigc_hub.pipelines.vistack.transcoder.service import TranscoderService
from aigc_hub.store import engine as store_engine
from tests.support.served import ServedHub, serve

ENDED = {"published", "failed"}


@dataclass
class VistackStack(ServedHub):
    hub: Hub
    api_url: str
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def vs(self) -> Vistack:
        return self.hub.state_of(STATE)


def vistack_pipeline_in(**settings: Any) -> Pipeline[Vistack]:
    """vistack with ``settings`` (``VistackSettings`` fields)."""
    vistack_settings = VistackSettings(**settings)

    def build(hub: Hub, _settings: object) -> Vistack:
        return Vistack(hub, vistack_settings)

    return vistack_pipeline.with_state(build)


@contextlib.asynccontextmanager
async def vistack_stack(
    db_url: str,
    broker: Broker,
    tmp_path: Path,
    *,
    blobs: BlobStore | None = None,
    cache: Cache | None = None,
    clock: Clock | None = None,
    failpoints: Failpoints | None = None,
    groups: Sequence[str] | None = None,
    scan: bool = False,
    hub_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[VistackStack]:
    """A started hub running vistack (every group, or ``groups``; its scanners when
    ``scan``), its API on loopback."""
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        broker=broker,
        blobs=blobs or LocalBlobStore(tmp_path / "blobs", secret=BLOB_SECRET.encode()),
        cache=cache,
        clock=clock,
        failpoints=failpoints or Failpoints(),
        **(hub_options or {}),
    )
    hub = Hub(config, [vistack_pipeline_in(**settings)])
    await hub.start()
    stop = asyncio.Event()
    stack = VistackStack(hub, "", stop)
    stack.tasks.append(asyncio.create_task(hub.run(stop, groups, scan=scan)))
    try:
        app = create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000))
        async with serve(app) as url:
            stack.api_url = url
            yield stack
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*stack.tasks, return_exceptions=True), 30)
        await hub.close()


def make_clip(
    path: Path, *, seconds: float = 2.0, size: str = "320x240", rate: int = 25, seed: int = 0
) -> Path:
    """An H.264/AAC MP4 of ``seconds`` made by FFmpeg (a test pattern and a tone; ``seed``
    shifts the pattern so clips differ)."""
    subprocess.run(
        [
            tools.executable("ffmpeg"),
            *("-nostdin", "-hide_banner", "-v", "error", "-y"),
            *("-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={seconds}"),
            *("-f", "lavfi", "-i", f"sine=frequency={440 + seed}:duration={seconds}"),
            *("-vf", f"hue=h={seed * 37 % 360}", "-c:v", "libx264", "-preset", "ultrafast"),
            *("-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)),
        ],
        check=True,
        timeout=120,
    )
    return path


async def send_upload(
    client: httpx.AsyncClient, data: bytes, *, part_size: int | None = None
) -> dict[str, Any]:
    """Open an upload session for ``data`` and PUT its parts (straight to the store, each on
    its signed URL); the session's id, part size and the parts' ETags. Not completed."""
    body: dict[str, Any] = {"size_bytes": len(data)}
    if part_size is not None:
        body["part_size"] = part_size
    started = await client.post("/v1/vistack/uploads", json=body)
    assert started.status_code == 201, started.text
    plan = started.json()["upload"]
    size = plan["part_size"]
    etags = []
    for part in plan["parts"]:
        n = part["part_no"]
        put = await client.put(
            part["url"], content=data[(n - 1) * size : n * size], headers=part["headers"]
        )
        assert put.status_code < 300, put.text
        etags.append({"part_no": n, "etag": put.headers["etag"].strip('"')})
    return {"upload_id": started.json()["upload_id"], "part_size": size, "parts": etags}


async def upload_video(
    client: httpx.AsyncClient, clip: Path, title: str, **body: Any
) -> dict[str, Any]:
    """Upload ``clip`` as a user does (an upload session straight to the store, completed),
    create the video."""
    data = await asyncio.to_thread(clip.read_bytes)
    sent = await send_upload(client, data)
    upload_id = sent["upload_id"]
    done = await client.post(
        f"/v1/vistack/uploads/{upload_id}/complete", json={"parts": sent["parts"]}
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "uploaded", done.text
    answer = await client.post(
        "/v1/vistack/videos",
        json={"upload_id": upload_id, "title": title, **body},
        headers={"Idempotency-Key": f"video-{upload_id}"},
    )
    assert answer.status_code == 202, answer.text
    video: dict[str, Any] = answer.json()
    return video


async def wait_videos(
    client: httpx.AsyncClient, video_ids: Sequence[str], timeout_s: float = 180
) -> dict[str, dict[str, Any]]:
    """Poll the videos (one at a time, in order) until each has ended; their snapshots."""
    deadline = time.monotonic() + timeout_s
    ended: dict[str, dict[str, Any]] = {}
    for video_id in video_ids:
        while True:
            answer = await client.get(f"/v1/vistack/videos/{video_id}")
            answer.raise_for_status()
            last = answer.json()
            if last["status"] in ENDED:
                ended[video_id] = last
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(video_ids) - len(ended)} videos running, e.g. {last}")
            await asyncio.sleep(0.1)
    return ended


def worker_env(
    db_url: str, tmp_path: Path, blobs: Path, blob_secret: str, **vistack: object
) -> dict[str, str]:
    """The environment of an ``aigc-hub worker`` process of this test: its database, the
    test's local blob store, vistack only, and ``vistack`` settings (``AIGC_HUB_VISTACK_*``)."""
    import os

    from tests.support.workers import ROOT

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT)])),
        "AIGC_HUB_DATABASE_URL": db_url,
        "AIGC_HUB_DATA_DIR": str(tmp_path / "worker"),
        "AIGC_HUB_PIPELINES": "vistack",
        "AIGC_HUB_BLOB_URL": f"file://{blobs}",
        "AIGC_HUB_BLOB_SIGNING_KEY": blob_secret,
    }
    env |= {f"AIGC_HUB_VISTACK_{k.upper()}": str(v) for k, v in vistack.items()}
    return env


def process_state(pid: int) -> str:
    """The kernel's one-letter state of process ``pid`` (``T``: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


class CallCounter(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts ProcessVideo calls and, while ``broken``, answers each UNAVAILABLE: a
    transcoder that is down for its callers (the real service stays behind it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.broken = False

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if not details.method.endswith("/ProcessVideo"):
            return await continuation(details)
        self.calls += 1
        if not self.broken:
            return await continuation(details)

        async def unavailable(request: Any, context: Any) -> AsyncIterator[Any]:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "transcoder down (test)")
            yield  # pragma: no cover - abort raises

        return grpc.unary_stream_rpc_method_handler(
            unavailable, request_deserializer=pb.ProcessVideoRequest.FromString
        )


@dataclass
class TestTranscoder:
    """A transcoder served in the test's process over loopback gRPC, on a blob store."""

    address: str
    store: BlobStore
    counter: CallCounter
    blob_root: Path
    blob_secret: str

    @property
    def calls(self) -> int:
        return self.counter.calls

    @property
    def broken(self) -> bool:
        return self.counter.broken

    @broken.setter
    def broken(self, value: bool) -> None:
        self.counter.broken = value


BLOB_SECRET = "test-blob-secret"


@contextlib.asynccontextmanager
async def running_transcoder(
    tmp_path: Path, *, store: BlobStore | None = None, broken: bool = False, concurrency: int = 2
) -> AsyncIterator[TestTranscoder]:
    """The real transcoder service on 127.0.0.1 (a free port) over ``store`` (default: local
    files under ``tmp_path/blobs``, which a test's hub and worker processes open too)."""
    blob_root = tmp_path / "blobs"
    store = store or LocalBlobStore(blob_root, secret=BLOB_SECRET.encode())
    counter = CallCounter()
    counter.broken = broken
    service = TranscoderService(store, concurrency=concurrency, scratch_root=tmp_path)
    running = await start(service, "127.0.0.1:0", (counter,))
    try:
        yield TestTranscoder(running.address, store, counter, blob_root, BLOB_SECRET)
    finally:
        await running.stop(1.0)
        await store.close()


async def published_video(hub: Hub, tenant_id: str, title: str = "watched") -> str:
    """A published video row (no files: for what hangs off a video, danmaku and comments)."""
    from aigc_hub.core.ids import new_id
    from aigc_hub.pipelines.vistack import events, services
    from aigc_hub.pipelines.vistack.models import vistack_videos

    message = events.TranscodeV2(
        videoId=f"vid_{new_id().hex}",
        tenantId=tenant_id,
        sourceKey=services.source_key(tenant_id, f"upl_{new_id().hex}"),
    )
    row = services.new_video_row(
        message, owner_id="owner", title=title, size=1, now=hub.clock.now_ms()
    )
    row |= {"status": "published", "status_version": 3, "duration_ms": 60_000}
    async with hub.transaction() as conn:
        await conn.execute(vistack_videos.insert(), row)
    return message.videoId


async def video_row(hub: Hub, video_id: str) -> dict[str, Any]:
    """The video's row as stored."""
    import sqlalchemy as sa

    from aigc_hub.pipelines.vistack.models import vistack_videos

    async with hub.engine.connect() as conn:
        row = (
            (await conn.execute(sa.select(vistack_videos).where(vistack_videos.c.id == video_id)))
            .mappings()
            .one()
        )
    return dict(row)


async def video_moves(hub: Hub, video_id: str) -> list[str]:
    """The statuses the video moved to, in order (its history)."""
    import sqlalchemy as sa

    from aigc_hub.pipelines.vistack.models import vistack_video_events as t

    async with hub.engine.connect() as conn:
        found = await conn.execute(
            sa.select(t.c.to_status).where(t.c.video_id == video_id).order_by(t.c.id)
        )
        return list(found.scalars().all())


async def handled(hub: Hub, event_id: str) -> bool:
    """Whether a consumer group marked ``event_id`` handled in its inbox."""
    import sqlalchemy as sa

    from aigc_hub.store.tables import inbox

    async with hub.engine.connect() as conn:
        count = await conn.scalar(
            sa.select(sa.func.count()).select_from(inbox).where(inbox.c.event_id == event_id)
        )
    return bool(count)
