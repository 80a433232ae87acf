"""Real clips from FFmpeg: H.264 MP4 (yuv420p, faststart) whose look is derived from the prompt.

The prompt's hash picks a moving source (``testsrc2``, ``mandelbrot``, ``gradients``) and a hue
shift; the prompt is drawn on the frames with ``drawtext`` when a font is found. A render
that fails with text (no font, no libfreetype, a glyph the font chokes on) is retried once
without it, so an odd prompt (CJK, emoji, quotes, ``%``) never fails a job.

FFmpeg runs through ``asyncio.create_subprocess_exec`` with an argument list, never a shell;
renders share one semaphore (``max_concurrent``); ``instant`` mode renders one clip per
(width, height, duration) once and serves it for every job (benchmarks: zero render time).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from aigc_hub.core import errors
from aigc_hub.media import tools

RenderMode = Literal["ffmpeg", "instant"]
FPS = 25
_FONT_CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",  # draws CJK too
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
)
_MAX_TEXT_CHARS = 48
_STDERR_TAIL = 2000


class RenderError(errors.HubError):
    """FFmpeg could not produce the clip; the message ends with FFmpeg's last words."""


def find_font() -> str | None:
    """The first usable font file of a short list, or None (then clips carry no text)."""
    return next((path for path in _FONT_CANDIDATES if os.path.isfile(path)), None)


def _look(prompt: str, width: int, height: int) -> tuple[str, int]:
    digest = hashlib.sha256(prompt.encode("utf-8", "replace")).digest()
    size = f"size={width}x{height}:rate={FPS}"  # -t bounds the length (mandelbrot has no duration)
    # a light and a dark colour: a gradient of two near colours would barely change as it
    # turns, and read as frozen video
    c0 = bytes(b | 0x80 for b in digest[2:5]).hex()
    c1 = bytes(b & 0x3F for b in digest[5:8]).hex()
    sources = (
        f"testsrc2={size}",
        f"mandelbrot={size}",
        # a seed from the prompt (the filter's default is random: the same prompt would
        # move differently each time) and a speed at which a one-second clip visibly moves
        f"gradients={size}:c0=0x{c0}:c1=0x{c1}:speed=0.2:seed={int.from_bytes(digest[8:12])}",
    )
    return sources[digest[0] % len(sources)], digest[1] * 360 // 256


def ffmpeg_args(
    prompt: str,
    width: int,
    height: int,
    duration_s: int,
    out: Path,
    textfile: Path | None,
    font: str | None,
    executable: str = "ffmpeg",
    black: bool = False,
) -> list[str]:
    """The FFmpeg command line for one clip (no shell: every value is its own argument);
    ``black``: an all-black clip, as a misbehaving model might return."""
    source, hue = _look(prompt, width, height)
    filters = [f"hue=h={hue}", "format=yuv420p"]
    if black:
        source, filters = f"color=c=black:size={width}x{height}:rate={FPS}", ["format=yuv420p"]
    elif textfile is not None and font is not None:
        # textfile= keeps the prompt out of filter syntax; expansion=none ignores '%'
        filters.append(
            f"drawtext=fontfile={font}:textfile={textfile}:expansion=none:fontcolor=white"
            f":fontsize={max(8, height // 12)}:box=1:boxcolor=black@0.5:x=(w-tw)/2:y=h-th-4"
        )
    return [
        executable, "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
        "-f", "lavfi", "-i", source,
        "-vf", ",".join(filters),
        "-t", str(duration_s), "-r", str(FPS),
        "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
        "-movflags", "+faststart", "-an",
        "-progress", "pipe:1", "-nostats",
        "-f", "mp4", str(out),
    ]  # fmt: skip


class Renderer:
    """Renders clips under ``work_dir`` with at most ``max_concurrent`` FFmpeg processes."""

    def __init__(
        self, work_dir: Path, *, mode: RenderMode = "ffmpeg", max_concurrent: int = 2
    ) -> None:
        self.work_dir = work_dir
        self.mode = mode
        self.font = find_font()
        self._slots = asyncio.Semaphore(max_concurrent)
        self._cache_locks: dict[tuple[int, int, int], asyncio.Lock] = {}

    async def render(
        self,
        prompt: str,
        width: int,
        height: int,
        duration_s: int,
        dest: Path,
        on_progress: Callable[[float], None] | None = None,
        black: bool = False,
    ) -> Path:
        """Produce the clip and return where it is (``dest``, or the shared cached clip)."""
        if self.mode == "instant" and not black:
            return await self._cached(width, height, duration_s)
        async with self._slots:
            await self._ffmpeg(prompt, width, height, duration_s, dest, on_progress, black)
        return dest

    async def _cached(self, width: int, height: int, duration_s: int) -> Path:
        key = (width, height, duration_s)
        path = self.work_dir / "cache" / f"{width}x{height}_{duration_s}s.mp4"
        lock = self._cache_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if not path.exists():
                async with self._slots:
                    await self._ffmpeg(
                        "local provider", width, height, duration_s, path, None, False
                    )
        return path

    async def _ffmpeg(
        self,
        prompt: str,
        width: int,
        height: int,
        duration_s: int,
        dest: Path,
        on_progress: Callable[[float], None] | None,
        black: bool,
    ) -> None:
        try:
            exe = tools.executable("ffmpeg")
        except tools.MediaToolMissing as exc:
            raise RenderError(str(exc)) from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.part")
        textfile = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.txt")
        text = " ".join(prompt.split())[:_MAX_TEXT_CHARS]
        try:
            if text and self.font is not None and not black:
                textfile.write_text(text, encoding="utf-8", errors="replace")
                try:
                    await _run(
                        ffmpeg_args(
                            prompt, width, height, duration_s, part, textfile, self.font, exe
                        ),
                        duration_s,
                        on_progress,
                    )
                    os.replace(part, dest)
                    return
                except RenderError:
                    pass  # fall back to a clip without text
            await _run(
                ffmpeg_args(prompt, width, height, duration_s, part, None, None, exe, black),
                duration_s,
                on_progress,
            )
            os.replace(part, dest)
        finally:
            for leftover in (part, textfile):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()


async def _run(
    args: list[str], duration_s: int, on_progress: Callable[[float], None] | None
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_task = asyncio.ensure_future(proc.stderr.read())
    try:
        async with asyncio.timeout(30 + 10 * duration_s):
            while line := await proc.stdout.readline():
                key, _, value = line.decode("ascii", "replace").strip().partition("=")
                if key == "out_time_us" and value.isdigit() and on_progress is not None:
                    on_progress(min(1.0, int(value) / 1e6 / duration_s))
            code = await proc.wait()
    except BaseException:  # timeout or the job was canceled: no orphan FFmpeg
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        stderr_task.cancel()
        raise
    stderr = (await stderr_task).decode("utf-8", "replace")[-_STDERR_TAIL:]
    if code != 0:
        raise RenderError(f"ffmpeg exited with {code}: {stderr.strip()}")
