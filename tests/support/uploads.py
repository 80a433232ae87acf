"""The client side of direct uploads, as a tenant's program does it: start, PUT the parts to
their presigned URLs (some in parallel), re-send a failed part alone, complete; plus a real
video of a chosen size made with FFmpeg, and a connection dropped in the middle of a body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from aigc_hub import tenancy
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import ManualClock
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.media import tools
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, Generation, build
from aigc_hub.store import engine as store_engine
from aigc_hub.testing import FakeProvider
from tests.support import served

MiB = 1 << 20


def make_video(dest: Path, size: int | None = None, *, seconds: int = 2) -> Path:
    """A small H.264 MP4 made by FFmpeg, grown to exactly ``size`` bytes by a top-level
    ``free`` box appended at its end (demuxers skip it, so it still probes as the video)."""
    subprocess.run(
        [
            tools.executable("ffmpeg"), "-v", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc2=size=320x180:rate=25:duration={seconds}",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-movflags", "+faststart", str(dest),
        ],
        check=True,
        timeout=120,
    )  # fmt: skip
    if size is not None:
        pad = size - dest.stat().st_size
        assert pad >= 8, f"the clip is already {dest.stat().st_size} bytes"
        with dest.open("ab") as f:
            f.write(struct.pack(">I4s", pad, b"free"))
            left = pad - 8
            while left > 0:
                step = min(left, 4 * MiB)
                f.write(os.urandom(step))
                left -= step
    return dest


def size_of(path: Path) -> int:
    return path.stat().st_size


def read(path: Path) -> bytes:
    """A small file's bytes (blocking: for test files of kilobytes)."""
    return path.read_bytes()


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative POSIX name."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


def part_bytes(path: Path, part_no: int, part_size: int) -> bytes:
    with path.open("rb") as f:
        f.seek((part_no - 1) * part_size)
        return f.read(part_size)


def drop_mid_body(url: str, headers: dict[str, str], body: bytes) -> None:
    """Send a PUT announcing all of ``body`` but only half of it, then close the connection
    (a client that died mid-part). Loopback only."""
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1", url
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"PUT {target} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body[: len(body) // 2])
        sock.shutdown(socket.SHUT_RDWR)


@dataclass
class Upload:
    """What one upload did: the asset, its parts' ETags, and what was sent twice."""

    asset_id: str
    part_size: int
    etags: dict[int, str] = field(default_factory=dict)
    resent: list[int] = field(default_factory=list)
    seconds: float = 0.0


async def put_part(http: httpx.AsyncClient, part: dict[str, Any], data: bytes) -> str:
    """PUT one part to its presigned URL; its ETag (unquoted)."""
    answer = await http.put(part["url"], content=data, headers=part["headers"])
    answer.raise_for_status()
    return str(answer.headers["etag"]).strip('"')


async def upload(
    api: httpx.AsyncClient,
    path: Path,
    *,
    part_size: int = 5 * MiB,
    parallel: int = 4,
    fail_part: int | None = None,
    sha256: str | None = None,
) -> Upload:
    """Start, send every part (``parallel`` at once, each on its presigned URL, bytes read
    from the file per part), and, when ``fail_part`` is given, first drop that part's
    connection mid-body, then ask fresh URLs for it alone and re-send it. Not completed."""
    size = size_of(path)
    started = await api.post(
        "/v1/assets/uploads",
        json={
            "filename": path.name,
            "content_type": "video/mp4",
            "size_bytes": size,
            "sha256": sha256 or sha256_of(path),
            "part_size": part_size,
        },
    )
    assert started.status_code == 201, started.text
    plan = started.json()
    done = Upload(plan["asset_id"], plan["upload"]["part_size"])
    parts = plan["upload"]["parts"]
    began = time.perf_counter()
    gate = asyncio.Semaphore(parallel)
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:

        async def send(part: dict[str, Any]) -> None:
            async with gate:
                data = await asyncio.to_thread(part_bytes, path, part["part_no"], done.part_size)
                if part["part_no"] == fail_part:
                    await asyncio.to_thread(drop_mid_body, part["url"], part["headers"], data)
                    return
                done.etags[part["part_no"]] = await put_part(http, part, data)

        await asyncio.gather(*(send(p) for p in parts))
        if fail_part is not None:
            assert fail_part not in done.etags
            fresh = await api.post(
                f"/v1/assets/{done.asset_id}/parts", json={"part_nos": [fail_part]}
            )
            assert fresh.status_code == 200, fresh.text
            (part,) = fresh.json()["parts"]
            data = part_bytes(path, fail_part, done.part_size)
            done.etags[fail_part] = await put_part(http, part, data)
            done.resent.append(fail_part)
    done.seconds = time.perf_counter() - began
    return done


async def complete(api: httpx.AsyncClient, done: Upload) -> httpx.Response:
    parts = [{"part_no": n, "etag": e} for n, e in sorted(done.etags.items())]
    return await api.post(f"/v1/assets/{done.asset_id}/complete", json={"parts": parts})


async def settled(api: httpx.AsyncClient, asset_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The asset once it left UPLOADING/PROCESSING (polled, bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = await api.get(f"/v1/assets/{asset_id}")
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        if found["status"] not in ("UPLOADING", "PROCESSING"):
            return found
        assert time.monotonic() < deadline, f"asset still {found['status']} after {timeout_s}s"
        await asyncio.sleep(0.05)


@dataclass
class AssetStack:
    """A hub with the generation pipeline (fake provider, real probe), its API served on
    loopback and the ``generation-media`` group running."""

    hub: Hub
    api_url: str
    store: LocalBlobStore

    @property
    def gen(self) -> Generation:
        return self.hub.state_of(STATE)

    async def tenant(self, name: str, credits: int = 10_000) -> str:
        tenant, key = await tenancy.create_tenant(self.hub.engine, name)
        if credits:
            await services.grant_credits(
                self.hub, tenant_id=tenant.id, amount=credits, grant_id=f"start-{tenant.id}"
            )
        return key

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {key}"},
            trust_env=False,
            timeout=30.0,
        )


@contextlib.asynccontextmanager
async def asset_stack(
    db_url: str,
    tmp_path: Path,
    *,
    clock: ManualClock | None = None,
    groups: Sequence[str] = ("generation-media",),
    **settings: Any,
) -> AsyncIterator[AssetStack]:
    """The stack on ``db_url`` with a local blob store under ``tmp_path`` (its URLs judged by
    ``clock`` when given, so a test can make them expire), these generation settings, and
    the consumer ``groups`` running."""
    store = LocalBlobStore(tmp_path / "blobs", secret=b"asset-test-secret", clock=clock)
    config = HubConfig(
        engine=store_engine.create_engine(db_url), broker=MemoryBroker(), blobs=store
    )
    values = {"providers": "local", "callback_base_url": "http://127.0.0.1:9"} | settings
    fake = FakeProvider()
    pipeline = generation.with_state(
        lambda hub, _s: build(hub, GenerationSettings(**values), adapters=[fake])
    )
    hub = Hub(config, [pipeline])
    await hub.start()
    stop = asyncio.Event()
    running = asyncio.create_task(hub.run(stop, groups=list(groups)))
    try:
        app = create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000))
        async with served.serve(app) as url:
            yield AssetStack(hub, url, store)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await hub.close()
