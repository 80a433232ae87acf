"""Playback grants through the served API on the local blob engine: a READY upload plays
from a presigned URL with byte ranges (what ``<video>`` asks for); an HLS variant plays
from a hub-served playlist whose segments are presigned store URLs and whose child playlists
stay on the token path; tokens and paths that are tampered, expired or leave the variant are
refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from aigc_hub.core import ids
from aigc_hub.media import tools
from aigc_hub.pipelines.generation import playback
from aigc_hub.pipelines.generation.models import assets
from tests.support import uploads
from tests.support.provider import require_ffmpeg
from tests.support.uploads import AssetStack, asset_stack

pytestmark = pytest.mark.ffmpeg


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_ffmpeg()
    return uploads.make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", seconds=4)


@pytest.fixture(scope="module")
def hls(tmp_path_factory: pytest.TempPathFactory, clip: Path) -> Path:
    """A real HLS variant folder: master.m3u8 → 360p/index.m3u8 → 1 s TS segments."""
    out = tmp_path_factory.mktemp("hls")
    (out / "360p").mkdir()
    subprocess.run(
        [
            tools.executable("ffmpeg"), "-v", "error", "-y", "-i", str(clip),
            "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-keyint_min", "25",
            "-sc_threshold", "0", "-f", "hls", "-hls_time", "1", "-hls_playlist_type", "vod",
            "-hls_segment_filename", str(out / "360p" / "seg_%03d.ts"),
            str(out / "360p" / "index.m3u8"),
        ],
        check=True,
        timeout=120,
    )  # fmt: skip
    (out / "master.m3u8").write_text(
        "#EXTM3U\n#EXT-X-VERSION:3\n"
        '#EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=320x180,CODECS="avc1.42c00d"\n'
        "360p/index.m3u8\n"
    )
    return out


async def _ready_upload(stack: AssetStack, api: httpx.AsyncClient, clip: Path) -> str:
    done = await uploads.upload(api, clip)
    assert (await uploads.complete(api, done)).json()["status"] == "PROCESSING"
    assert (await uploads.settled(api, done.asset_id))["status"] == "READY"
    return done.asset_id


async def _variant(
    stack: AssetStack, source_id: str, profile: str, folder: Path, main: str
) -> tuple[str, str]:
    """Store every file of ``folder`` under a variant prefix and add its READY row; returns
    (variant id, key prefix)."""
    async with stack.hub.transaction() as conn:
        source = (await conn.execute(assets.select().where(assets.c.id == source_id))).one()
    variant_id = ids.new_id_str()
    prefix = f"t/{source.tenant_id}/variant/{variant_id}/{profile}"
    for name, data in uploads.files_under(folder).items():
        await stack.store.put(f"{prefix}/{name}", data, "application/octet-stream")
    async with stack.hub.transaction() as conn:
        await conn.execute(
            assets.insert().values(
                id=variant_id,
                tenant_id=source.tenant_id,
                kind="variant",
                source_asset_id=source_id,
                object_bucket="hub",
                object_key=f"{prefix}/{main}",
                content_type="video/mp4" if main.endswith(".mp4") else playback.HLS_TYPE,
                status="READY",
                variant_profile=profile,
                pipeline_version="media-v1",
                created_at=stack.hub.clock.now_ms(),
            )
        )
    return variant_id, prefix


async def test_a_ready_upload_plays_from_a_presigned_url_with_ranges(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    data = uploads.read(clip)
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        asset_id = await _ready_upload(stack, api, clip)
        grant = (await api.post(f"/v1/assets/{asset_id}/playback")).json()
        async with httpx.AsyncClient(trust_env=False) as http:
            whole = await http.get(grant["url"])
            first = await http.get(grant["url"], headers={"Range": "bytes=0-99"})
            tail = await http.get(grant["url"], headers={"Range": "bytes=-10"})
            middle = await http.get(grant["url"], headers={"Range": "bytes=1000-"})
            head = await http.head(grant["url"])
            past = await http.get(grant["url"], headers={"Range": f"bytes={len(data)}-"})
    assert grant["content_type"] == "video/mp4"
    assert grant["url"].startswith(stack.api_url + "/blobs/")
    assert whole.status_code == 200 and whole.content == data
    assert first.status_code == 206 and first.content == data[:100]
    assert first.headers["content-range"] == f"bytes 0-99/{len(data)}"
    assert tail.status_code == 206 and tail.content == data[-10:]
    assert middle.content == data[1000:]
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    assert head.headers["accept-ranges"] == "bytes" and head.content == b""
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{len(data)}"


async def test_hls_plays_through_hub_playlists_and_presigned_segments(
    db_url: str, tmp_path: Path, clip: Path, hls: Path
) -> None:
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        source = await _ready_upload(stack, api, clip)
        proxy_id, _ = await _variant(stack, source, "proxy", clip.parent, clip.name)
        hls_id, _ = await _variant(stack, source, "hls", hls, "master.m3u8")
        variants = (await api.get(f"/v1/assets/{source}/variants")).json()["items"]
        grant = (await api.post(f"/v1/assets/{source}/playback")).json()
        proxy_grant = (await api.post(f"/v1/assets/{proxy_id}/playback")).json()
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            master = await http.get(grant["url"])
            child_url = httpx.URL(grant["url"]).join("360p/index.m3u8")
            child = await http.get(child_url)
            segment_urls = [
                line for line in child.text.splitlines() if line and not line.startswith("#")
            ]
            segments = [await http.get(child_url.join(u)) for u in segment_urls]
    assert {v["asset_id"] for v in variants} == {proxy_id, hls_id}
    assert grant["content_type"] == playback.HLS_TYPE
    assert "/v1/playback/" in grant["url"] and grant["url"].endswith("/master.m3u8")
    assert master.status_code == 200
    assert master.headers["content-type"].startswith(playback.HLS_TYPE)
    assert "360p/index.m3u8" in master.text.splitlines()  # child playlists stay relative
    assert child.status_code == 200 and len(segment_urls) == 4
    assert all(u.startswith("/blobs/") and "sig=" in u for u in segment_urls)
    expected = sorted((hls / "360p").glob("seg_*.ts"))
    assert [s.content for s in segments] == [uploads.read(p) for p in expected]
    assert proxy_grant["url"].startswith(stack.api_url + "/blobs/")


async def test_playback_tokens_and_paths_are_checked(
    db_url: str, tmp_path: Path, clip: Path, hls: Path
) -> None:
    async with asset_stack(db_url, tmp_path) as stack:
        async with stack.client(await stack.tenant("acme")) as api:
            source = await _ready_upload(stack, api, clip)
            hls_id, _ = await _variant(stack, source, "hls", hls, "master.m3u8")
            pending = (await uploads.upload(api, clip)).asset_id
            not_yet = await api.post(f"/v1/assets/{pending}/playback")
            grant = (await api.post(f"/v1/assets/{source}/playback")).json()
            token = grant["url"].split("/v1/playback/")[1].split("/")[0]
            forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
            past = playback.sign_token(stack.gen, hls_id, stack.hub.clock.now_ms() // 1000 - 1)
            async with httpx.AsyncClient(base_url=stack.api_url, trust_env=False) as http:
                refused = [
                    await http.get(f"/v1/playback/{forged}/master.m3u8"),
                    await http.get(f"/v1/playback/{past}/master.m3u8"),
                    await http.get(f"/v1/playback/{token}/360p/seg_000.ts"),
                    await http.get(f"/v1/playback/{token}/360p/%2e%2e/%2e%2e/x.m3u8"),
                ]
                missing = await http.get(f"/v1/playback/{token}/720p/index.m3u8")
        with pytest.raises(playback.PlaybackRefused):
            await playback.playlist(stack.gen, token, "../../other/index.m3u8")
        with pytest.raises(playback.PlaybackRefused):
            await playback.playlist(stack.gen, token, "/etc/index.m3u8")
    assert not_yet.status_code == 409 and not_yet.json()["type"].endswith("/not-playable")
    assert [r.status_code for r in refused] == [403] * 4
    assert all(r.json()["type"].endswith("/playback-refused") for r in refused)
    assert "expired" in refused[1].json()["detail"]
    assert missing.status_code == 404


async def test_a_playlist_pointing_outside_its_variant_is_refused(
    db_url: str, tmp_path: Path, clip: Path
) -> None:
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "master.m3u8").write_text("#EXTM3U\n#EXTINF:1,\nhttp://169.254.169.254/x.ts\n")
    async with (
        asset_stack(db_url, tmp_path) as stack,
        stack.client(await stack.tenant("acme")) as api,
    ):
        source = await _ready_upload(stack, api, clip)
        await _variant(stack, source, "hls", hostile, "master.m3u8")
        grant = (await api.post(f"/v1/assets/{source}/playback")).json()
        async with httpx.AsyncClient(trust_env=False) as http:
            answer = await http.get(grant["url"])
    assert answer.status_code == 403
    assert "not a relative path" in answer.json()["detail"]
