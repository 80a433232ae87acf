"""What a media file is, and whether the hub will touch it: codec, size, duration, rate.

:func:`probe` is the gate every pipeline passes a file through before transcoding it. It
reads the file with ffprobe in the sandbox (:mod:`.sandbox`), behind the input whitelists
(:mod:`.inputs`), in two runs:

1. **Header only** (``-nofind_stream_info``): the container's own claims (stream count,
   durations, frame rates, picture sizes) are checked against :class:`MediaLimits` before a
   single frame is decoded. A file claiming 65535 pixels of width, nine hours, 250 000 fps or
   60 streams stops here.
2. **Stream analysis**: ffprobe decodes what it needs to fill the facts the header lacks
   (a PNG's size, an MPEG-4 Part 2 stream's size), within the same limits (the decoders
   refuse a picture past ``max_pixels`` from its header), and the facts are checked again.

The outcome is a :class:`MediaInfo` or :class:`MediaRefused` with a code. The older
:func:`probe_video` (fetched provider outputs) stays: it reads an MP4 in process through PyAV
(:func:`read_mp4`: the MP4 demuxer alone, no decoder, local files only), else asks
:func:`ffprobe_video`, which runs the same sandboxed reads; the same limits apply to both.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Final, Literal

from aigc_hub.media import inputs, sandbox
from aigc_hub.media.sandbox import MediaLimits, MediaRefused

MediaKind = Literal["video", "image", "audio"]
#: Codecs (ffprobe's ``codec_name``) a source may carry in its first video / audio stream.
VIDEO_CODECS: Final = frozenset(
    {"h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mjpeg", "png", "gif", "webp"}
)
AUDIO_CODECS: Final = frozenset({"aac", "mp3", "opus", "vorbis", "flac", "alac"})

#: libavformat's name for its MP4 demuxer (the ISO base media family: mov, mp4, 3gp…).
MP4_DEMUXER: Final = "mov,mp4,m4a,3gp,3g2,mj2"
#: What PyAV's demuxer may do in the hub's process. ``codec_whitelist`` names the decoders
#: its stream analysis may open: naming one that does not exist opens none.
IN_PROCESS: Final = {
    "format_whitelist": MP4_DEMUXER,
    "protocol_whitelist": "file",
    "codec_whitelist": "none",
}


class InvalidMedia(MediaRefused, ValueError):
    """The file is not a readable video."""

    def __init__(self, message: str, code: str = "unreadable") -> None:
        super().__init__(code, message)


@dataclass(frozen=True)
class MediaInfo:
    """A probed source's facts (picture sizes as displayed, i.e. after rotation)."""

    kind: MediaKind
    format_name: str
    size_bytes: int
    duration_ms: int  # 0 for a still image
    streams: int
    video_codec: str | None
    width: int | None
    height: int | None
    frame_rate_num: int | None
    frame_rate_den: int | None
    audio_codec: str | None  # None: no audio stream


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


async def probe(
    path: Path, limits: MediaLimits = sandbox.DEFAULT_LIMITS, *, scratch_root: Path | None = None
) -> MediaInfo:
    """``path``'s facts, or MediaRefused(code, reason) when the hub will not process it.

    Every limit is checked on the container's claims before anything decodes (module doc).
    Codes: those of :func:`inputs.stage`, "too_many_streams", "dimensions", "duration",
    "frame_rate", "codec", "unreadable", "timeout", "memory". ``scratch_root`` is where the
    job's private directory is made (and removed): on the source's filesystem the source is
    hard-linked, elsewhere (the default: the system's temporary directory) it is copied.
    Raises MediaToolMissing without ffprobe.
    """
    staged, data = await _read(path, limits, scratch_root)
    return _media_info(staged, data)


async def _read(
    path: Path, limits: MediaLimits, scratch_root: Path | None
) -> tuple[inputs.StagedInput, dict[str, Any]]:
    async with sandbox.scratch_dir(scratch_root) as job:
        staged = await asyncio.to_thread(inputs.stage, path, job, limits)
        header = await _ffprobe(staged, job, limits, analyse=False)
        _check_limits(header, limits)
        data = await _ffprobe(staged, job, limits, analyse=True)
        _check_limits(data, limits)
        return staged, data


async def _ffprobe(
    staged: inputs.StagedInput, job: Path, limits: MediaLimits, *, analyse: bool
) -> dict[str, Any]:
    args = ["-v", "error", "-hide_banner", "-print_format", "json", "-show_format"]
    args += ["-show_streams", *([] if analyse else ["-nofind_stream_info"])]
    result = await sandbox.run_tool(
        "ffprobe", [*args, *inputs.input_args(staged, limits)], cwd=job, limits=limits
    )
    text = result.stderr.decode(errors="replace")
    # These messages are how libav reports a limit it enforced (the exit status may be 0).
    if "exceeds max_streams" in text:
        raise MediaRefused("too_many_streams", f"more than {limits.max_streams} streams")
    if "Picture size" in text:
        raise MediaRefused("dimensions", _line_with(text, "Picture size"))
    if "not on whitelist" in text:
        raise MediaRefused("codec", _line_with(text, "not on whitelist"))
    if result.returncode != 0:
        raise (
            sandbox.refuse_failure(result, "ffprobe")
            if result.returncode < 0
            else (MediaRefused("unreadable", result.last_error()))
        )
    try:
        data = json.loads(result.stdout or b"{}")
    except ValueError:
        raise MediaRefused("unreadable", "ffprobe printed no facts") from None
    if not isinstance(data, dict):
        raise MediaRefused("unreadable", "ffprobe printed no facts")
    return data


def _line_with(text: str, needle: str) -> str:
    line = next(line for line in text.splitlines() if needle in line)
    # libav prefixes "[png @ 0x55…] [IMGUTILS @ 0x7ff…]": drop the addresses
    return line.rsplit("] ", 1)[-1].strip()[:300]


def _check_limits(data: dict[str, Any], limits: MediaLimits) -> None:
    streams = _streams(data)
    if len(streams) > limits.max_streams:
        raise MediaRefused(
            "too_many_streams", f"{len(streams)} streams; at most {limits.max_streams}"
        )
    duration = _duration_s(data)
    if duration is not None and duration > limits.max_duration_s:
        raise MediaRefused(
            "duration", f"{float(duration):.0f} s is longer than {limits.max_duration_s:g} s"
        )
    for s in streams:
        if s.get("codec_type") != "video":
            continue
        width, height = int(s.get("width") or 0), int(s.get("height") or 0)
        if (
            width > limits.max_width
            or height > limits.max_height
            or (width * height > limits.max_pixels)
        ):
            raise MediaRefused("dimensions", f"{width}x{height} is larger than allowed")
        rate = _rate(s)
        if rate is not None and rate > limits.max_frame_rate:
            raise MediaRefused(
                "frame_rate", f"{float(rate):.0f} fps is more than {limits.max_frame_rate:g}"
            )


def _media_info(staged: inputs.StagedInput, data: dict[str, Any]) -> MediaInfo:
    streams = _streams(data)
    video = [
        s
        for s in streams
        if s.get("codec_type") == "video" and not (s.get("disposition") or {}).get("attached_pic")
    ]
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    kind: MediaKind
    if staged.kind in inputs.IMAGE_KINDS:
        kind = "image"
    elif video:
        kind = "video"
    elif audio:
        kind = "audio"
    else:
        raise MediaRefused("unreadable", "no audio or video stream")
    if kind != "audio" and not video:
        raise MediaRefused("unreadable", "no picture")
    v = video[0] if video and kind != "audio" else None
    a = audio[0] if audio else None
    if v is not None and str(v.get("codec_name")) not in VIDEO_CODECS:
        raise MediaRefused(
            "codec", f"video codec {v.get('codec_name', 'unknown')!r} is not accepted"
        )
    if a is not None and not _audio_codec_ok(str(a.get("codec_name"))):
        raise MediaRefused(
            "codec", f"audio codec {a.get('codec_name', 'unknown')!r} is not accepted"
        )
    width = height = None
    num = den = None
    if v is not None:
        width, height = int(v.get("width") or 0), int(v.get("height") or 0)
        if not (width and height):
            raise MediaRefused("unreadable", "the picture size cannot be read")
        if _rotated(v):
            width, height = height, width
        rate = _rate(v) if kind == "video" else None
        if rate is not None:
            num, den = rate.numerator, rate.denominator
    duration = _duration_s(data) if kind != "image" else None
    return MediaInfo(
        kind=kind,
        format_name=str((data.get("format") or {}).get("format_name", staged.demuxer)),
        size_bytes=staged.size_bytes,
        duration_ms=int(duration * 1000) if duration is not None else 0,
        streams=len(streams),
        video_codec=str(v["codec_name"]) if v is not None else None,
        width=width,
        height=height,
        frame_rate_num=num,
        frame_rate_den=den,
        audio_codec=str(a["codec_name"]) if a is not None else None,
    )


def _audio_codec_ok(codec: str) -> bool:
    return codec in AUDIO_CODECS or codec.startswith("pcm_")


def _streams(data: dict[str, Any]) -> list[dict[str, Any]]:
    streams = data.get("streams")
    return [s for s in streams if isinstance(s, dict)] if isinstance(streams, list) else []


def _fraction(text: object) -> Fraction | None:
    """A positive exact number from ffprobe's "2.000000" or "25/1"; None for 0, 0/0 or junk."""
    try:
        value = Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def _rate(stream: dict[str, Any]) -> Fraction | None:
    # The average rate (frames / duration) is the truth for variable-rate files; r_frame_rate
    # (the least rate that fits every timestamp) can be a timebase artefact there.
    return _fraction(stream.get("avg_frame_rate")) or _fraction(stream.get("r_frame_rate"))


def _duration_s(data: dict[str, Any]) -> Fraction | None:
    """The longest duration any part of the file claims (the container's or a stream's)."""
    claims = [_fraction((data.get("format") or {}).get("duration"))]
    claims += [_fraction(s.get("duration")) for s in _streams(data)]
    known = [c for c in claims if c is not None]
    return max(known) if known else None


def _rotated(stream: dict[str, Any]) -> bool:
    for side in stream.get("side_data_list") or ():
        rotation = side.get("rotation") if isinstance(side, dict) else None
        if isinstance(rotation, int | float) and round(rotation) % 180 == 90:
            return True
    return False


# ---- fetched provider outputs (the generation pipeline's check before storing) ----


async def probe_video(
    path: Path, *, timeout_s: float = 30.0, limits: MediaLimits | None = None
) -> VideoInfo:
    """``path``'s video facts; InvalidMedia when it is not a readable video within limits.

    Reads an MP4 in process (:func:`read_mp4`), anything else with ffprobe, which raises
    MediaToolMissing (a configuration error, retried later) when it is needed and missing.
    The read runs in a worker thread so a slow or hostile file never stalls the event loop.
    """
    limits = limits or MediaLimits(timeout_s=timeout_s)
    found = await asyncio.to_thread(read_mp4, path, timeout_s=timeout_s, limits=limits)
    return (
        found
        if found is not None
        else await ffprobe_video(path, timeout_s=timeout_s, limits=limits)
    )


def read_mp4(
    path: Path, *, timeout_s: float = 30.0, limits: MediaLimits | None = None
) -> VideoInfo | None:
    """An MP4's video facts read in process (blocking); InvalidMedia when it is not a
    readable video or is past a limit; None when ffprobe must tell (see the module's doc)."""
    # Imported here: loading FFmpeg's libraries costs ≈80 ms, which every CLI call and hub
    # start would pay although only the fetcher probes.
    import av
    import av.error

    limits = limits or MediaLimits(timeout_s=timeout_s)
    if path.stat().st_size > limits.max_bytes:
        raise InvalidMedia(f"more than {limits.max_bytes} bytes", "too_large")
    try:
        with av.open(str(path), container_options=IN_PROCESS, timeout=timeout_s) as container:
            streams = container.streams.video
            if not streams:
                raise InvalidMedia("no video stream")
            if len(container.streams) > limits.max_streams:
                raise InvalidMedia(f"more than {limits.max_streams} streams", "too_many_streams")
            stream = streams[0]
            context = stream.codec_context
            if context is None or not (context.width and context.height):
                return None  # no decoder for the codec, or no size in the header
            if stream.duration is not None and stream.time_base is not None:
                micros = round(stream.duration * stream.time_base * 1_000_000)
            else:
                micros = container.duration or 0  # already in microseconds
            rate = stream.base_rate  # ffprobe's r_frame_rate; None where that is 0/0
            info = VideoInfo(
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
        raise InvalidMedia(f"probe timed out after {timeout_s:g} s", "timeout") from None
    except av.error.FFmpegError as exc:
        raise InvalidMedia(str(exc)[:300]) from None
    _check_video(info, limits)
    return info


async def ffprobe_video(
    path: Path, *, timeout_s: float = 30.0, limits: MediaLimits | None = None
) -> VideoInfo:
    """What ffprobe reads in ``path`` (sandboxed, as :func:`probe` reads it); InvalidMedia
    when it is not a readable video within limits."""
    limits = limits or MediaLimits(timeout_s=timeout_s)
    try:
        _staged, data = await _read(path, limits, None)
    except InvalidMedia:
        raise
    except MediaRefused as exc:
        raise InvalidMedia(exc.message, exc.code) from None
    streams = [s for s in _streams(data) if s.get("codec_type") == "video"]
    if not streams:
        raise InvalidMedia("no video stream")
    s = streams[0]
    num, _, den = str(s.get("r_frame_rate", "0/1")).partition("/")
    # Exact decimal, not float: "1.001000" s is 1001 ms (a float gives 1000.999…)
    duration = Fraction(str(s.get("duration") or data.get("format", {}).get("duration") or 0))
    info = VideoInfo(
        codec=str(s.get("codec_name", "")),
        width=int(s.get("width", 0)),
        height=int(s.get("height", 0)),
        duration_ms=int(duration * 1000),
        frame_rate_num=int(num or 0),
        frame_rate_den=int(den or 1),
        format_name=str(data.get("format", {}).get("format_name", "")),
    )
    _check_video(info, limits)
    return info


def _check_video(info: VideoInfo, limits: MediaLimits) -> None:
    if (
        info.width > limits.max_width
        or info.height > limits.max_height
        or (info.width * info.height > limits.max_pixels)
    ):
        raise InvalidMedia(f"{info.width}x{info.height} is larger than allowed", "dimensions")
    if info.duration_ms > limits.max_duration_s * 1000:
        raise InvalidMedia(f"longer than {limits.max_duration_s:g} s", "duration")
