"""Is a fetched output the video it claims to be? Its codec, size, duration and frame rate.

An MP4, the container providers return and the hub stores, is read in process through PyAV,
which links the libavformat ffprobe runs: the same demuxer, the same stream analysis, hence
the same answer, without spawning a process per output. What runs in the hub's process is
kept to the least that answers: the MP4 demuxer alone (other containers, and those that
follow references such as playlists, are never opened here), local files only, and no
decoder (the facts come from the container header and packet timestamps, no frame is
decoded). Two cases go to ffprobe, in its own process: a container other than MP4, and a
video stream whose size the header does not give or whose codec PyAV has no decoder for. Either
way the outcome is a VideoInfo or InvalidMedia, bounded by the same time limit.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Final

from aigc_hub.core import errors
from aigc_hub.media import tools

#: libavformat's name for its MP4 demuxer (the ISO base media family: mov, mp4, 3gp…).
MP4_DEMUXER: Final = "mov,mp4,m4a,3gp,3g2,mj2"
#: What the demuxer may do in the hub's process. ``codec_whitelist`` names the decoders its
#: stream analysis may open: naming one that does not exist opens none.
IN_PROCESS: Final = {
    "format_whitelist": MP4_DEMUXER,
    "protocol_whitelist": "file",
    "codec_whitelist": "none",
}


class InvalidMedia(errors.PermanentError, ValueError):
    """The file is not a readable video."""


@dataclass(frozen=True)
class VideoInfo:
    """The first video stream's facts, as ffprobe reports them."""

    codec: str
    width: int
    height: int
    duration_ms: int
    frame_rate_num: int
    frame_rate_den: int
    format_name: str


async def probe_video(path: Path, *, timeout_s: float = 30.0) -> VideoInfo:
    """``path``'s video facts; InvalidMedia when it is not a readable video.

    Reads an MP4 in process (:func:`read_mp4`), anything else with ffprobe, which raises
    MediaToolMissing (a configuration error, retried later) when it is needed and missing.
    The read runs in a worker thread so a slow or hostile file never stalls the event loop.
    """
    found = await asyncio.to_thread(read_mp4, path, timeout_s=timeout_s)
    return found if found is not None else await ffprobe_video(path, timeout_s=timeout_s)


def read_mp4(path: Path, *, timeout_s: float = 30.0) -> VideoInfo | None:
    """An MP4's video facts read in process (blocking); InvalidMedia when it is not a
    readable video; None when ffprobe must tell (see the module's docstring)."""
    # Imported here: loading FFmpeg's libraries costs ≈80 ms, which every CLI call and hub
    # start would pay although only the fetcher probes.
    import av
    import av.error

    try:
        with av.open(str(path), container_options=IN_PROCESS, timeout=timeout_s) as container:
            streams = container.streams.video
            if not streams:
                raise InvalidMedia("no video stream")
            stream = streams[0]
            context = stream.codec_context
            if context is None or not (context.width and context.height):
                return None  # no decoder for the codec, or no size in the header
            if stream.duration is not None and stream.time_base is not None:
                micros = round(stream.duration * stream.time_base * 1_000_000)
            else:
                micros = container.duration or 0  # already in microseconds
            rate = stream.base_rate  # ffprobe's r_frame_rate; None where that is 0/0
            return VideoInfo(
                codec=context.codec.canonical_name,
                width=context.width,
                height=context.height,
                # ffprobe prints whole microseconds; ms are those, rounded down
                duration_ms=micros // 1000,
                frame_rate_num=rate.numerator if rate else 0,
                frame_rate_den=rate.denominator if rate else 0,
                format_name=container.format.name,
            )
    except av.error.ArgumentError:
        return None  # EINVAL is how libavformat refuses a container off the whitelist
    except av.error.ExitError:
        raise InvalidMedia(f"probe timed out after {timeout_s:g} s") from None
    except av.error.FFmpegError as exc:
        raise InvalidMedia(str(exc)[:300]) from None


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
    # Exact decimal, not float: "1.001000" s is 1001 ms (a float gives 1000.999…)
    duration = Fraction(str(s.get("duration") or data.get("format", {}).get("duration") or 0))
    return VideoInfo(
        codec=str(s.get("codec_name", "")),
        width=int(s.get("width", 0)),
        height=int(s.get("height", 0)),
        duration_ms=int(duration * 1000),
        frame_rate_num=int(num or 0),
        frame_rate_den=int(den or 1),
        format_name=str(data.get("format", {}).get("format_name", "")),
    )
