"""Small gray frames sampled evenly through a source, for checks that need no model
(black, frozen or wrong-length output: the moderation frame checks).

One sandboxed FFmpeg run decodes the source once and writes the frames as raw 8-bit luma to
its stdout; nothing touches the disk but the staged input.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from aigc_hub.media import commands, inputs, sandbox
from aigc_hub.media.probe import MediaInfo
from aigc_hub.media.sandbox import MediaLimits, MediaRefused


@dataclass(frozen=True)
class GrayFrame:
    """One sampled frame: 8-bit luma, row-major, ``len(pixels) == width * height``."""

    at_ms: int
    width: int
    height: int
    pixels: bytes


async def sample_frames(
    source: Path,
    info: MediaInfo,
    work_dir: Path,
    *,
    count: int = 8,
    width: int = 64,
    limits: MediaLimits = sandbox.DEFAULT_LIMITS,
) -> list[GrayFrame]:
    """Up to ``count`` frames ``width`` pixels wide, evenly spaced through ``source``.

    Frame ``i`` is taken at ``(i + 0.5) * duration / count``; a still image gives one frame.
    Fewer frames come back only when the stream ends early. Raises MediaRefused("profile")
    for a source with no picture, MediaRefused("unreadable") when no frame decodes, and the
    sandbox's refusals. The job's scratch directory is made under ``work_dir`` and removed.
    """
    if count < 1 or width < 1:
        raise ValueError("count and width must be positive")
    if info.kind == "audio" or not (info.width and info.height):
        raise MediaRefused("profile", "the source has no picture to sample")
    height = max(1, round(width * info.height / info.width))
    still = info.kind == "image"
    count = 1 if still else count
    duration_s = info.duration_ms / 1000
    size = width * height
    async with sandbox.scratch_dir(work_dir) as job:
        staged = await asyncio.to_thread(inputs.stage, source, job, limits)
        args = commands.gray_frames(
            inputs.input_args(staged, limits),
            (width, height),
            count=count,
            duration_s=None if still else duration_s,
        )
        result = await sandbox.run_tool(
            "ffmpeg", args, cwd=job, limits=limits, max_stdout=size * count
        )
    if result.returncode != 0:
        raise sandbox.refuse_failure(result, "frame sampling")
    data = result.stdout
    frames = [
        GrayFrame(
            at_ms=0 if still else round(((i + 0.5) * duration_s / count) * 1000),
            width=width,
            height=height,
            pixels=data[i * size : (i + 1) * size],
        )
        for i in range(len(data) // size)
    ]
    if not frames:
        raise MediaRefused("unreadable", "no frame could be decoded")
    return frames
