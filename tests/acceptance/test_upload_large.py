"""A 50 MiB video uploaded in 5 MiB parts through presigned URLs to a real ``aigc-hub api``
process (with ``aigc-hub relay`` and ``aigc-hub worker --group generation-media`` beside it),
on local blobs and on S3 (SeaweedFS): one part's connection drops mid-body and that part
alone is re-sent on a fresh URL; the asset ends READY, probed as the video it is. On S3 the
bytes never reach the API: its peak RSS (``VmHWM``) barely moves while 50 MiB go by."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aigc_hub import tenancy
from aigc_hub.blobs.s3 import S3BlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate
from aigc_hub.testing.seaweed import S3Endpoint
from tests.support import uploads
from tests.support.provider import free_port, require_ffmpeg
from tests.support.uploads import MiB

pytestmark = [pytest.mark.ffmpeg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SIZE = 50 * MiB
BUCKET = "aigc-hub-uploads"
#: How much the API's peak RSS may grow while 50 MiB go by it on S3.
RSS_BUDGET = 8 * MiB


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real H.264 MP4 of exactly 50 MiB (a short clip and a large ``free`` box)."""
    require_ffmpeg()
    return uploads.make_video(tmp_path_factory.mktemp("video") / "big.mp4", SIZE)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_ffmpeg()
    return uploads.make_video(tmp_path_factory.mktemp("small") / "small.mp4")


@pytest.fixture(scope="module")
def s3(seaweed: S3Endpoint) -> S3Endpoint:
    """The session's SeaweedFS with this test's bucket."""
    store = S3BlobStore(
        BUCKET,
        endpoint=seaweed.endpoint,
        access_key=seaweed.access_key,
        secret_key=seaweed.secret_key,
    )
    asyncio.run(store.ensure_bucket())
    return seaweed


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def _api_key(url: str) -> str:
    hub = Hub(HubConfig(engine=store_engine.create_engine(url), broker=MemoryBroker()))
    try:
        _tenant, key = await tenancy.create_tenant(hub.engine, "uploader")
    finally:
        await hub.close()
    return key


@contextlib.contextmanager
def _hub_processes(data: Path, port: int, blob_env: dict[str, str]) -> Iterator[int]:
    """``aigc-hub api``, ``relay`` and ``worker --group generation-media`` on one data dir;
    yields the API's pid once it answers /readyz; Ctrl-C (SIGINT) stops each."""
    env = {
        **os.environ,
        "AIGC_HUB_DATA_DIR": str(data),
        "AIGC_HUB_PIPELINES": "generation",
        "AIGC_HUB_GEN_RUN_LOCAL_PROVIDER": "false",
        "AIGC_HUB_API_RATE_PER_S": "1000",
        "AIGC_HUB_API_BURST": "1000",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT / "src"),
        **blob_env,
    }
    commands = {
        "api": ["api", "--port", str(port)],
        "relay": ["relay"],
        "worker": ["worker", "--group", "generation-media"],
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "aigc_hub", *args],
            cwd=data,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, args in commands.items()
    }
    try:
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline and procs["api"].poll() is None:
            with contextlib.suppress(httpx.TransportError):
                url = f"http://127.0.0.1:{port}/readyz"
                ready = httpx.get(url, timeout=2, trust_env=False).is_success
            time.sleep(0 if ready else 0.2)
        assert ready, "aigc-hub api never became ready"
        yield procs["api"].pid
    finally:
        outputs = {}
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for name, proc in procs.items():
            try:
                outputs[name], _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                outputs[name], _ = proc.communicate(timeout=10)
        failed = {n: o for n, o in outputs.items() if procs[n].returncode not in (0, 130)}
        assert not failed, {n: (procs[n].returncode, o[-3000:]) for n, o in failed.items()}


async def _upload_50(
    base: str, key: str, video: Path, small: Path, pid: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base, headers=headers, trust_env=False, timeout=60
    ) as api:
        # warm-up: every route once, so what is measured next is the upload alone; a create
        # (402: no credits) waits for the prompt review's model, which the API loads at start
        warm = await uploads.upload(api, small)
        await uploads.complete(api, warm)
        assert (await uploads.settled(api, warm.asset_id))["status"] == "READY"
        create = await api.post(
            "/v1/generation-tasks",
            json={"model": "local-v1", "prompt": "a boat", "duration_s": 1, "resolution": "160x90"},
            headers={"Idempotency-Key": "warm-up"},
        )
        assert create.status_code == 402, create.text
        before = _peak_rss(pid)
        done = await uploads.upload(api, video, part_size=5 * MiB, parallel=4, fail_part=3)
        completed = await uploads.complete(api, done)
        assert completed.status_code == 200, completed.text
        asset = await uploads.settled(api, done.asset_id, timeout_s=180)
        after = _peak_rss(pid)
        grant = (await api.post(f"/v1/assets/{done.asset_id}/playback")).json()
        # the same small clip declared with another sha256: refused where the store's bytes
        # are checked (at complete on local blobs, by the probe worker on S3)
        lying = await uploads.upload(api, small, sha256="0" * 64)
        await uploads.complete(api, lying)
        refused = await uploads.settled(api, lying.asset_id)
    facts = {"parts": len(done.etags), "resent": done.resent, "rss_growth": after - before}
    facts["wrong_checksum"] = (refused["status"], refused["status_reason"])
    return asset | {"playback": grant}, facts


@pytest.mark.parametrize("engine", ["local", "s3"])
def test_50_mib_upload_in_5_mib_parts_with_a_part_resent_ends_ready(
    engine: str, tmp_path: Path, video: Path, small: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "var"
    data.mkdir()
    url = f"sqlite:///{data / 'hub.db'}"
    migrate.upgrade(url)
    key = asyncio.run(_api_key(url))
    blob_env: dict[str, str] = {}
    if engine == "s3":
        endpoint: S3Endpoint = request.getfixturevalue("s3")
        blob_env = {
            "AIGC_HUB_BLOB_URL": f"s3://{BUCKET}",
            "AIGC_HUB_S3_ENDPOINT": endpoint.endpoint,
            "AIGC_HUB_S3_ACCESS_KEY": endpoint.access_key,
            "AIGC_HUB_S3_SECRET_KEY": endpoint.secret_key,
        }
    port = free_port()
    with _hub_processes(data, port, blob_env) as pid:
        asset, facts = asyncio.run(_upload_50(f"http://127.0.0.1:{port}", key, video, small, pid))
    assert facts["parts"] == 10 and facts["resent"] == [3]
    assert facts["wrong_checksum"] == ("REJECTED", "checksum_mismatch")
    assert asset["status"] == "READY", asset
    assert asset["size_bytes"] == SIZE and asset["sha256"] == uploads.sha256_of(video)
    assert (asset["codec"], asset["width"], asset["height"]) == ("h264", 320, 180)
    assert asset["content_type"] == "video/mp4"
    if engine == "s3":
        assert asset["playback"]["url"].startswith(blob_env["AIGC_HUB_S3_ENDPOINT"])
        # the bytes went to S3, not through the API
        assert facts["rss_growth"] < RSS_BUDGET, facts
    else:
        assert asset["playback"]["url"].startswith(f"http://127.0.0.1:{port}/blobs/")
    print(f"{engine}: API peak RSS grew {facts['rss_growth'] / MiB:.1f} MiB during the upload")
