"""The fetched output's probe reads a plain MP4's header in process and agrees with ffprobe;
anything it does not vouch for (truncated, not an MP4, variable frame rate) goes to ffprobe."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aigc_hub.media import tools
from aigc_hub.pipelines.generation import mp4, probe
from tests.support.provider import require_ffmpeg

pytestmark = pytest.mark.ffmpeg


def encode(dest: Path, size: str, rate: str, seconds: int, *extra: str) -> Path:
    """A test-pattern H.264 clip made by FFmpeg."""
    require_ffmpeg()
    subprocess.run(
        [tools.executable("ffmpeg"), "-v", "error", "-y", "-f", "lavfi",
         "-i", f"testsrc=size={size}:rate={rate}", "-t", str(seconds),
         "-c:v", "libx264", "-pix_fmt", "yuv420p", *extra, str(dest)],
        check=True,
    )  # fmt: skip
    return dest


CLIPS = {
    "25 fps": ("160x90", "25", 1, ()),
    "30 fps, 2 s": ("320x180", "30", 2, ()),
    "23.976 fps": ("640x360", "24000/1001", 1, ()),
    "moov first": ("160x90", "25", 1, ("-movflags", "+faststart")),
}


@pytest.mark.parametrize("clip", CLIPS.values(), ids=CLIPS.keys())
async def test_a_plain_mp4_header_says_what_ffprobe_says(
    tmp_path: Path, clip: tuple[str, str, int, tuple[str, ...]]
) -> None:
    size, rate, seconds, extra = clip
    path = encode(tmp_path / "clip.mp4", size, rate, seconds, *extra)
    header = mp4.read_header(path)
    assert header is not None
    seen = await probe.probe_video(path)
    told = await probe.ffprobe_video(path)
    assert (seen.codec, seen.width, seen.height) == (told.codec, told.width, told.height)
    assert (seen.frame_rate_num, seen.frame_rate_den) == (told.frame_rate_num, told.frame_rate_den)
    assert seen.format_name == told.format_name
    # ffprobe's figure passes through a float (1.001 s can print as 1000 ms); ours is exact
    assert abs(seen.duration_ms - told.duration_ms) <= 1


async def test_a_truncated_or_foreign_file_is_left_to_ffprobe(tmp_path: Path) -> None:
    whole = encode(tmp_path / "whole.mp4", "160x90", "25", 1)
    data = whole.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    text = tmp_path / "text.mp4"
    text.write_bytes(b"not a video at all, only words" * 10)
    for path in (cut, text):
        assert mp4.read_header(path) is None
        with pytest.raises(probe.InvalidMedia):
            await probe.probe_video(path)  # ffprobe judged it
