"""Exports through the API with the render worker running, on SQLite and PostgreSQL: three
uploaded clips with a crossfade, a title and music render to the profile's MP4 (ffprobe);
the same click twice is one export; a title change re-runs only the nodes it reaches; a node
that always fails fails its export with the node named and leaves the sources and the
earlier export as they were; another tenant's project is not found. A cancel stops the
running node's FFmpeg; the CLI exports, follows and reports a failure in one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import sqlalchemy as sa
from typer.testing import CliRunner

from aigc_hub.cli.main import app as cli
from aigc_hub.media import tools
from aigc_hub.pipelines.generation import assets
from aigc_hub.pipelines.generation.models import render_cache
from aigc_hub.store.engine import reader
from tests.integration.test_avcc_cli import printed_json
from tests.support.sse import FrameReader
from tests.support.uploads import AssetStack, asset_stack, complete, settled, upload


def ffmpeg(*args: str) -> None:
    subprocess.run(
        [tools.executable("ffmpeg"), "-v", "error", "-y", *args], check=True, timeout=120
    )


#: The consumer groups an export needs: the render worker, and the media worker (uploads,
#: the export's playback variants).
WORKERS = ("generation-media", "generation-render")


def sources(root: Path) -> list[Path]:
    """Three 4 s clips (no sound) and a 10 s clip whose sound is the music, under
    ``root/sources``."""
    folder = root / "sources"
    folder.mkdir(exist_ok=True)
    made = []
    for pattern in ("testsrc2", "smptebars", "rgbtestsrc"):
        path = folder / f"{pattern}.mp4"
        ffmpeg(
            "-f", "lavfi", "-i", f"{pattern}=size=320x180:rate=25:duration=4",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path),
        )  # fmt: skip
        made.append(path)
    music = folder / "music.mp4"
    ffmpeg(
        "-f", "lavfi", "-i", "color=c=black:size=160x90:rate=10:duration=10",
        "-f", "lavfi", "-i", "sine=frequency=440:duration=10",
        "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
        "-c:a", "aac", "-shortest", str(music),
    )  # fmt: skip
    return [*made, music]


def timeline(clips: list[str], music: str, title: str) -> dict[str, Any]:
    """8 s at 1280x720, 25 fps: a, b crossfading in over a's last 500 ms, c; title; music."""
    cut = {"in_ms": 500, "out_ms": 3500}
    return {
        "output": {"width": 1280, "height": 720, "frame_rate": 25, "duration_ms": 8000},
        "tracks": [
            {
                "id": "v1",
                "clips": [
                    {"id": "a", "asset_id": clips[0], "at_ms": 0, **cut},
                    {
                        "id": "b",
                        "asset_id": clips[1],
                        "at_ms": 2500,
                        **cut,
                        "transition_in": {"kind": "crossfade", "duration_ms": 500},
                    },
                    {"id": "c", "asset_id": clips[2], "at_ms": 5500, "in_ms": 0, "out_ms": 2500},
                ],
            }
        ],
        "texts": [{"id": "title", "text": title, "start_ms": 0, "end_ms": 2000, "y": 0.2}],
        "audio": [
            {
                "id": "music",
                "asset_id": music,
                "at_ms": 0,
                "in_ms": 0,
                "out_ms": 8000,
                "gain_db": -6,
                "fade_out_ms": 1000,
            }
        ],
    }


async def uploaded(api: httpx.AsyncClient, files: list[Path]) -> list[str]:
    """The files as the tenant's READY assets, their ids in order."""
    found = []
    for path in files:
        sent = await upload(api, path)
        assert (await complete(api, sent)).status_code == 200
        assert (await settled(api, sent.asset_id))["status"] == "READY"
        found.append(sent.asset_id)
    return found


async def ended(api: httpx.AsyncClient, path: str, timeout_s: float = 180.0) -> dict[str, Any]:
    """The export once it left queued/running (polled, bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, Any] = (await api.get(path)).json()
        if found["status"] not in ("queued", "running"):
            return found
        assert time.monotonic() < deadline, f"export still {found['status']}: {found}"
        await asyncio.sleep(0.1)


def probe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [tools.executable("ffprobe"), "-v", "error", "-count_frames", "-print_format", "json",
         "-show_streams", "-show_format", str(path)],
        check=True, capture_output=True, timeout=60,
    ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(out)
    return data


async def test_a_timeline_exports_once_per_click_reuses_unchanged_nodes_and_names_a_failed_one(
    db_url: str, tmp_path: Path
) -> None:
    files = sources(tmp_path)
    async with asset_stack(db_url, tmp_path, groups=WORKERS, render_node_backoff_s=0.01) as stack:
        key = await stack.tenant("studio")
        other = await stack.tenant("other")
        async with stack.client(key) as api, stack.client(other) as stranger:
            ids = await uploaded(api, files)
            clips, music = ids[:3], ids[3]
            made = await api.post(
                "/v1/projects", json={"name": "Trip", "timeline": timeline(clips, music, "Trip")}
            )
            assert made.status_code == 201, made.text
            exports = f"/v1/projects/{made.json()['project_id']}/exports"

            # the same click twice: one export
            click = {"headers": {"Idempotency-Key": "click-1"}, "json": {"profile": "draft"}}
            first = await api.post(exports, **click)
            again = await api.post(exports, **click)
            assert first.status_code == 202, first.text
            assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
            assert again.json()["export_id"] == first.json()["export_id"]
            done = await ended(api, f"{exports}/{first.json()['export_id']}")
            assert done["status"] == "succeeded", done
            assert (done["nodes_ran"], done["nodes_reused"], done["nodes_total"]) == (9, 0, 9)
            assert len((await api.get(exports)).json()["items"]) == 1

            async with reader(stack.hub.engine) as conn:
                row = await assets.load(conn, done["asset_id"])
            assert row is not None and row["kind"] == "export" and row["status"] == "READY"
            rendered = tmp_path / "export.mp4"
            rendered.write_bytes(await stack.store.get(row["object_key"]))
            info = probe(rendered)
            video = next(s for s in info["streams"] if s["codec_type"] == "video")
            assert (video["width"], video["height"], video["r_frame_rate"]) == (640, 360, "25/1")
            assert int(video["nb_read_frames"]) == 200  # 8 s, within a frame: exactly
            assert abs(float(info["format"]["duration"]) - 8.0) <= 0.07
            assert [s["codec_name"] for s in info["streams"] if s["codec_type"] == "audio"] == [
                "aac"
            ]

            # the media worker made its playback variants before it succeeded: it plays (HLS)
            listed = (await api.get(f"/v1/assets/{done['asset_id']}/variants")).json()["items"]
            assert sorted(v["variant_profile"] for v in listed) == ["hls", "poster", "proxy"]
            grant = await api.post(f"/v1/assets/{done['asset_id']}/playback")
            assert grant.json()["content_type"] == "application/vnd.apple.mpegurl", grant.text
            playlist = await api.get(grant.json()["url"])
            assert playlist.status_code == 200 and "#EXTM3U" in playlist.text

            # only the title changes: the clips, the track, the music and the mix are reused
            saved = await api.post(
                f"/v1/projects/{made.json()['project_id']}/revisions",
                json={"base_revision": 1, "timeline": timeline(clips, music, "Trip, day 2")},
            )
            assert saved.status_code == 201, saved.text
            second = await api.post(
                exports, headers={"Idempotency-Key": "click-2"}, json={"profile": "draft"}
            )
            assert second.json()["revision"] == 2
            retitled = await ended(api, f"{exports}/{second.json()['export_id']}")
            assert retitled["status"] == "succeeded", retitled
            assert (retitled["nodes_ran"], retitled["nodes_reused"]) == (
                3,
                6,
            )  # text, compose, encode

            # a node that always fails: the export fails naming it; nothing else is touched
            def crash() -> None:
                raise OSError("the tool crashed")

            stack.hub.failpoints.arm("render.node:clip:b", crash)
            hd = await api.post(exports, headers={"Idempotency-Key": "c3"}, json={"profile": "hd"})
            failed = await ended(api, f"{exports}/{hd.json()['export_id']}")
            assert failed["status"] == "failed" and failed["failed_node"] == "clip:b", failed
            assert "crashed" in failed["status_reason"] and failed["asset_id"] is None
            for asset_id in [*ids, done["asset_id"], retitled["asset_id"]]:
                assert (await api.get(f"/v1/assets/{asset_id}")).json()["status"] == "READY"

            # refusals: an unknown profile, a missing key, another tenant's project
            bad = await api.post(exports, headers={"Idempotency-Key": "x"}, json={"profile": "8k"})
            assert bad.status_code == 422 and "draft" in bad.text
            assert (await api.post(exports, json={"profile": "hd"})).status_code == 400
            theirs = await stranger.post(
                exports, headers={"Idempotency-Key": "x"}, json={"profile": "hd"}
            )
            assert theirs.status_code == 404
            assert (await stranger.get(f"{exports}/{done['export_id']}")).status_code == 404


def ffmpeg_children() -> list[psutil.Process]:
    """FFmpeg processes this test process started (the render nodes')."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "ffmpeg" in p.name() and p.status() != psutil.STATUS_ZOMBIE
    ]


async def test_cancelling_a_running_export_stops_its_ffmpeg(
    sqlite_url: str, tmp_path: Path
) -> None:
    files = sources(tmp_path)
    async with asset_stack(sqlite_url, tmp_path, groups=WORKERS) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as api:
            ids = await uploaded(api, files)
            long = timeline(ids[:3], ids[3], "A long one")
            long["output"]["duration_ms"] = 120_000  # black after 8 s: minutes at full HD
            long["texts"][0]["end_ms"] = 120_000
            made = await api.post("/v1/projects", json={"name": "Long", "timeline": long})
            exports = f"/v1/projects/{made.json()['project_id']}/exports"
            sent = await api.post(
                exports, headers={"Idempotency-Key": "k"}, json={"profile": "fullhd"}
            )
            path = f"{exports}/{sent.json()['export_id']}"
            deadline = time.monotonic() + 120
            while not ffmpeg_children():  # a node's FFmpeg is running
                assert time.monotonic() < deadline, (await api.get(path)).json()
                await asyncio.sleep(0.05)
            cancelled = await api.post(f"{path}/cancel")
            assert cancelled.json()["status"] == "cancelled", cancelled.text
            while ffmpeg_children():  # the watcher kills it within its poll
                assert time.monotonic() < deadline, "the node's FFmpeg still runs"
                await asyncio.sleep(0.05)
            after = (await api.get(path)).json()
            assert after["status"] == "cancelled" and after["asset_id"] is None
            assert after["nodes_ran"] < after["nodes_total"]


async def test_the_project_commands_export_and_wait_for_an_export(
    sqlite_url: str, tmp_path: Path
) -> None:
    files = sources(tmp_path)
    runner = CliRunner()
    async with asset_stack(
        sqlite_url, tmp_path, groups=WORKERS, render_node_attempts=1, render_variants=""
    ) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as api:
            ids = await uploaded(api, files)
            made = await api.post(
                "/v1/projects", json={"name": "T", "timeline": timeline(ids[:3], ids[3], "T")}
            )
        project_id = made.json()["project_id"]
        common = ["--url", stack.api_url, "--api-key", key]

        def run(*args: str) -> Any:
            # In a thread: the CLI's blocking HTTP calls reach the API on this event loop.
            return asyncio.to_thread(runner.invoke, cli, ["gen", "project", *args, *common])

        done = await run("export", project_id, "--profile", "draft", "--wait")
        failing = _failing(stack)
        queued = await run("export", project_id, "--profile", "hd", "--idempotency-key", "x")
        export_id = str(printed_json(queued.stdout)["export_id"])
        failed = await run("wait", project_id, export_id)
        again = await run("export", project_id, "--profile", "hd", "--idempotency-key", "x")
        unknown = await run("export", project_id, "--profile", "8k")
        failing.disarm("render.node:clip:a")
    assert done.exit_code == 0, done.output
    shown = printed_json(done.stdout)
    assert shown["status"] == "succeeded" and shown["asset_id"]
    assert failed.exit_code == 1
    assert f"export {export_id} failed at node clip:a" in failed.stderr
    assert failed.stderr.strip().count("\n") == 0
    assert printed_json(again.stdout)["export_id"] == export_id  # the same key: the same export
    assert unknown.exit_code != 0 and "422" in unknown.stderr and "draft" in unknown.stderr


def _failing(stack: AssetStack) -> Any:
    """Arm the first clip's node to fail every run; the registry, to disarm it."""

    def crash() -> None:
        raise OSError("the tool crashed")

    stack.hub.failpoints.arm("render.node:clip:a", crash)
    return stack.hub.failpoints


async def _notes_until_ended(reader: FrameReader, export_id: str) -> list[dict[str, Any]]:
    """The notifications about ``export_id`` up to the one saying it ended."""
    notes: list[dict[str, Any]] = []
    async with asyncio.timeout(180):
        while True:
            frame = await reader.next(timeout=180)
            if frame.event != "notification" or frame.json()["subject_id"] != export_id:
                continue
            notes.append(frame.json())
            if notes[-1]["status"] in ("succeeded", "failed", "cancelled"):
                return notes


async def test_progress_per_node_reaches_the_event_stream_and_the_cache_keeps_its_bound(
    sqlite_url: str, tmp_path: Path
) -> None:
    files = sources(tmp_path)
    # a bound below one export's nodes: every node goes once the export has its file
    async with asset_stack(
        sqlite_url, tmp_path, groups=WORKERS, render_variants="poster", render_cache_bytes=1
    ) as stack:
        key = await stack.tenant("studio")
        async with stack.client(key) as api:
            ids = await uploaded(api, files)
            made = await api.post(
                "/v1/projects", json={"name": "T", "timeline": timeline(ids[:3], ids[3], "T")}
            )
            exports = f"/v1/projects/{made.json()['project_id']}/exports"
            async with api.stream("GET", "/v1/events") as stream:
                frames = FrameReader(stream)
                try:
                    assert (await frames.next()).comments == ["ready"]
                    sent = await api.post(
                        exports, headers={"Idempotency-Key": "1"}, json={"profile": "draft"}
                    )
                    export_id = sent.json()["export_id"]
                    notes = await _notes_until_ended(frames, export_id)
                finally:
                    await frames.aclose()
            again = await api.post(
                exports, headers={"Idempotency-Key": "2"}, json={"profile": "draft"}
            )
            second = await ended(api, f"{exports}/{again.json()['export_id']}")
        async with reader(stack.hub.engine) as conn:
            cached = (await conn.execute(sa.select(render_cache))).all()
        left = [o async for o in stack.store.list_objects("render-cache/")]
    assert all(n["subject_type"] == "render_job" for n in notes)
    stages = [n["stage"] for n in notes if n["kind"] == "progress"]
    nodes = [s for s in stages if s and s != "variants"]
    assert len(nodes) == 9 and "variants" in stages  # each node once, then the variants
    assert set(nodes) == {"clip:a", "clip:b", "clip:c", "sequence:v1", "text:title"} | {
        "compose",
        "audio:music",
        "mix",
        "encode",
    }
    progress = [n["progress"] for n in notes]
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert notes[-1]["status"] == "succeeded"
    # nothing was left in the cache for the second export to reuse
    assert cached == [] and left == []
    assert (second["status"], second["nodes_ran"], second["nodes_reused"]) == ("succeeded", 9, 0)
