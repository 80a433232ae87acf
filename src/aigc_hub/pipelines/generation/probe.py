"""ffprobe a media file (an argument list, never a shell): is it the video it claims to be?"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from aigc_hub.core import errors
from aigc_hub.media import tools
from aigc_hub.pipelines.generation import mp4


class InvalidMedia(errors.PermanentError, ValueError):
    """The file is not a readable video."""


@dataclass(frozen=True)
class VideoInfo:
    codec: str
    width: int
    height: int
    duration_ms: int
    frame_rate_num: int
    frame_rate_den: int
    format_name: str


async def probe_video(path: Path, *, timeout_s: float = 30.0) -> VideoInfo:
    """What ffprobe reads in ``path``; InvalidMedia when it is not a readable video.

    A plain MP4 is read from its header in process (:mod:`.mp4`: the same boxes ffprobe
    reads, without spawning it); every other file goes to ffprobe. Raises MediaToolMissing
    (a configuration error, retried later) when ffprobe is needed and missing.
    """
    plain = mp4.read_header(path)
    if plain is not None:
        return VideoInfo(
            codec=plain.codec,
            width=plain.width,
            height=plain.height,
            duration_ms=plain.duration_ms,
            frame_rate_num=plain.frame_rate_num,
            frame_rate_den=plain.frame_rate_den,
            format_name=mp4.FORMAT_NAME,
        )
    return await ffprobe_video(path, timeout_s=timeout_s)


async def ffprobe_video(path: Path, *, timeout_s: float = 30.0) -> VideoInfo:
    """What ffprobe reads in ``path``; InvalidMedia when it is not a readable video."""
    proc = await asyncio.create_subprocess_exec(
        tools.executable("ffprobe"),
        "-v",
        "error",
        "-print_format",
        "json",
        "-show_format",
        "-show_streams",
        "-select_streams",
        "v:0",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise InvalidMedia("ffprobe timed out") from None
    if proc.returncode != 0:
        raise InvalidMedia(err.decode(errors="replace").strip()[:300] or "ffprobe failed")
    data = json.loads(out or b"{}")
    streams = data.get("streams") or []
    if not streams:
        raise InvalidMedia("no video stream")
    s = streams[0]
    num, _, den = str(s.get("r_frame_rate", "0/1")).partition("/")
    duration = float(s.get("duration") or data.get("format", {}).get("duration") or 0)
    return VideoInfo(
        codec=str(s.get("codec_name", "")),
        width=int(s.get("width", 0)),
        height=int(s.get("height", 0)),
        duration_ms=int(duration * 1000),
        frame_rate_num=int(num or 0),
        frame_rate_den=int(den or 1),
        format_name=str(data.get("format", {}).get("format_name", "")),
    )
