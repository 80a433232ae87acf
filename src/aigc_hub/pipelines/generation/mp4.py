"""Read an MP4's video facts from its container header, without running ffprobe.

ffprobe ``-show_streams`` reads the same header boxes (``moov``: the movie and track
headers, the sample description, the time-to-sample table); it decodes no frame either.
Spawning it costs more than the rest of an output's handling, so :func:`read_header` reads
those boxes itself and answers only when the file is the plain case it fully understands:
an ``ftyp`` brand, one ``moov`` with a video track of a known codec, a constant frame rate,
and an ``mdat`` whose declared size fits in the file. Anything else is None, and the caller
asks ffprobe, which stays the judge of every file this reader does not vouch for.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

#: Sample entry four-character codes, as ffprobe names their codecs.
CODECS = {
    b"avc1": "h264",
    b"avc3": "h264",
    b"hvc1": "hevc",
    b"hev1": "hevc",
    b"av01": "av1",
    b"vp09": "vp9",
    b"mp4v": "mpeg4",
}
#: ffprobe's ``format_name`` for the ISO base media file family.
FORMAT_NAME = "mov,mp4,m4a,3gp,3g2,mj2"
#: The most header bytes read (a ``moov`` is kilobytes; a larger one is not the plain case).
MAX_MOOV = 4 * 1024 * 1024


@dataclass(frozen=True)
class Mp4Video:
    """The first video track's facts, as ffprobe reports them."""

    codec: str
    width: int
    height: int
    duration_ms: int
    frame_rate_num: int
    frame_rate_den: int


class _NotPlain(Exception):
    """The file is not the plain case this reader vouches for."""


def read_header(path: Path) -> Mp4Video | None:
    """The video facts in ``path``'s header, or None when ffprobe must tell."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            top = dict(_top_level(f, size))
        if b"ftyp" not in top or b"mdat" not in top or b"moov" not in top:
            return None
        offset, length = top[b"moov"]
        if length > MAX_MOOV:
            return None
        with path.open("rb") as f:
            f.seek(offset)
            moov = f.read(length)
        return _video_track(moov)
    except (_NotPlain, struct.error, OSError, ValueError):
        return None


def _top_level(f: BinaryIO, size: int) -> Iterator[tuple[bytes, tuple[int, int]]]:
    """Each top-level box's type with its payload's (offset, length); raises _NotPlain for a
    box that runs past the end of the file (truncated) or repeats."""
    seen: set[bytes] = set()
    at = 0
    while at < size:
        f.seek(at)
        head = f.read(16)
        if len(head) < 8:
            raise _NotPlain("short box header")
        length, kind = struct.unpack(">I4s", head[:8])
        header = 8
        if length == 1:
            (length,) = struct.unpack(">Q", head[8:16])
            header = 16
        elif length == 0:
            length = size - at
        if length < header or at + length > size:
            raise _NotPlain(f"box {kind!r} runs past the end")
        if kind in seen and kind in (b"ftyp", b"moov", b"mdat"):
            raise _NotPlain(f"second {kind!r}")
        seen.add(kind)
        yield kind, (at + header, length - header)
        at += length


def _children(data: bytes, start: int = 0, end: int | None = None) -> dict[bytes, list[bytes]]:
    """The boxes inside ``data[start:end]`` by type (payloads)."""
    end = len(data) if end is None else end
    found: dict[bytes, list[bytes]] = {}
    at = start
    while at + 8 <= end:
        length, kind = struct.unpack_from(">I4s", data, at)
        header = 8
        if length == 1:
            (length,) = struct.unpack_from(">Q", data, at + 8)
            header = 16
        if length < header or at + length > end:
            raise _NotPlain(f"box {kind!r} runs past its parent")
        found.setdefault(kind, []).append(data[at + header : at + length])
        at += length
    return found


def _one(boxes: dict[bytes, list[bytes]], kind: bytes) -> bytes:
    found = boxes.get(kind, [])
    if len(found) != 1:
        raise _NotPlain(f"{len(found)} {kind!r} boxes")
    return found[0]


def _video_track(moov: bytes) -> Mp4Video | None:
    videos = []
    for trak in _children(moov).get(b"trak", []):
        mdia = _children(_one(_children(trak), b"mdia"))
        hdlr = _one(mdia, b"hdlr")
        if hdlr[8:12] == b"vide":
            videos.append(mdia)
    if not videos:
        return None
    mdia = videos[0]
    timescale, duration = _media_header(_one(mdia, b"mdhd"))
    stbl = _children(_one(_children(_one(mdia, b"minf")), b"stbl"))
    codec, width, height = _sample_entry(_one(stbl, b"stsd"))
    delta = _constant_delta(_one(stbl, b"stts"))
    if timescale <= 0 or duration <= 0 or width <= 0 or height <= 0 or delta <= 0:
        return None
    common = math.gcd(timescale, delta)
    return Mp4Video(
        codec=codec,
        width=width,
        height=height,
        duration_ms=duration * 1000 // timescale,
        frame_rate_num=timescale // common,
        frame_rate_den=delta // common,
    )


def _media_header(mdhd: bytes) -> tuple[int, int]:
    """``mdhd``'s timescale and duration (version 0 or 1)."""
    if mdhd[0] == 1:
        timescale, duration = struct.unpack_from(">IQ", mdhd, 20)
    else:
        timescale, duration = struct.unpack_from(">II", mdhd, 12)
    return int(timescale), int(duration)


def _sample_entry(stsd: bytes) -> tuple[str, int, int]:
    """The one sample description's codec and coded size; _NotPlain for any other layout."""
    (count,) = struct.unpack_from(">I", stsd, 4)
    if count != 1:
        raise _NotPlain(f"{count} sample descriptions")
    _length, kind = struct.unpack_from(">I4s", stsd, 8)
    codec = CODECS.get(kind)
    if codec is None:
        raise _NotPlain(f"codec {kind!r}")
    # VisualSampleEntry: 8 header, 6 reserved, 2 data ref index, 16 pre-defined, then w, h.
    width, height = struct.unpack_from(">HH", stsd, 8 + 8 + 6 + 2 + 16)
    return codec, int(width), int(height)


def _constant_delta(stts: bytes) -> int:
    """The one sample duration of a constant-frame-rate track; _NotPlain otherwise."""
    (entries,) = struct.unpack_from(">I", stts, 4)
    if entries != 1:
        raise _NotPlain(f"{entries} time-to-sample entries")
    _count, delta = struct.unpack_from(">II", stts, 8)
    return int(delta)
