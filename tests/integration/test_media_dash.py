"""The media toolkit's DASH variant with real FFmpeg: every rendition of the ladder and the
audio in a manifest FFprobe reads, every file the manifest names on disk, including ladders
whose even-sided rungs do not keep the source's exact aspect ratio (426x240 of 16:9)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from aigc_hub.media import commands, ladder, tools
from aigc_hub.media.mpd import manifest_files
from aigc_hub.media.probe import probe
from tests.support.vistack import make_clip

pytestmark = pytest.mark.ffmpeg


@pytest.mark.parametrize(
    ("size", "heights", "expected"),
    [
        ("1280x720", [240, 720], [(426, 240), (1280, 720)]),
        ("320x240", [360, 720], [(160, 120), (320, 240)]),
        ("640x360", [144, 240, 360], [(256, 144), (426, 240), (640, 360)]),
    ],
)
async def test_a_dash_ladder_is_complete_and_readable(
    tmp_path: Path, size: str, heights: list[int], expected: list[tuple[int, int]]
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=3.0, size=size)
    info = await probe(clip)
    made = await ladder.make_variant("dash", clip, info, tmp_path, ladder=ladder.ladder_of(heights))
    mpd = made.directory / made.main
    names = manifest_files(mpd.read_text())
    on_disk = {p.name for p in made.directory.iterdir()} - {made.main}
    assert set(names) == on_disk
    streams = await asyncio.to_thread(_streams, made.directory, made.main)
    video = sorted((s["width"], s["height"]) for s in streams if s["codec_type"] == "video")
    assert video == expected
    assert [s["codec_type"] for s in streams].count("audio") == 1


def _streams(directory: Path, name: str) -> list[dict[str, object]]:
    probed = subprocess.run(
        [tools.executable("ffprobe"), "-v", "error", "-show_streams", "-of", "json", name],
        cwd=directory,
        capture_output=True,
        check=True,
        timeout=60,
    )
    streams: list[dict[str, object]] = json.loads(probed.stdout)["streams"]
    return streams


def test_every_rendition_shows_at_the_top_ones_aspect() -> None:
    top = commands.Rung("720p", 1280, 720, 2500, 128)
    assert commands.same_aspect(top, top) == "setsar=1"
    low = commands.Rung("240p", 426, 240, 400, 96)
    # 426x240 shown at 16:9: square-ish pixels a shade wider (640/639)
    assert commands.same_aspect(low, top) == "setsar=640/639:max=640"


def test_manifest_files_refuses_what_is_not_an_mpd() -> None:
    with pytest.raises(ValueError, match="not an MPD"):
        manifest_files("<html/>")
    with pytest.raises(ValueError, match="not an MPD"):
        manifest_files("not xml")
