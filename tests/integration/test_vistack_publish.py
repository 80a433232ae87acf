"""Thirty uploaded videos, on embedded defaults and on PostgreSQL + Kafka (Tansu) + Redis +
S3 (SeaweedFS): each is published with a DASH manifest FFprobe reads (two video renditions
and the audio), every file the manifest names is served through the signed playback URL,
the cover is a JPEG, and the transcoder counted one ProcessVideo per video. And a v1
``transcode`` message beside v2 ones: read with the default ladder."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub.cache.redis import RedisCache
from aigc_hub.core.ids import new_id
from aigc_hub.media import tools
from aigc_hub.media.mpd import manifest_files
from aigc_hub.pipelines.vistack import events, services
from aigc_hub.pipelines.vistack.models import vistack_videos
from tests.support.hubs import make_broker
from tests.support.redis_dbs import private_redis_url
from tests.support.sse import FrameReader
from tests.support.vistack import (
    VistackStack,
    make_clip,
    running_transcoder,
    send_upload,
    upload_video,
    vistack_stack,
    wait_videos,
)

VIDEOS = 30


@contextlib.asynccontextmanager
async def profile_stack(
    profile: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[VistackStack, Any]]:
    if profile == "embedded":
        async with (
            running_transcoder(tmp_path) as transcoder,
            vistack_stack(
                request.getfixturevalue("sqlite_url"),
                make_broker("embedded", tmp_path),
                tmp_path,
                blobs=transcoder.store,
                transcoder_address=transcoder.address,
            ) as stack,
        ):
            yield stack, transcoder
        return
    from aigc_hub.blobs.s3 import S3BlobStore

    seaweed = request.getfixturevalue("seaweed")
    kafka = request.getfixturevalue("kafka_endpoint")

    def s3() -> S3BlobStore:
        return S3BlobStore(
            "vistack-videos",
            endpoint=seaweed.endpoint,
            access_key=seaweed.access_key,
            secret_key=seaweed.secret_key,
        )

    store = s3()
    await store.ensure_bucket()
    async with (
        running_transcoder(tmp_path, store=s3()) as transcoder,
        vistack_stack(
            request.getfixturevalue("pg_url"),
            kafka.broker(),
            tmp_path,
            blobs=store,
            cache=RedisCache.from_url(private_redis_url("scale-hub")),
            transcoder_address=transcoder.address,
        ) as stack,
    ):
        yield stack, transcoder


async def _fetch_dash(client: httpx.AsyncClient, manifest_url: str, into: Path) -> list[str]:
    """The manifest and every file it names, through the playback URL, into ``into``."""
    manifest = await client.get(manifest_url)
    assert manifest.status_code == 200, manifest.text
    assert manifest.headers["content-type"].startswith("application/dash+xml")
    files = {"manifest.mpd": manifest.content}
    names = manifest_files(manifest.text)
    base = manifest_url.rsplit("/", 1)[0]
    for name in names:
        answer = await client.get(f"{base}/{name}", follow_redirects=True)
        assert answer.status_code == 200, (name, answer.status_code)
        assert answer.content, name
        files[name] = answer.content
    await asyncio.to_thread(_write, into, files)
    return names


def _write(into: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_bytes(data)


def _streams(mpd: Path) -> list[dict[str, Any]]:
    probed = subprocess.run(
        [tools.executable("ffprobe"), "-v", "error", "-show_streams", "-of", "json", mpd.name],
        cwd=mpd.parent,
        capture_output=True,
        check=True,
        timeout=60,
    )
    streams: list[dict[str, Any]] = json.loads(probed.stdout)["streams"]
    return streams


@pytest.mark.parametrize(
    "profile",
    [
        "embedded",
        pytest.param(
            "scale",
            marks=[pytest.mark.postgres, pytest.mark.kafka, pytest.mark.redis],
        ),
    ],
)
async def test_thirty_uploaded_videos_are_published_with_a_valid_dash_manifest_and_cover(
    profile: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    clips = [make_clip(tmp_path / f"clip-{i}.mp4", seconds=1.0, seed=i) for i in range(VIDEOS)]
    async with profile_stack(profile, tmp_path, request) as (stack, transcoder):
        key = await stack.tenant("site")
        async with stack.client(key) as client:
            gate = asyncio.Semaphore(6)

            async def one(i: int) -> str:
                async with gate:
                    video = await upload_video(client, clips[i], f"clip {i}")
                    assert video["status"] == "pending"
                    return str(video["video_id"])

            ids = await asyncio.gather(*(one(i) for i in range(VIDEOS)))
            ended = await wait_videos(client, ids, timeout_s=600)
            assert {v["status"] for v in ended.values()} == {"published"}, [
                v for v in ended.values() if v["status"] != "published"
            ]
            for n, video_id in enumerate(ids):
                video = ended[video_id]
                assert 900 <= video["duration_ms"] <= 1200, video
                assert [r["height"] for r in video["renditions"]][:2] == [120, 240] or len(
                    video["renditions"]
                ) >= 2, video
                names = await _fetch_dash(client, video["manifest_url"], tmp_path / video_id)
                assert any("init" in name for name in names), names
                streams = _streams(tmp_path / video_id / "manifest.mpd")
                kinds = [s["codec_type"] for s in streams]
                assert kinds.count("video") >= 2 and kinds.count("audio") >= 1, (n, kinds)
                cover = await client.get(video["cover_url"], follow_redirects=True)
                assert cover.status_code == 200 and cover.content[:3] == b"\xff\xd8\xff"
        assert transcoder.calls == VIDEOS


async def _tenant(stack: VistackStack, video_id: str) -> str:
    async with stack.hub.engine.connect() as conn:
        found = await conn.scalar(
            sa.select(vistack_videos.c.tenant_id).where(vistack_videos.c.id == video_id)
        )
    return str(found)


async def test_a_v1_transcode_message_is_read_beside_v2_with_the_default_ladder(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=1.0, size="640x480")
    async with (
        running_transcoder(tmp_path) as transcoder,
        vistack_stack(
            sqlite_url,
            make_broker("embedded", tmp_path),
            tmp_path,
            blobs=transcoder.store,
            transcoder_address=transcoder.address,
        ) as stack,
    ):
        key = await stack.tenant("site")
        async with stack.client(key) as client:
            # A v2 message (the API's) with a ladder of its own.
            v2 = await upload_video(client, clip, "v2", heights=[240, 480])
            [v2_done] = (await wait_videos(client, [v2["video_id"]])).values()
            assert [r["height"] for r in v2_done["renditions"]] == [240, 480]
            # A v1 message, as an older producer still sends it: no ladder in it.
            data = await asyncio.to_thread(clip.read_bytes)
            sent = await send_upload(client, data)
            complete = f"/v1/vistack/uploads/{sent['upload_id']}/complete"
            assert (await client.post(complete, json={"parts": sent["parts"]})).status_code == 200
            tenant_id = await _tenant(stack, v2["video_id"])
            old = events.TranscodeV1(
                videoId=f"vid_{new_id().hex}",
                tenantId=tenant_id,
                sourceKey=services.source_key(tenant_id, sent["upload_id"]),
            )
            row = services.new_video_row(
                events.transcode_v2(old),
                owner_id="old-producer",
                title="v1",
                size=len(data),
                now=stack.hub.clock.now_ms(),
            )
            async with stack.hub.transaction() as conn:
                await conn.execute(vistack_videos.insert(), row)
                await stack.hub.outbox.add(conn, [services.transcode_envelope(old)])
            assert services.transcode_envelope(old).schema_version == 1
            [v1_done] = (await wait_videos(client, [old.videoId])).values()
            # The default ladder (360, 720) planned for a 480-line source: 360 and its own.
            assert [r["height"] for r in v1_done["renditions"]] == [360, 480]
        assert transcoder.calls == 2


async def test_the_transcoders_progress_reaches_the_tenants_event_stream(
    sqlite_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=2.0)
    async with (
        running_transcoder(tmp_path) as transcoder,
        vistack_stack(
            sqlite_url,
            make_broker("embedded", tmp_path),
            tmp_path,
            blobs=transcoder.store,
            transcoder_address=transcoder.address,
        ) as stack,
    ):
        key = await stack.tenant("site")
        async with stack.client(key) as client, client.stream("GET", "/v1/events") as events_:
            reader = FrameReader(events_)
            try:
                assert (await reader.next()).comments == ["ready"]
                video_id = (await upload_video(client, clip, "followed"))["video_id"]
                notes: list[dict[str, Any]] = []
                while not notes or notes[-1]["status"] != "published":
                    frame = await reader.next(timeout=60)
                    if frame.event == "notification" and frame.json()["subject_id"] == video_id:
                        notes.append(frame.json())
            finally:
                await reader.aclose()
    progress = [n for n in notes if n["kind"] == "progress"]
    stages = [n["stage"] for n in progress]
    # The transcoder's stages in order, each fraction at least the one before.
    assert stages[0] == "downloading" and "transcoding" in stages and stages[-1] == "uploading"
    fractions = [n["progress"] for n in progress]
    assert fractions == sorted(fractions)
    assert [n["status"] for n in notes if n["kind"] == "status"] == ["processing", "published"]
    assert notes[-1]["progress"] == 1.0
