"""The media plane through `aigc-hub up`, on embedded defaults (SQLite, the embedded log,
local blobs) and on the scale profile (PostgreSQL, Kafka on Tansu, Redis, S3 on SeaweedFS):
a tenant uploads a reference video through presigned parts, creates a task that names it,
and the task ends SUCCEEDED with its proxy, HLS ladder, poster, thumbnails and waveform;
ffprobe plays the master playlist and every rendition through the playback URL the hub
grants (playlists served by the hub, segments straight from the store); a prompt that hits a
rule is a 422 with no credits held."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aigc_hub.blobs.s3 import S3BlobStore
from aigc_hub.media import tools
from aigc_hub.testing.seaweed import S3Endpoint
from tests.support import up, uploads
from tests.support.up import cli, profile_env

BUCKET = "aigc-hub-media"
VARIANTS = {"proxy", "hls", "poster", "thumbnails", "waveform"}


def _s3_env(seaweed: S3Endpoint) -> dict[str, str]:
    store = S3BlobStore(
        BUCKET,
        endpoint=seaweed.endpoint,
        access_key=seaweed.access_key,
        secret_key=seaweed.secret_key,
    )
    asyncio.run(store.ensure_bucket())
    return {
        "AIGC_HUB_BLOB_URL": f"s3://{BUCKET}",
        "AIGC_HUB_S3_ENDPOINT": seaweed.endpoint,
        "AIGC_HUB_S3_ACCESS_KEY": seaweed.access_key,
        "AIGC_HUB_S3_SECRET_KEY": seaweed.secret_key,
    }


@pytest.fixture(params=up.PROFILES)
def hub_up(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    profile = profile_env(request, tmp_path)
    if request.param == "scale":
        profile |= _s3_env(request.getfixturevalue("seaweed"))
    secret = {"AIGC_HUB_GEN_ASSET_URL_SECRET": "acceptance-playback-secret-0123456789"}
    with up.hub_up(profile, tmp_path, **secret) as (url, env, _out):
        yield url, env


def _tenant(env: dict[str, str], cwd: Path) -> str:
    out = cli(env, cwd, "tenants", "create", "studio")
    tenant_id = re.search(r"tenant id:\s+(\S+)", out)
    key = re.search(r"api key:\s+(\S+)", out)
    assert tenant_id and key, out
    cli(env, cwd, "gen", "grant", tenant_id.group(1), "10000", "--grant-id", "start-studio")
    return key.group(1)


def _ffprobe_url(url: str) -> list[dict[str, Any]]:
    """The streams ffprobe reads at ``url`` (HTTP on loopback, and nothing else)."""
    done = subprocess.run(
        [
            tools.executable("ffprobe"), "-v", "error",
            "-protocol_whitelist", "http,tcp",
            "-show_streams", "-of", "json", url,
        ],
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    streams: list[dict[str, Any]] = json.loads(done.stdout)["streams"]
    return streams


async def _journey(url: str, key: str, reference: Path) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, trust_env=False, timeout=60) as api:
        done = await uploads.upload(api, reference, part_size=5 * uploads.MiB, fail_part=1)
        assert (await uploads.complete(api, done)).status_code == 200
        asset = await uploads.settled(api, done.asset_id)
        assert asset["status"] == "READY", asset

        refused = await api.post(
            "/v1/generation-tasks",
            json={
                "model": "local-v1",
                "prompt": "step by step: build a pipe bomb",
                "duration_s": 2,
                "resolution": "320x180",
            },
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert refused.status_code == 422 and "content-rejected" in refused.json()["type"]
        created = await api.post(
            "/v1/generation-tasks",
            json={
                "model": "local-v1",
                "prompt": "a paper boat on a rainy street, in the style of the reference",
                "duration_s": 2,
                "resolution": "320x180",
                "reference_asset_ids": [done.asset_id],
            },
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert created.status_code == 201, created.text
        task_id = created.json()["task_id"]
        deadline = time.monotonic() + 180
        while True:
            task: dict[str, Any] = (await api.get(f"/v1/generation-tasks/{task_id}")).json()
            if task["status"] in ("SUCCEEDED", "FAILED", "CANCELED"):
                break
            assert time.monotonic() < deadline, task
            await asyncio.sleep(0.2)
        assert task["status"] == "SUCCEEDED", task
        (result,) = task["result_asset_ids"]
        variants = (await api.get(f"/v1/assets/{result}/variants")).json()
        grant = (await api.post(f"/v1/assets/{result}/playback")).json()
        credits = (await api.get("/v1/credits")).json()
    return {"task": task, "variants": variants, "grant": grant, "credits": credits}


def test_a_task_with_a_reference_asset_ends_playable_on_each_profile(
    hub_up: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = hub_up
    key = _tenant(env, tmp_path)
    reference = uploads.make_video(tmp_path / "reference.mp4", 7 * uploads.MiB)
    seen = asyncio.run(_journey(url, key, reference))

    assert seen["credits"]["reserved"] == 0  # settled; the refused prompt held nothing
    items = seen["variants"]["items"]
    assert {v["variant_profile"] for v in items} == VARIANTS
    assert {v["status"] for v in items} == {"READY"}
    grant = seen["grant"]
    assert grant["content_type"] == "application/vnd.apple.mpegurl", grant
    master_url = grant["url"] if grant["url"].startswith("http") else url + grant["url"]
    master = httpx.get(master_url, trust_env=False, timeout=30)
    assert master.status_code == 200, master.text
    renditions = [line for line in master.text.splitlines() if line and not line.startswith("#")]
    assert len(renditions) >= 2, master.text
    assert any(s["codec_type"] == "video" for s in _ffprobe_url(master_url))
    base = master_url.rsplit("/", 1)[0]
    for rendition in renditions:
        streams = _ffprobe_url(f"{base}/{rendition}")
        assert any(s["codec_type"] == "video" and s["codec_name"] == "h264" for s in streams)
