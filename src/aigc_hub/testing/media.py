"""Fake video bytes and a probe that reads them: output checks without FFmpeg.

:func:`fake_video` makes a few bytes that say what video they pretend to be;
:class:`FakeProbe` reads that back as a :class:`VideoInfo` and raises
:class:`InvalidMedia` for anything else, as ``probe_video`` does for an unreadable file.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from aigc_hub.media.probe import InvalidMedia, VideoInfo

#: The first bytes of every fake video.
MAGIC = b"AIGC-HUB-FAKE-VIDEO\n"


def fake_video(
    *,
    width: int = 320,
    height: int = 180,
    duration_ms: int = 2000,
    codec: str = "h264",
    frame_rate: tuple[int, int] = (24, 1),
) -> bytes:
    """Bytes :class:`FakeProbe` reads as a video with these properties."""
    info = VideoInfo(
        codec=codec,
        width=width,
        height=height,
        duration_ms=duration_ms,
        frame_rate_num=frame_rate[0],
        frame_rate_den=frame_rate[1],
        format_name="mov,mp4,m4a,3gp,3g2,mj2",
    )
    return MAGIC + json.dumps(asdict(info), sort_keys=True).encode()


class FakeProbe:
    """A ``VideoProbe`` for tests: reads :func:`fake_video` headers; remembers what it probed."""

    def __init__(self) -> None:
        self.probed: list[Path] = []

    async def __call__(self, path: Path) -> VideoInfo:
        """The VideoInfo written by :func:`fake_video`; InvalidMedia for any other bytes."""
        self.probed.append(path)
        data = path.read_bytes()  # noqa: ASYNC240 - a few bytes; no thread keeps it deterministic
        if not data.startswith(MAGIC):
            raise InvalidMedia("not a video (no fake video header)")
        try:
            return VideoInfo(**json.loads(data[len(MAGIC) :]))
        except (ValueError, TypeError) as exc:
            raise InvalidMedia(f"damaged fake video header: {exc}") from None
