"""Sniffing tells a file's kind from its magic number alone; the ladder plan and the sizes
the variant commands ask for are pure rules, tested by table."""

from __future__ import annotations

import random

import pytest

from aigc_hub.media import commands, inputs
from aigc_hub.media.ladder import DEFAULT_LADDER, Rendition, plan_ladder
from aigc_hub.media.sniff import CONTENT_TYPES, SNIFF_BYTES, sniff

HEADS: dict[str, tuple[bytes, str | None]] = {
    "MP4 (isom)": (b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41", "mp4"),
    "MP4 (mp42)": (b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom", "mp4"),
    "QuickTime ftyp": (b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  ", "mov"),
    "QuickTime without ftyp": (b"\x00\x00\x10\x00moov\x00\x00\x00\x6cmvhd", "mov"),
    "WebM": (b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84webm", "webm"),
    "Matroska": (b"\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\x82\x88matroska", "mkv"),
    "PNG": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "png"),
    "JPEG": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "jpeg"),
    "GIF89a": (b"GIF89a\x10\x00\x10\x00", "gif"),
    "WebP": (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "webp"),
    "WAV": (b"RIFF\x24\x00\x00\x00WAVEfmt ", "wav"),
    "MP3 with ID3": (b"ID3\x04\x00\x00\x00\x00\x00\x00", "mp3"),
    "MP3 frame": (b"\xff\xfb\x90\x64\x00", "mp3"),
    "Ogg": (b"OggS\x00\x02\x00\x00", "ogg"),
    # what must never reach a demuxer
    "HLS playlist": (b"#EXTM3U\n#EXT-X-VERSION:3\n#EXTINF:2,\n/etc/passwd\n", None),
    "concat list": (b"ffconcat version 1.0\nfile '/etc/passwd'\n", None),
    "SVG": (b'<?xml version="1.0"?>\n<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///x">]>', None),
    "DASH manifest": (b'<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011">', None),
    "shell script": (b"#!/bin/sh\nrm -rf /\n", None),
    "ADTS AAC (layer bits 00)": (b"\xff\xf1\x50\x80\x02\x1f\xfc", None),
    "RIFF AVI": (b"RIFF\x24\x00\x00\x00AVI LIST", None),
    "empty": (b"", None),
}


@pytest.mark.parametrize(("head", "kind"), HEADS.values(), ids=HEADS.keys())
def test_sniff_names_the_kind_from_the_first_bytes_only(head: bytes, kind: str | None) -> None:
    assert sniff(head[:SNIFF_BYTES]) == kind


def test_random_bytes_are_no_kind() -> None:
    rng = random.Random(12)
    heads = [rng.randbytes(SNIFF_BYTES) for _ in range(2000)]
    # The only accidental matches random bytes can make are 2-byte MPEG audio syncs
    # (0xFF 0xE?/0xF? with layer III bits, ≈1 in 1000); nothing else matches by chance.
    assert {sniff(h) for h in heads} <= {None, "mp3"}
    assert sum(sniff(h) is not None for h in heads) < 10


def test_every_sniffed_kind_has_a_content_type_and_a_demuxer() -> None:
    kinds = {kind for _head, kind in HEADS.values() if kind}
    assert kinds == set(CONTENT_TYPES) == set(inputs.DEMUXERS)
    assert CONTENT_TYPES["mp4"] == "video/mp4" and CONTENT_TYPES["png"] == "image/png"


LADDERS: dict[str, tuple[int, list[tuple[str, int]]]] = {
    "1080p source: both rungs": (1080, [("360p", 360), ("720p", 720)]),
    "720p source: both rungs": (720, [("360p", 360), ("720p", 720)]),
    "480p source: 360p and its own": (480, [("360p", 360), ("480p", 480)]),
    "360p source: its own and half": (360, [("180p", 180), ("360p", 360)]),
    "240p source: its own and half": (240, [("120p", 120), ("240p", 240)]),
    "odd height: even sizes": (241, [("120p", 120), ("240p", 240)]),
}


@pytest.mark.parametrize(("height", "expected"), LADDERS.values(), ids=LADDERS.keys())
def test_plan_ladder_drops_taller_rungs_and_keeps_two(
    height: int, expected: list[tuple[str, int]]
) -> None:
    planned = plan_ladder(DEFAULT_LADDER, height)
    assert [(r.name, r.height) for r in planned] == expected
    assert all(r.height <= max(height, 2) for r in planned)


def test_a_made_up_rung_gets_bitrates_scaled_by_area() -> None:
    low, top = plan_ladder(DEFAULT_LADDER, 180)
    assert top == Rendition("180p", 180, 200, 96)  # 800 kbps x (180/360)^2
    assert low.height == 90 and low.video_kbps == 64  # the floor


@pytest.mark.parametrize(
    "ladder",
    [(), (Rendition("../x", 360, 800, 96), Rendition("720p", 720, 2500, 128))],
    ids=["empty", "a name that is a path"],
)
def test_a_bad_ladder_is_a_value_error(ladder: tuple[Rendition, ...]) -> None:
    with pytest.raises(ValueError):
        plan_ladder(ladder, 720)


@pytest.mark.parametrize(
    ("size", "to", "expected"),
    [
        ((1920, 1080), 720, (1280, 720)),
        ((1080, 1920), 720, (404, 720)),
        ((641, 361), 361, (640, 360)),
    ],
)
def test_fit_keeps_the_aspect_ratio_with_even_sides(
    size: tuple[int, int], to: int, expected: tuple[int, int]
) -> None:
    assert commands.fit(*size, to) == expected


@pytest.mark.parametrize(("rate", "frames"), [(25.0, 50), (29.97, 60), (None, 50), (0.2, 1)])
def test_the_gop_is_two_seconds_of_frames(rate: float | None, frames: int) -> None:
    assert commands.gop(rate) == frames
