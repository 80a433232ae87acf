"""A project's timeline in the console, in headless Chromium against a real server (uvicorn
on loopback) with the render and media workers running: a tenant sees its project's clips
on their track at their in/out points and its revision number, moves a clip earlier and
saves (the API reads the same document, the clips re-packed), a stale save is refused with
the 409 shown, the export button shows its progress and the result plays (hls.js, MSE)
until the current time passes one second; another tenant's project is the same 404 as an
unknown one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from aigc_hub import tenancy
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import build
from tests.browser.harness import ConsoleServer, log_in
from tests.integration.test_generation_exports import WORKERS, sources, timeline, uploaded
from tests.support.provider import require_ffmpeg

pytestmark = [pytest.mark.browser, pytest.mark.ffmpeg]


@pytest.fixture
def server(sqlite_url: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    require_ffmpeg()
    settings = GenerationSettings(providers="local", callback_base_url="http://127.0.0.1:9")
    pipeline = generation.with_state(lambda hub, _s: build(hub, settings, adapters=[]))
    blobs = LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret")
    with ConsoleServer(sqlite_url, [pipeline], groups=list(WORKERS), blobs=blobs) as running:
        yield running


def client(server: ConsoleServer, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers={"Authorization": f"Bearer {key}"},
        trust_env=False,
        timeout=30,
    )


async def a_project(server: ConsoleServer, key: str, files: list[Path]) -> str:
    """Three uploaded clips and music on a timeline (a, b crossfading, c; a title)."""
    async with client(server, key) as api:
        ids = await uploaded(api, files)
        made = await api.post(
            "/v1/projects", json={"name": "Trip", "timeline": timeline(ids[:3], ids[3], "Trip")}
        )
        assert made.status_code == 201, made.text
        return str(made.json()["project_id"])


async def api_call(server: ConsoleServer, key: str, method: str, path: str, **kw: Any) -> Any:
    async with client(server, key) as api:
        answer = await api.request(method, path, **kw)
        assert answer.status_code < 300, answer.text
        return answer.json()


def test_a_tenant_edits_saves_exports_and_plays_a_project(
    server: ConsoleServer, page: Any, tmp_path: Path
) -> None:
    _, key = server.call(lambda hub: tenancy.create_tenant(hub.engine, "studio"))
    _, other_key = server.call(lambda hub: tenancy.create_tenant(hub.engine, "other"))
    files = sources(tmp_path)
    # on the server's loop: playwright's sync API runs a loop in this thread
    project_id = server.call(lambda _hub: a_project(server, key, files), timeout=120)

    log_in(page, server, key)
    page.get_by_test_id("nav-projects").click()
    page.get_by_test_id(f"project-row-{project_id}").get_by_role("link").click()
    expect(page.get_by_test_id("revision")).to_have_text("1")
    for clip in ("a", "b", "c"):
        expect(page.get_by_test_id(f"clip-{clip}")).to_be_visible()
    expect(page.get_by_test_id("in-a")).to_have_value("500")
    expect(page.get_by_test_id("out-a")).to_have_value("3500")
    expect(page.get_by_test_id("clip-label-b")).to_contain_text("@2.50s")

    # c before b: c follows a at 3 s, b crossfades over c's last 500 ms
    page.get_by_test_id("earlier-c").click()
    expect(page.get_by_test_id("clip-label-b")).to_contain_text("@5.00s")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("save-state")).to_have_text("saved as revision 2")
    path = f"/v1/projects/{project_id}/revisions"
    saved = server.call(lambda _hub: api_call(server, key, "GET", f"{path}/2"))
    clips = saved["timeline"]["tracks"][0]["clips"]
    assert [(c["id"], c["at_ms"]) for c in clips] == [("a", 0), ("c", 3000), ("b", 5000)]
    assert clips[2]["transition_in"] == {"kind": "crossfade", "duration_ms": 500}

    # a save over revision 2 after the API saved revision 3: refused, the page says why
    newer = {"base_revision": 2, "timeline": saved["timeline"]}
    server.call(lambda _hub: api_call(server, key, "POST", path, json=newer))
    page.get_by_test_id("in-a").fill("600")
    page.get_by_test_id("in-a").dispatch_event("change")
    page.get_by_test_id("save").click()
    expect(page.get_by_test_id("save-state")).to_contain_text("not saved (409)")

    # export (revision 2: the page's), follow it, play it
    page.get_by_test_id("export").click()
    play = page.get_by_test_id("play-export")
    expect(play).to_be_visible(timeout=180_000)
    expect(page.get_by_test_id("export-state")).to_contain_text("succeeded: 9 nodes ran")
    play.click()
    video = page.get_by_test_id("video-export")
    expect(video).to_have_attribute("data-state", "playing", timeout=30_000)
    page.wait_for_function(
        "document.querySelector('[data-testid=video-export]').currentTime > 1", timeout=30_000
    )

    # another tenant: the same 404 as an unknown project
    other = page.context.browser.new_context()
    try:
        theirs = other.new_page()
        log_in(theirs, server, other_key)
        for target in (project_id, "00000000-0000-7000-8000-000000000000"):
            answer = theirs.goto(f"{server.url}/console/projects/{target}")
            assert answer is not None and answer.status == 404
    finally:
        other.close()
