"""What a file is, told by its first bytes (its magic number), never by its name or by the
Content-Type its sender declared (seed 004 §3.11: "magic number").

Only the kinds the hub accepts are recognised; anything else (a playlist, a concat list, an
SVG or other XML, a script, random bytes) is ``None`` and refused before any tool opens it.
Pure functions over bytes: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

#: How many leading bytes :func:`sniff` needs (the egress fetcher keeps this many).
SNIFF_BYTES: Final = 64

#: The content type stored and served for each sniffed kind.
CONTENT_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "mp4": "video/mp4",
        "mov": "video/quicktime",
        "webm": "video/webm",
        "mkv": "video/x-matroska",
        "png": "image/png",
        "jpeg": "image/jpeg",
        "gif": "image/gif",
        "webp": "image/webp",
        "wav": "audio/wav",
        "mp3": "audio/mpeg",
        "ogg": "audio/ogg",
    }
)

_EBML: Final = b"\x1a\x45\xdf\xa3"
#: Top-level QuickTime atoms that may open a .mov written without an ``ftyp`` (old files).
_QUICKTIME_ATOMS: Final = (b"moov", b"mdat", b"wide")


def sniff(head: bytes) -> str | None:
    """The kind of media ``head`` (a file's first :data:`SNIFF_BYTES` bytes) starts, or None.

    One of "mp4", "mov", "webm", "mkv", "png", "jpeg", "gif", "webp", "wav", "mp3", "ogg".
    """
    if head[4:8] == b"ftyp":
        return "mov" if head[8:12] == b"qt  " else "mp4"
    if head[4:8] in _QUICKTIME_ATOMS:
        return "mov"
    if head.startswith(_EBML):
        return _matroska_kind(head)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE"):
        return "webp" if head[8:12] == b"WEBP" else "wav"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"ID3") or _mpeg_audio_layer3(head):
        return "mp3"
    return None


def _matroska_kind(head: bytes) -> str:
    # The EBML header's DocType element (id 0x4282) says "webm" or "matroska"; WebM is the
    # stricter subset, so anything not declared webm is treated as Matroska.
    at = head.find(b"\x42\x82")
    if at >= 0 and at + 3 <= len(head):
        size = head[at + 2] & 0x7F  # a one-byte EBML size (0x80 | n) is what writers use
        if head[at + 3 : at + 3 + size] == b"webm":
            return "webm"
    return "mkv"


def _mpeg_audio_layer3(head: bytes) -> bool:
    # An MPEG audio frame sync (11 set bits) whose layer bits say Layer III; ADTS AAC shares
    # the sync but has layer 00, and is not accepted bare.
    return len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06 == 0x02
