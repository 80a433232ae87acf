"""The variants a source gets: a proxy MP4, an HLS ladder, a poster, a thumbnail strip and an
audio waveform (seed 004 §3.3.3-9, §3.6.5), and an MPEG-DASH ladder (seed 002's transcoder).

:func:`make_variant` makes one of them from a probed source, as one sandboxed FFmpeg run in a
scratch directory of its own, and moves the finished files into ``out_dir/<profile>/``: a
failed or killed run leaves nothing there. The variant is a pure function of the source and
:data:`PIPELINE_VERSION`, which is part of the variant's job key, so a change of settings
here must change the version.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aigc_hub.media import commands, inputs, sandbox
from aigc_hub.media.probe import MediaInfo
from aigc_hub.media.sandbox import MediaLimits, MediaRefused

PIPELINE_VERSION: Final = "media-v1"
PROFILES: Final = ("proxy", "hls", "poster", "thumbnails", "waveform", "dash")
#: The profiles each kind of source gets.
KIND_PROFILES: Final = {
    "video": PROFILES,
    "image": ("poster",),
    "audio": ("waveform",),
}
MAIN_FILES: Final = {
    "proxy": ("proxy.mp4", "video/mp4"),
    "hls": ("master.m3u8", "application/vnd.apple.mpegurl"),
    "poster": ("poster.jpg", "image/jpeg"),
    "thumbnails": ("thumbnails.jpg", "image/jpeg"),
    "waveform": ("waveform.png", "image/png"),
    "dash": ("manifest.mpd", "application/dash+xml"),
}
#: The profiles that are rendition ladders (made from :func:`plan_ladder`).
LADDERS: Final = ("hls", "dash")
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")


@dataclass(frozen=True)
class Rendition:
    """One rung of an HLS ladder, named for its height ("360p")."""

    name: str
    height: int
    video_kbps: int
    audio_kbps: int


DEFAULT_LADDER: Final = (Rendition("360p", 360, 800, 96), Rendition("720p", 720, 2500, 128))


@dataclass(frozen=True)
class VariantFiles:
    """A finished variant: ``directory`` holds its files and nothing else."""

    profile: str
    directory: Path
    main: str  # relative name of the main file: "proxy.mp4", "master.m3u8", …
    content_type: str  # of main
    width: int | None
    height: int | None
    duration_ms: int | None
    cpu_s: float  # the FFmpeg run's CPU seconds


def profiles_for(info: MediaInfo) -> tuple[str, ...]:
    """The profiles :func:`make_variant` makes for a source of this kind."""
    return KIND_PROFILES[info.kind]


def plan_ladder(ladder: Sequence[Rendition], source_height: int) -> list[Rendition]:
    """The renditions for a source ``source_height`` pixels high, lowest first.

    Renditions taller than the source are dropped, but two always remain: a small source
    gets its own height on top and, when no rung is left below it, half its height.
    Bitrates of a made-up rung scale with its area from the nearest rung of ``ladder``.
    """
    if not ladder:
        raise ValueError("an HLS ladder needs at least one rendition")
    for r in ladder:
        if not _NAME.fullmatch(r.name):
            raise ValueError(f"rendition name {r.name!r}: letters, digits, '-' and '_' only")
    rungs = sorted(ladder, key=lambda r: r.height)
    kept = [r for r in rungs if r.height <= source_height]
    if len(kept) < 2:
        top = max(2, source_height // 2 * 2)
        if not kept or kept[-1].height < top:
            kept.append(_scaled(rungs, top, f"{top}p"))
        if len(kept) < 2:  # the one rung left is the source's own height
            low = max(2, top // 4 * 2)
            kept.insert(0, _scaled(rungs, low, f"{low}p" if low != top else f"{low}p-low"))
    if len({r.name for r in kept}) != len(kept):
        raise ValueError(f"rendition names repeat: {[r.name for r in kept]}")
    return kept


def ladder_of(
    heights: Sequence[int], base: Sequence[Rendition] = DEFAULT_LADDER
) -> list[Rendition]:
    """A ladder of the given heights (``"<h>p"``), bitrates scaled by area from the nearest
    rung of ``base``; lowest first."""
    return [_scaled(base, h, f"{h}p") for h in sorted(set(heights))]


def _scaled(rungs: Sequence[Rendition], height: int, name: str) -> Rendition:
    base = min(rungs, key=lambda r: abs(r.height - height))
    kbps = max(64, round(base.video_kbps * (height / base.height) ** 2))
    return Rendition(name, height, kbps, base.audio_kbps)


async def make_variant(
    profile: str,
    source: Path,
    info: MediaInfo,
    out_dir: Path,
    *,
    limits: MediaLimits = sandbox.DEFAULT_LIMITS,
    ladder: Sequence[Rendition] = DEFAULT_LADDER,
) -> VariantFiles:
    """Make ``profile`` of ``source`` (probed as ``info``) into ``out_dir/<profile>/``.

    Replaces what an earlier run left there. The run's scratch directory is made inside
    ``out_dir`` (so the source can be hard-linked in and the result renamed into place when
    both are on one filesystem) and removed afterwards. Raises ValueError for an unknown
    profile or a bad ladder; MediaRefused("profile") when the source's kind has no such variant,
    MediaRefused("format") when the file no longer is what was probed, and the sandbox's
    refusals ("timeout", "memory", "tool_failed"…) when FFmpeg does not finish.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown variant profile {profile!r}; one of {PROFILES}")
    if profile not in profiles_for(info):
        raise MediaRefused("profile", f"a {info.kind} source has no {profile} variant")
    rungs = plan_ladder(ladder, info.height or 0) if profile in LADDERS else []
    dest = out_dir / profile
    async with sandbox.scratch_dir(out_dir) as job:
        staged = await asyncio.to_thread(inputs.stage, source, job, limits)
        if staged.demuxer not in info.format_name.split(","):
            raise MediaRefused("format", "the file is not what was probed")
        (job / "out").mkdir()
        args, size = _command(profile, staged, info, limits, rungs)
        result = await sandbox.run_tool("ffmpeg", args, cwd=job, limits=limits)
        main, content_type = MAIN_FILES[profile]
        if result.returncode != 0:
            raise sandbox.refuse_failure(result, f"{profile} variant")
        if not (job / "out" / main).is_file():
            raise MediaRefused("unreadable", f"{profile} variant: no frame could be decoded")
        await asyncio.to_thread(_replace, job / "out", dest)
    return VariantFiles(
        profile=profile,
        directory=dest,
        main=main,
        content_type=content_type,
        width=size[0] if size else None,
        height=size[1] if size else None,
        duration_ms=info.duration_ms if profile in ("proxy", *LADDERS) else None,
        cpu_s=result.cpu_s,
    )


def _command(
    profile: str,
    staged: inputs.StagedInput,
    info: MediaInfo,
    limits: MediaLimits,
    rungs: Sequence[Rendition],
) -> tuple[list[str], tuple[int, int] | None]:
    """The FFmpeg arguments for ``profile`` and the size of its main picture, if any."""
    source = inputs.input_args(staged, limits)
    duration_s = info.duration_ms / 1000
    # Never encode past what the probe saw: a header that understates its length would
    # otherwise buy unbounded work (the timeout is the last line, this the first).
    max_s = min(duration_s + 1, limits.max_duration_s)
    has_audio = info.audio_codec is not None
    if profile == "waveform":
        return commands.waveform(source if has_audio else None, max_s=max_s), commands.WAVEFORM_SIZE
    width, height = info.width or 0, info.height or 0
    frame = commands.fit(width, height, min(height, commands.PROXY_MAX_HEIGHT))
    rate = (
        info.frame_rate_num / info.frame_rate_den
        if info.frame_rate_num and info.frame_rate_den
        else None
    )
    if profile == "proxy":
        return commands.proxy(source, frame, has_audio=has_audio, max_s=max_s), frame
    if profile in LADDERS:
        ladder = [
            commands.Rung(
                r.name, *commands.fit(width, height, r.height), r.video_kbps, r.audio_kbps
            )
            for r in rungs
        ]
        build = commands.hls if profile == "hls" else commands.dash
        args = build(source, ladder, has_audio=has_audio, frame_rate=rate, max_s=max_s)
        return args, (ladder[-1].width, ladder[-1].height)
    if profile == "poster":
        # a tenth in: past a fade from black, and always inside the clip
        seek = duration_s / 10 if info.kind == "video" else None
        return commands.poster(inputs.input_args(staged, limits, seek_s=seek), frame), frame
    tile = (commands.THUMB_WIDTH, commands.even(commands.THUMB_WIDTH * height / max(width, 1)))
    strip = (tile[0] * commands.THUMB_COUNT, tile[1])
    return commands.thumbnails(source, tile, duration_s=duration_s), strip


def _replace(built: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)  # an earlier run's files: the variant is rebuilt whole
    os.replace(built, dest)
