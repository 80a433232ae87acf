"""An avcc stack for tests: a started hub (avcc only) behind a real uvicorn API, with the
embedded log chain, a local or S3 blob store, and helpers to make works and apply."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import mimetypes
import random
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from PIL import Image

from aigc_hub.blobs.base import BlobStore
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.cache.base import Cache
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.messaging.base import Broker
from aigc_hub.pipeline import Pipeline
from aigc_hub.pipelines.avcc.chains import make_chain
from aigc_hub.pipelines.avcc.codes import make_code
from aigc_hub.pipelines.avcc.likeness import StoredLikeness
from aigc_hub.pipelines.avcc.models import avcc_records
from aigc_hub.pipelines.avcc.pipeline import pipeline as avcc_pipeline
from aigc_hub.pipelines.avcc.settings import AvccSettings
from aigc_hub.pipelines.avcc.state import STATE, Avcc
from aigc_hub.store import engine as store_engine
from tests.support.served import ServedHub, serve

SETTLED = {"CODED", "REJECTED", "NEED_HUMAN"}


def noise_png(seed: int, size: int = 48) -> bytes:
    """A PNG of seeded noise: unrelated to every other seed's (perceptual hashes ~64 apart)."""
    rng = random.Random(seed)
    picture = Image.frombytes("L", (size, size), bytes(rng.randrange(256) for _ in range(size**2)))
    out = io.BytesIO()
    picture.convert("RGB").save(out, "PNG")
    return out.getvalue()


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass
class AvccStack(ServedHub):
    hub: Hub
    api_url: str
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start_group(self, group: str, concurrency: int | None = None) -> None:
        """Run consumer group ``group`` (one the stack was started without) until it stops;
        a stream group runs as one member (``concurrency`` is a handler group's option)."""
        streams = [s for s in self.hub.stream_specs if s.group == group]
        if streams:
            runtime = self.hub.stream_runtime(streams[0])
            self.tasks.append(asyncio.create_task(runtime.run(self.stop)))
            return
        [spec] = [s for s in self.hub.handler_specs if s.group == group]
        options = {} if concurrency is None else {"concurrency": concurrency}
        runtime = self.hub.runtime(spec, **options)
        self.tasks.append(asyncio.create_task(runtime.run(self.stop)))

    @property
    def avcc(self) -> Avcc:
        return self.hub.state_of(STATE)

    async def records(self) -> list[dict[str, Any]]:
        async with self.hub.engine.connect() as conn:
            rows = (await conn.execute(sa.select(avcc_records))).mappings().all()
        return [dict(r) for r in rows]


async def upload(client: httpx.AsyncClient, data: bytes, filename: str = "work.png") -> str:
    """Put a work into the store as a tenant does: a signed upload from the API, then the PUT
    straight to the store; its content_url."""
    content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    body = {
        "filename": filename,
        "content_type": content_type,
        "size_bytes": len(data),
        "content_hash": sha(data),
    }
    answer = await client.post("/v1/avcc/works", json=body)
    assert answer.status_code == 201, answer.text
    upload = answer.json()["upload"]
    async with httpx.AsyncClient(base_url=str(client.base_url), trust_env=False) as anyone:
        put = await anyone.put(upload["url"], content=data, headers=upload["headers"])
    assert put.status_code in (200, 201, 204), put.text
    url: str = answer.json()["content_url"]
    return url


async def apply(
    client: httpx.AsyncClient,
    data: bytes,
    *,
    filename: str = "work.png",
    model_name: str = "Stable-Diffusion-XL",
    content_hash: str | None = None,
    key: str | None = None,
) -> httpx.Response:
    """Upload ``data`` and apply for its code; the application's answer."""
    url = await upload(client, data, filename)
    body = {
        "content_url": url,
        "content_hash": content_hash or sha(data),
        "ai_tool_info": {"model_name": model_name, "model_version": "v1.0"},
        "priority": 5,
    }
    return await client.post(
        "/v1/avcc/applications", json=body, headers={"Idempotency-Key": key or str(uuid.uuid4())}
    )


async def wait_settled(
    client: httpx.AsyncClient, record_ids: Sequence[int], timeout_s: float = 120
) -> dict[int, dict[str, Any]]:
    """Poll each application until it is coded, rejected or waits for a reviewer."""
    done: dict[int, dict[str, Any]] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(done) < len(record_ids):
        for record_id in record_ids:
            if record_id not in done:
                snap = (await client.get(f"/v1/avcc/applications/{record_id}")).json()
                if snap["status"] in SETTLED:
                    done[record_id] = snap
        if loop.time() > deadline:
            raise TimeoutError(f"not settled: {sorted(set(record_ids) - set(done))}")
        await asyncio.sleep(0.1)
    return done


async def wait_status(
    client: httpx.AsyncClient, record_id: int, status: str, timeout_s: float = 60
) -> dict[str, Any]:
    """Poll the application until it reaches ``status``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        snap: dict[str, Any] = (await client.get(f"/v1/avcc/applications/{record_id}")).json()
        if snap["status"] == status:
            return snap
        if loop.time() > deadline:
            raise TimeoutError(f"application {record_id} is {snap['status']}, not {status}")
        await asyncio.sleep(0.1)


def avcc_pipeline_in(tmp_path: Path, **settings: Any) -> Pipeline[Avcc]:
    """avcc whose state keeps its keys under ``tmp_path`` (the log's key, the C2PA CA), for a
    hub a test starts itself (the browser tests' console server)."""
    values: dict[str, Any] = {"log_key_path": str(tmp_path / "log-key.pem")} | settings
    avcc_settings = AvccSettings(**values)

    def build(hub: Hub, _settings: object) -> Avcc:
        chain = make_chain(hub, avcc_settings, tmp_path)
        return Avcc(hub, avcc_settings, chain, StoredLikeness(hub.engine), tmp_path)

    return avcc_pipeline.with_state(build)


@contextlib.asynccontextmanager
async def avcc_stack(
    db_url: str,
    broker: Broker,
    tmp_path: Path,
    *,
    blobs: BlobStore | None = None,
    cache: Cache | None = None,
    failpoints: Failpoints | None = None,
    groups: Sequence[str] | None = None,
    scan: bool = True,
    lag: bool = False,
    hub_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[AvccStack]:
    """A started hub running avcc (every consumer group, or those in ``groups``; the scanners
    unless ``scan`` is False; the lag monitor when ``lag``), its API served on loopback, until
    the block ends. ``hub_options`` are more ``HubConfig`` fields (a clock, retry policies,
    the lag monitor's interval); ``settings`` are ``AvccSettings`` fields."""
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        broker=broker,
        blobs=blobs or LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret"),
        cache=cache,
        failpoints=failpoints or Failpoints(),
        **(hub_options or {}),
    )
    hub = Hub(config, [avcc_pipeline_in(tmp_path, **settings)])
    await hub.start()
    stop = asyncio.Event()
    stack = AvccStack(hub, "", stop)
    stack.tasks.append(asyncio.create_task(hub.run(stop, groups, scan=scan, lag=lag)))
    try:
        app = create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000))
        async with serve(app) as url:
            stack.api_url = url
            yield stack
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*stack.tasks, return_exceptions=True), 30)
        await hub.close()


async def coded_work(hub: Hub, tenant_id: str, *, node: str = "8361") -> str:
    """A work of ``tenant_id`` recorded as CODED, for tests of what comes after the code
    (playback, settlement): its row as code-svc leaves it, without a review or a chain."""
    now = 1_700_000_000_000
    marker = uuid.uuid4().hex
    async with hub.engine.begin() as conn:
        record_id = int(
            (
                await conn.execute(
                    avcc_records.insert().returning(avcc_records.c.id),
                    {
                        "request_id": f"req_test_{marker}",
                        "tenant_id": tenant_id,
                        "idempotency_key": marker,
                        "content_url": f"blob:works/{marker}",
                        "object_key": f"works/{marker}",
                        "content_hash": "sha256:" + hashlib.sha256(marker.encode()).hexdigest(),
                        "content_type": "image/png",
                        "size_bytes": 1,
                        "model_name": "Stable-Diffusion-XL",
                        "model_version": "v1.0",
                        "priority": 5,
                        "status": "CODED",
                        "status_version": 5,
                        "final_level": "G",
                        "created_at": now,
                        "updated_at": now,
                    },
                )
            ).scalar_one()
        )
        code = make_code("156", "10005", node, record_id)
        await conn.execute(
            avcc_records.update()
            .where(avcc_records.c.id == record_id)
            .values(avcc_code=code, issued_at=now)
        )
    return code
