"""Vistack's video page in headless Chromium against a real server (uvicorn on loopback):
a tenant plays a published video's DASH manifest (dash.js, MSE) until the current time
passes 1.5 s, with the danmaku stored for its first second shown over it, and a danmaku
posted while the page is open arriving through the live feed; another tenant's video is
the same 404 as an unknown one.

The video is made here as the transcoder makes it (the media toolkit's dash and poster
variants of a generated clip), stored in the hub's blob store under a run's prefix, with
the row the worker writes when it publishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.blobs.base import file_chunks
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core.ids import new_id
from aigc_hub.media import ladder
from aigc_hub.media.probe import probe
from aigc_hub.pipelines.vistack import danmaku, events, services
from aigc_hub.pipelines.vistack.models import vistack_danmaku, vistack_videos
from aigc_hub.pipelines.vistack.state import STATE
from tests.browser.harness import ConsoleServer, log_in
from tests.support.vistack import make_clip, vistack_pipeline_in

pytestmark = [pytest.mark.browser, pytest.mark.ffmpeg]

SEEDED = ("first light", "早上好", "what a view")


async def publish(hub: Hub, tenant_id: str, clip: Path, work: Path) -> str:
    """A published video of ``clip``: its DASH files and cover in the store, its row."""
    video_id = f"vid_{new_id().hex}"
    info = await probe(clip)
    dash = await ladder.make_variant("dash", clip, info, work, ladder=ladder.ladder_of([180, 240]))
    cover = await ladder.make_variant("poster", clip, info, work)
    assert hub.blobs is not None
    prefix = f"{services.dash_prefix(tenant_id, video_id)}1/"
    for path in sorted(p for p in dash.directory.iterdir() if p.is_file()):
        await hub.blobs.put(prefix + path.name, file_chunks(path))
    cover_key = services.cover_key(tenant_id, video_id)
    await hub.blobs.put(cover_key, file_chunks(cover.directory / cover.main), "image/jpeg")
    source = services.source_key(tenant_id, f"upl_{new_id().hex}")
    message = events.TranscodeV2(videoId=video_id, tenantId=tenant_id, sourceKey=source)
    row = services.new_video_row(
        message, owner_id="o", title="Sunrise", size=1, now=hub.clock.now_ms()
    )
    row |= {
        "status": "published",
        "status_version": 3,
        "manifest_key": prefix + dash.main,
        "cover_key": cover_key,
        "duration_ms": info.duration_ms,
        "renditions": [{"name": "240p", "width": 320, "height": 240, "bandwidth_bps": 1}],
    }
    now = hub.clock.now_ms()
    async with hub.transaction() as conn:
        await conn.execute(vistack_videos.insert(), row)
        await conn.execute(
            vistack_danmaku.insert(),
            [
                {
                    "id": f"dm_{new_id().hex}",
                    "video_id": video_id,
                    "tenant_id": tenant_id,
                    "user_id": "viewer",
                    "offset_ms": 200 + 300 * i,
                    "text": text,
                    "color": "#ffcc00",
                    "mode": "scroll",
                    "status": "visible",
                    "posted_at": now,
                    "stored_at": now,
                }
                for i, text in enumerate(SEEDED)
            ],
        )
    return video_id


async def post_live(hub: Hub, tenant_id: str, video_id: str, text: str) -> str:
    vs = hub.state_of(STATE)
    body = danmaku.DanmakuPost(offsetMs=0, text=text, color="#00ffcc", mode="top")
    return await danmaku.post(
        vs, danmaku.KnownVideos(), tenant_id=tenant_id, user_id="live", video_id=video_id, body=body
    )


def test_a_video_plays_in_chromium_with_its_danmaku_overlaid(
    page: Any, db_url: str, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=8.0, size="320x240")
    blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
    with ConsoleServer(db_url, [vistack_pipeline_in()], blobs=blobs) as server:
        (acme, acme_key) = server.call(lambda hub: tenancy.create_tenant(hub.engine, "acme"))
        (globex, _) = server.call(lambda hub: tenancy.create_tenant(hub.engine, "globex"))
        mine = server.call(lambda hub: publish(hub, acme.id, clip, tmp_path / "made"), 120)
        theirs = server.call(lambda hub: publish(hub, globex.id, clip, tmp_path / "theirs"), 120)

        log_in(page, server, key=acme_key)
        page.goto(f"{server.url}/console/videos")
        expect(page.get_by_test_id(f"video-row-{mine}")).to_be_visible()
        expect(page.get_by_test_id(f"video-row-{theirs}")).to_have_count(0)
        page.goto(f"{server.url}/console/videos/{mine}")
        video = page.get_by_test_id("video")
        page.wait_for_function(
            "() => { const v = document.querySelector('[data-testid=video]');"
            " return v.currentTime > 1.5 || v.dataset.state.startsWith('error'); }",
            timeout=60_000,
        )
        assert video.evaluate("v => v.dataset.state") == "playing"
        assert video.evaluate("v => v.currentTime") > 1.5
        assert video.evaluate("v => v.videoWidth") > 0
        layer = page.get_by_test_id("danmaku-layer")
        for text in SEEDED:
            expect(layer).to_contain_text(text)
        live_id = server.call(lambda hub: post_live(hub, acme.id, mine, "live hello"))
        expect(layer.locator(f"[data-id={live_id}]")).to_have_text("live hello", timeout=30_000)

        page.goto(f"{server.url}/console/videos/{theirs}")
        expect(page.get_by_test_id("error-message")).to_contain_text("No video")
