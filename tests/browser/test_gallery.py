"""The tenant-facing gallery in headless Chromium against a real server (uvicorn on loopback).

Must show: a tenant signs in with its own key, sees its task's poster and plays its HLS
ladder (hls.js, MSE) until the video's current time passes one second; it never sees
another tenant's task, not even by asking for that tenant; its session reaches no admin
page; the page works with no tasks. An admin sees every tenant, may pick one, and the task
explorer lists the task's result and variants.

The task a tenant plays is generated: the local provider renders it with FFmpeg, the hub
fetches it and the media worker makes its ladder. The other tasks (another tenant's, the
admin's explorer) are made here, faster: an HLS ladder by the bare ffmpeg command, a poster,
stored in the hub's blob store with the asset rows the media worker would write.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.blobs import keys
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.core import ids
from aigc_hub.media import tools
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.models import assets, generation_tasks
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, build
from tests.browser.harness import ConsoleServer, log_in
from tests.support.provider import provider_server, require_ffmpeg, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.ffmpeg]

PROMPT = "生成一段视频：一只熊猫在竹林里弹吉他，黄昏，电影感镜头"
OTHER_PROMPT = "another tenant's secret cat video"
HLS = "application/vnd.apple.mpegurl"
#: The media worker's pipeline version in the contract (media.ladder.PIPELINE_VERSION).
PIPELINE_VERSION = "media-v1"
SECONDS = 6


@dataclass(frozen=True)
class Media:
    """A source MP4, its HLS ladder directory and a poster, made once per module."""

    source: Path
    hls_dir: Path
    poster: Path


def _ffmpeg(*args: str, cwd: Path) -> None:
    subprocess.run(
        [tools.executable("ffmpeg"), "-hide_banner", "-loglevel", "error", "-y", *args],
        cwd=cwd,
        check=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Media:
    """A 6 s H.264/AAC source, a two-rendition HLS ladder (forced 1 s GOP) and a poster."""
    try:
        tools.executable("ffmpeg")
    except tools.MediaToolMissing as exc:
        pytest.skip(str(exc))
    work = tmp_path_factory.mktemp("media")
    _ffmpeg(
        "-f", "lavfi", "-i", f"testsrc2=size=640x360:rate=25:duration={SECONDS}",
        "-f", "lavfi", "-i", f"sine=frequency=440:duration={SECONDS}",
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
        "-c:a", "aac", "-shortest", "source.mp4",
        cwd=work,
    )  # fmt: skip
    hls = work / "hls"
    hls.mkdir()
    _ffmpeg(
        "-i", str(work / "source.mp4"),
        "-filter_complex", "[0:v]split=2[a][b];[a]scale=-2:360[v0];[b]scale=-2:180[v1]",
        "-map", "[v0]", "-map", "0:a", "-map", "[v1]", "-map", "0:a",
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
        "-g", "25", "-keyint_min", "25", "-sc_threshold", "0",
        "-b:v:0", "800k", "-b:v:1", "300k", "-c:a", "aac", "-b:a", "64k",
        "-f", "hls", "-hls_time", "1", "-hls_playlist_type", "vod",
        "-hls_segment_filename", "%v/seg_%03d.ts",
        "-master_pl_name", "master.m3u8",
        "-var_stream_map", "v:0,a:0,name:360p v:1,a:1,name:180p",
        "%v/index.m3u8",
        cwd=hls,
    )  # fmt: skip
    _ffmpeg("-ss", "1", "-i", "source.mp4", "-frames:v", "1", "poster.jpg", cwd=work)
    return Media(work / "source.mp4", hls, work / "poster.jpg")


def _asset_row(
    tenant_id: str, key: str, content_type: str, size: int, **extra: Any
) -> dict[str, Any]:
    now = extra.pop("now")
    return {
        "tenant_id": tenant_id,
        "object_bucket": "hub",
        "object_key": key,
        "content_type": content_type,
        "size_bytes": size,
        "status": "READY",
        "created_at": now,
        "updated_at": now,
        **extra,
    }


async def add_task(hub: Hub, tenant_id: str, prompt: str, media: Media | None) -> str:
    """A SUCCEEDED generation task of ``tenant_id``; with ``media``, its result and variants
    (HLS ladder, poster) stored as the media worker would; without, a task still QUEUED."""
    assert hub.blobs is not None
    now = hub.clock.now_ms()
    task_id = ids.new_id_str()
    result_id = ids.new_id_str() if media is not None else None
    rows: list[dict[str, Any]] = []
    if media is not None and result_id is not None:
        source_key = keys.object_key(tenant_id, "outputs", result_id, "output.mp4")
        info = await hub.blobs.put(source_key, media.source.read_bytes(), "video/mp4")
        rows.append(
            _asset_row(
                tenant_id, source_key, "video/mp4", info.size, now=now, id=result_id,
                kind="generated_video", variant_profile="source", task_id=task_id,
                width=640, height=360, duration_ms=SECONDS * 1000, codec="h264",
                audio_codec="aac",
            )
        )  # fmt: skip
        # Every file of the ladder under one prefix; object_key names the master playlist.
        prefix = keys.object_key(tenant_id, "variants", result_id, "hls")
        for path in sorted(p for p in media.hls_dir.rglob("*") if p.is_file()):
            kind = HLS if path.suffix == ".m3u8" else "video/mp2t"
            await hub.blobs.put(
                f"{prefix}/{path.relative_to(media.hls_dir)}", path.read_bytes(), kind
            )
        rows.append(
            _asset_row(
                tenant_id, f"{prefix}/master.m3u8", HLS,
                (media.hls_dir / "master.m3u8").stat().st_size, now=now, id=ids.new_id_str(),
                kind="variant", variant_profile="hls", source_asset_id=result_id,
                pipeline_version=PIPELINE_VERSION, task_id=task_id, width=640, height=360,
                duration_ms=SECONDS * 1000,
            )
        )  # fmt: skip
        poster_key = keys.object_key(tenant_id, "variants", result_id, "poster.jpg")
        poster = await hub.blobs.put(poster_key, media.poster.read_bytes(), "image/jpeg")
        rows.append(
            _asset_row(
                tenant_id, poster_key, "image/jpeg", poster.size, now=now, id=ids.new_id_str(),
                kind="variant", variant_profile="poster", source_asset_id=result_id,
                pipeline_version=PIPELINE_VERSION, task_id=task_id, width=640, height=360,
            )
        )  # fmt: skip
    async with hub.transaction() as conn:
        await conn.execute(
            generation_tasks.insert().values(
                id=task_id, tenant_id=tenant_id, idempotency_key=task_id, mode="text_to_video",
                requested_model="local-v1", normalized_params={"prompt": prompt},
                status="SUCCEEDED" if media is not None else "QUEUED", status_version=1,
                priority=0, attempt_count=1, estimated_cost=10, reserved_amount=10,
                result_asset_id=result_id, created_at=now, updated_at=now, queued_at=now,
            )
        )  # fmt: skip
        for row in rows:  # one by one: the rows set different columns
            await conn.execute(assets.insert().values(**row))
    return task_id


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    """The console over a hub with generation (no providers: nothing runs) and local blobs."""
    settings = GenerationSettings()
    pipeline = generation.with_state(lambda hub, _s: build(hub, settings, adapters=[]))
    blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
    with ConsoleServer(db_url, [pipeline], groups=[], blobs=blobs) as running:
        yield running


def tenant(server: ConsoleServer, name: str) -> tuple[str, str]:
    """A new tenant: its id and its key."""
    made, key = server.call(lambda hub: tenancy.create_tenant(hub.engine, name))
    return made.id, key


@pytest.fixture
def generating(db_url: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    """The console over a hub that generates: the local provider (FFmpeg), every consumer
    group (the media worker included) and the scanners (they schedule the polls)."""
    require_ffmpeg()
    data = tmp_path / "provider"
    data.mkdir()
    with provider_server(data) as provider:
        settings = GenerationSettings(
            local_provider_url=provider.base_url, poll_first_s=0.5, poll_max_s=1.0
        )
        pipeline = generation.with_state(lambda hub, _s: build(hub, settings))
        blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
        with ConsoleServer(db_url, [pipeline], blobs=blobs, scan=True) as running:
            yield running


async def generate(hub: Hub, tenant_id: str, prompt: str) -> str:
    """A task made through the creating service, as the API makes it; its id."""
    gen = hub.state_of(STATE)
    await services.grant_credits(hub, tenant_id=tenant_id, amount=1_000, grant_id=tenant_id)
    body = services.CreateTask(
        model="local-v1", prompt=prompt, duration_s=SECONDS, resolution="640x360"
    )
    task = await services.create_task(gen, tenant_id=tenant_id, body=body, idempotency_key="k")
    return str(task["task_id"])


def finished(server: ConsoleServer, tenant_id: str, task_id: str) -> dict[str, Any]:
    """The task once terminal: the provider renders, the hub fetches, the media worker makes
    the ladder (polled through the service, bounded)."""
    found: dict[str, Any] = {}

    def terminal() -> bool:
        found.update(
            server.call(lambda hub: services.get_task(hub, tenant_id=tenant_id, task_id=task_id))
        )
        return found["status"] in ("SUCCEEDED", "FAILED", "CANCELED")

    wait_until(terminal, 120.0, "the generated task to finish")
    return found


def test_tenant_plays_its_generated_task_and_never_sees_another_tenants(
    page: Any, generating: ConsoleServer, media: Media
) -> None:
    server = generating
    acme, acme_key = tenant(server, "acme")
    globex, _ = tenant(server, "globex")
    mine = server.call(lambda hub: generate(hub, acme, PROMPT))
    assert finished(server, acme, mine)["status"] == "SUCCEEDED"
    theirs = server.call(lambda hub: add_task(hub, globex, OTHER_PROMPT, media))

    log_in(page, server, key=acme_key)
    assert page.url.endswith("/console/gallery")
    assert page.evaluate("document.characterSet") == "UTF-8"
    tile = page.get_by_test_id(f"item-{mine}")
    expect(tile).to_contain_text(PROMPT)
    expect(page.get_by_test_id(f"status-{mine}")).to_have_text("SUCCEEDED")
    expect(page.get_by_test_id(f"item-{theirs}")).to_have_count(0)
    expect(page.get_by_test_id("gallery")).not_to_contain_text(OTHER_PROMPT)

    poster = page.get_by_test_id(f"poster-{mine}")
    expect(poster).to_be_visible()
    page.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=poster.element_handle()
    )

    page.get_by_test_id(f"play-{mine}").click()
    video = page.get_by_test_id(f"video-{mine}")
    expect(video).to_be_visible()
    # The signal: the media element's own clock, bounded; a fatal player error fails fast.
    page.wait_for_function(
        "v => v.currentTime > 1.0 || v.dataset.state.startsWith('error')",
        arg=video.element_handle(),
        timeout=30_000,
    )
    assert video.evaluate("v => v.dataset.state") == "playing"
    assert video.evaluate("v => v.currentTime") > 1.0

    # Asking for the other tenant by parameter or by its task's page changes nothing.
    page.goto(f"{server.url}/console/gallery?tenant={globex}")
    expect(page.get_by_test_id(f"item-{mine}")).to_be_visible()
    expect(page.get_by_test_id(f"item-{theirs}")).to_have_count(0)
    response = page.goto(f"{server.url}/console/gallery/{theirs}")
    assert response is not None and response.status == 404
    expect(page.get_by_test_id("error-message")).not_to_contain_text(OTHER_PROMPT)


def test_a_tenant_session_reaches_no_admin_page(page: Any, server: ConsoleServer) -> None:
    _, key = tenant(server, "acme")
    log_in(page, server, key=key)
    expect(page.get_by_test_id("who")).to_contain_text("tenant key")
    expect(page.locator("header nav a")).to_have_text(["Gallery", "Projects", "Videos"])
    for path in ("dlq", "dashboard", "tasks?id=x", "dlq/1"):
        response = page.goto(f"{server.url}/console/{path}")
        assert response is not None and response.status == 403, path
        expect(page.get_by_test_id("error-message")).to_contain_text("admin key")
    for path in ("stats.json", "jobs/1.json"):
        api = page.request.get(f"{server.url}/console/{path}")
        assert api.status == 403, path
        assert api.json() == {"detail": "admin only"}
    # A state-changing admin form is refused even with the session's own CSRF token.
    page.goto(f"{server.url}/console/gallery")
    csrf = page.locator("form.logout input[name=csrf]").input_value()
    for action in ("dlq/1/replay", "dlq/1/dismiss", "dlq/replay"):
        posted = page.request.post(f"{server.url}/console/{action}", form={"csrf": csrf})
        assert posted.status == 403, action
    # Its own log out works.
    page.get_by_role("button", name="Log out").click()
    assert "/console/login" in page.url
    page.goto(f"{server.url}/console/gallery")
    assert "/console/login" in page.url


def test_gallery_with_no_tasks_and_a_task_still_queued(page: Any, server: ConsoleServer) -> None:
    _, key = tenant(server, "acme")
    log_in(page, server, key=key)
    expect(page.get_by_test_id("gallery-empty")).to_be_visible()

    acme = server.call(lambda hub: tenancy.authenticate(hub.engine, key))
    assert acme is not None and acme.tenant_id is not None
    tenant_id = acme.tenant_id
    queued = server.call(lambda hub: add_task(hub, tenant_id, PROMPT, None))
    page.reload()
    expect(page.get_by_test_id(f"status-{queued}")).to_have_text("QUEUED")
    expect(page.get_by_test_id(f"play-{queued}")).to_have_count(0)
    page.get_by_test_id(f"open-{queued}").click()
    expect(page.get_by_test_id("no-result")).to_be_visible()

    response = page.goto(f"{server.url}/console/gallery?before=not-a-cursor")
    assert response is not None and response.status == 400


def test_admin_picks_a_tenant_and_the_explorer_lists_variants(
    page: Any, server: ConsoleServer, media: Media
) -> None:
    acme, _ = tenant(server, "acme")
    globex, _ = tenant(server, "globex")
    mine = server.call(lambda hub: add_task(hub, acme, PROMPT, media))
    theirs = server.call(lambda hub: add_task(hub, globex, OTHER_PROMPT, media))

    log_in(page, server)
    page.goto(f"{server.url}/console/gallery")
    expect(page.get_by_test_id(f"item-{mine}")).to_be_visible()
    expect(page.get_by_test_id(f"item-{theirs}")).to_be_visible()
    page.get_by_test_id("tenant-pick").select_option(label="globex")
    page.get_by_test_id("tenant-show").click()
    expect(page.get_by_test_id(f"item-{theirs}")).to_be_visible()
    expect(page.get_by_test_id(f"item-{mine}")).to_have_count(0)

    page.goto(f"{server.url}/console/tasks?id={mine}")
    table = page.get_by_test_id("variants")
    expect(table.locator("tbody tr")).to_have_count(3)
    source = page.get_by_test_id("media-source")
    expect(source).to_contain_text("video/mp4")
    expect(source).to_contain_text("640×360")
    expect(source).to_contain_text("0:06.0")
    expect(page.get_by_test_id("media-hls")).to_contain_text("READY")
    expect(page.get_by_test_id("open-hls")).to_have_attribute("href", f"/console/gallery/{mine}")
    poster_link = page.get_by_test_id("open-poster")
    expect(poster_link).to_have_text("view")
    href = str(poster_link.get_attribute("href"))
    poster = page.request.get(urljoin(server.url, href), max_redirects=0)
    assert poster.status == 200 and poster.body()[:3] == b"\xff\xd8\xff"  # a JPEG
