"""A timeline revision compiled into its render graph and run by real FFmpeg, node by node,
with a node cache in a folder: the export's file is checked by ffprobe; a second export
after a title change reuses every node the change does not reach; a failing node is retried
alone, and one that always fails is named."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aigc_hub.media import tools
from aigc_hub.pipelines.generation import render_graph, render_run
from aigc_hub.pipelines.generation.render_graph import SourceFacts
from aigc_hub.pipelines.generation.timeline import TimelineV1

CLIP_IDS = [f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3)]
MUSIC_ID = "00000000-0000-4000-8000-000000000009"


def ffmpeg(*args: str) -> None:
    subprocess.run(
        [tools.executable("ffmpeg"), "-v", "error", "-y", *args], check=True, timeout=120
    )


def make_sources(folder: Path) -> dict[str, Path]:
    """Three 4 s 320x180 clips of different pictures and one 10 s tone."""
    paths: dict[str, Path] = {}
    for asset_id, pattern in zip(CLIP_IDS, ("testsrc2", "smptebars", "rgbtestsrc"), strict=True):
        path = folder / f"{pattern}.mp4"
        ffmpeg(
            "-f", "lavfi", "-i", f"{pattern}=size=320x180:rate=25:duration=4",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path),
        )  # fmt: skip
        paths[asset_id] = path
    music = folder / "music.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=10", str(music))
    paths[MUSIC_ID] = music
    return paths


def facts(paths: dict[str, Path]) -> dict[str, SourceFacts]:
    return {
        asset_id: SourceFacts(
            asset_id=asset_id,
            sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
            duration_ms=4000 if asset_id != MUSIC_ID else 10_000,
            has_video=asset_id != MUSIC_ID,
            has_audio=asset_id == MUSIC_ID,
        )
        for asset_id, path in paths.items()
    }


def timeline(title: str = "Holiday") -> TimelineV1:
    clip = {"in_ms": 500, "out_ms": 3500}
    return TimelineV1.model_validate(
        {
            "output": {"width": 1280, "height": 720, "frame_rate": 25, "duration_ms": 8000},
            "tracks": [
                {
                    "id": "v1",
                    "clips": [
                        {"id": "c1", "asset_id": CLIP_IDS[0], "at_ms": 0, **clip},
                        {
                            "id": "c2",
                            "asset_id": CLIP_IDS[1],
                            "at_ms": 2500,
                            **clip,
                            "transition_in": {"kind": "crossfade", "duration_ms": 500},
                        },
                        {
                            "id": "c3",
                            "asset_id": CLIP_IDS[2],
                            "at_ms": 5500,
                            "in_ms": 0,
                            "out_ms": 2500,
                        },
                    ],
                }
            ],
            "texts": [{"id": "title", "text": title, "start_ms": 0, "end_ms": 2000, "y": 0.2}],
            "audio": [
                {
                    "id": "music",
                    "asset_id": MUSIC_ID,
                    "at_ms": 0,
                    "in_ms": 0,
                    "out_ms": 8000,
                    "gain_db": -6,
                    "fade_in_ms": 500,
                    "fade_out_ms": 1000,
                }
            ],
        }
    )


def probe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [tools.executable("ffprobe"), "-v", "error", "-count_frames", "-print_format", "json",
         "-show_streams", "-show_format", str(path)],
        check=True, capture_output=True, timeout=60,
    ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "sources"
    folder.mkdir()
    return make_sources(folder)


async def test_a_three_clip_timeline_renders_to_the_profiles_mp4_and_a_title_change_reuses_the_rest(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    cache = render_run.FolderCache(tmp_path / "cache")
    profile = render_graph.profile_named("draft")
    graph = render_graph.compile_graph(timeline(), profile, facts(sources))
    first = await render_run.run_graph(graph, sources, cache, tmp_path / "work")
    assert sorted(first.ran) == sorted(n.id for n in graph.nodes) and first.reused == []

    out = tmp_path / "export.mp4"
    await cache.fetch(graph.output.key, out)
    info = probe(out)
    video = next(s for s in info["streams"] if s["codec_type"] == "video")
    audio = [s for s in info["streams"] if s["codec_type"] == "audio"]
    assert (video["width"], video["height"]) == (640, 360)  # draft: 360 high, the 16:9 aspect
    assert video["r_frame_rate"] == "25/1"
    assert int(video["nb_read_frames"]) == 200  # 8 s at 25 fps
    assert abs(float(info["format"]["duration"]) - 8.0) <= 1 / 25 + 0.03  # AAC's last frame
    assert audio and audio[0]["codec_name"] == "aac"

    # only the title changes: its picture, the composition and the encode run again
    changed = render_graph.compile_graph(timeline("Holiday 2026"), profile, facts(sources))
    second = await render_run.run_graph(changed, sources, cache, tmp_path / "work")
    assert sorted(second.ran) == ["compose", "encode", "text:title"]
    assert sorted(second.reused) == [
        "audio:music",
        "clip:c1",
        "clip:c2",
        "clip:c3",
        "mix",
        "sequence:v1",
    ]
    assert changed.output.key != graph.output.key


async def test_a_node_failing_twice_is_retried_alone_and_one_always_failing_is_named(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    from aigc_hub.core.failpoints import Failpoints

    before = {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in sources.items()}
    graph = render_graph.compile_graph(
        timeline(), render_graph.profile_named("draft"), facts(sources)
    )
    fast = render_run.RunSettings(backoff_s=0.01)
    failures = {"left": 2}

    def fail_twice() -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("scratch disk went away")

    armed = Failpoints()
    armed.arm("render.node:clip:c2", fail_twice)
    cache = render_run.FolderCache(tmp_path / "cache")
    report = await render_run.run_graph(
        graph, sources, cache, tmp_path / "work", settings=fast, failpoints=armed
    )
    assert report.attempts["clip:c2"] == 3
    assert {n for n, a in report.attempts.items() if a > 1} == {"clip:c2"}
    assert report.ran.count("clip:c2") == 1

    def always() -> None:
        raise OSError("the tool crashes on this node")

    broken = Failpoints()
    broken.arm("render.node:compose", always)
    retitled = render_graph.compile_graph(
        timeline("Another"), render_graph.profile_named("draft"), facts(sources)
    )
    with pytest.raises(render_run.NodeFailed) as failed:
        await render_run.run_graph(
            retitled, sources, cache, tmp_path / "work", settings=fast, failpoints=broken
        )
    assert failed.value.node_id == "compose" and failed.value.attempts == 3
    assert "crashes" in failed.value.reason
    # the earlier export and the sources are untouched
    assert await cache.has(graph.output.key)
    assert before == {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in sources.items()}


async def test_a_crossfade_after_a_cut_renders_whole(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    """c1, then c3 joined by a cut, then c2 crossfading over c3 (a concat before an xfade:
    their time bases once differed and FFmpeg refused the sequence)."""
    doc = timeline().model_dump(mode="json")
    c1, c2, c3 = doc["tracks"][0]["clips"]
    c3["at_ms"], c2["at_ms"] = 3000, 5000
    doc["tracks"][0]["clips"] = [c1, c3, c2]
    graph = render_graph.compile_graph(
        TimelineV1.model_validate(doc), render_graph.profile_named("draft"), facts(sources)
    )
    cache = render_run.FolderCache(tmp_path / "cache")
    await render_run.run_graph(graph, sources, cache, tmp_path / "work")
    out = tmp_path / "export.mp4"
    await cache.fetch(graph.output.key, out)
    video = next(s for s in probe(out)["streams"] if s["codec_type"] == "video")
    assert int(video["nb_read_frames"]) == 200


def test_what_a_source_cannot_give_is_refused_naming_the_element(
    sources: dict[str, Path],
) -> None:
    known = facts(sources)
    no_sound = dict(known)
    no_sound[MUSIC_ID] = SourceFacts(MUSIC_ID, "0" * 64, 10_000, has_video=False, has_audio=False)
    with pytest.raises(render_graph.InvalidRenderInput, match=r"music: .* has no sound"):
        render_graph.compile_graph(timeline(), render_graph.profile_named("hd"), no_sound)
    short = dict(known)
    short[CLIP_IDS[2]] = SourceFacts(CLIP_IDS[2], "0" * 64, 2000, has_video=True, has_audio=False)
    with pytest.raises(render_graph.InvalidRenderInput, match="c3: out_ms 2500 is past the end"):
        render_graph.compile_graph(timeline(), render_graph.profile_named("hd"), short)
    with pytest.raises(render_graph.InvalidRenderInput, match="not one of: draft, hd"):
        render_graph.profile_named("8k")
