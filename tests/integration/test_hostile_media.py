"""Hostile media, made in the test: each file is refused with a reason or processed inside its
limits, no tool reads a canary outside its scratch directory or calls the network, and every
scratch directory is gone afterwards (seed 004 §3.11, malicious media and shell injection).

The local canary is a FIFO: a thread blocks opening it for writing and records a hit if
anything opens it for reading. The network canary is a loopback TCP server that counts
connections, whatever the protocol.
"""

from __future__ import annotations

import os
import random
import socketserver
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aigc_hub.media import inputs, probe, sandbox
from aigc_hub.media.frames import sample_frames
from aigc_hub.media.ladder import make_variant
from aigc_hub.media.sandbox import MediaLimits, MediaRefused
from tests.integration.media_clips import encode, make_clip

pytestmark = pytest.mark.ffmpeg


@dataclass
class Canaries:
    """A FIFO outside every scratch directory and a loopback TCP port; both count touches."""

    fifo: Path
    url: str
    local_hits: list[str] = field(default_factory=list)
    network_hits: list[str] = field(default_factory=list)


@pytest.fixture
def canaries(tmp_path: Path) -> Iterator[Canaries]:
    outside = tmp_path / "outside"
    outside.mkdir()
    fifo = outside / "canary"
    os.mkfifo(fifo)

    class Count(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            found.network_hits.append(str(self.client_address))

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Count)
    found = Canaries(fifo, f"http://127.0.0.1:{server.server_address[1]}/canary.ts")
    done = threading.Event()

    def watch() -> None:
        # open() for writing blocks until a reader opens the FIFO: that is the hit
        with open(fifo, "wb"):
            if not done.is_set():
                found.local_hits.append("opened for reading")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    yield found
    done.set()
    # unblock the watcher ourselves, after marking that this open is ours
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    watcher.join(timeout=5)
    os.close(fd)
    server.shutdown()
    server.server_close()
    assert not watcher.is_alive()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-clips")


@pytest.fixture(scope="module")
def good_mp4(clips: Path) -> Path:
    return make_clip(clips / "good.mp4", size="320x180", seconds=2)


@pytest.fixture(scope="module")
def good_bytes(good_mp4: Path, good_webm: Path) -> tuple[bytes, bytes]:
    """The good MP4's and WebM's bytes, for hostile edits."""
    return good_mp4.read_bytes(), good_webm.read_bytes()


@pytest.fixture(scope="module")
def good_webm(clips: Path) -> Path:
    video = ["-f", "lavfi", "-i", "testsrc2=size=320x180:rate=25", "-t", "1"]
    return encode(clips / "good.webm", *video, "-c:v", "libvpx-vp9", "-b:v", "100k")


def png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` (its pixels: 1 MiB of zeros, deflated)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * (1 << 20), 9)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def patched(data: bytes, at: Callable[[bytearray], None]) -> bytes:
    copy = bytearray(data)
    at(copy)
    return bytes(copy)


def absurd_duration(mp4: bytes) -> bytes:
    """Every sample lasts 16.7 M ticks and the track says it is that long: ~18 hours."""

    def edit(d: bytearray) -> None:
        stts = d.index(b"stts")
        struct.pack_into(">I", d, stts + 16, 0x01000000)  # first entry's sample delta
        struct.pack_into(">I", d, d.index(b"mdhd") + 20, 0xFFFFFFF0)  # media duration
        struct.pack_into(">I", d, d.index(b"mvhd") + 20, 0xFFFFFFF0)  # movie duration
        while (edts := d.find(b"edts")) >= 0:
            d[edts : edts + 4] = b"free"  # no edit list to cut the presentation short

    return patched(mp4, edit)


def absurd_frame_rate(mp4: bytes) -> bytes:
    """The video track's clock ticks 10 000 times faster: 250 000 fps."""

    def edit(d: bytearray) -> None:
        mdhd = d.index(b"mdhd")
        (scale,) = struct.unpack_from(">I", d, mdhd + 16)
        struct.pack_into(">I", d, mdhd + 16, scale * 10_000)

    return patched(mp4, edit)


def enormous_stream(webm: bytes) -> bytes:
    """The Matroska track header claims 65535 x 255 pixels (the VP9 frames are 320x180)."""

    def edit(d: bytearray) -> None:
        width = d.index(b"\xb0\x82\x01\x40")  # PixelWidth, 2 bytes, 320
        d[width + 2 : width + 4] = b"\xff\xff"
        height = d.index(b"\xba\x81\xb4")  # PixelHeight, 1 byte, 180
        d[height + 2] = 0xFF

    return patched(webm, edit)


def many_streams(dest: Path) -> bytes:
    maps = [arg for _ in range(60) for arg in ("-map", "0:a")]
    source = ["-f", "lavfi", "-i", "sine=duration=0.1"]
    return encode(dest, *source, *maps, "-c:a", "pcm_s16le").read_bytes()


def hostile_files(
    c: Canaries, clips: Path, mp4: bytes, webm: bytes
) -> dict[str, tuple[str, bytes]]:
    """name → (the refusal code expected, the file's bytes)."""
    outside = str(c.fifo)
    playlist = (
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n"
        f"#EXTINF:2,\n{outside}\n#EXTINF:2,\n../outside/canary\n#EXTINF:2,\n{c.url}\n"
        f"#EXTINF:2,\nfile:{outside}\n#EXT-X-ENDLIST\n"
    ).encode()
    concat = f"ffconcat version 1.0\nfile '{outside}'\nfile '../outside/canary'\nfile '{c.url}'\n"
    svg = (
        '<?xml version="1.0"?>\n'
        f'<!DOCTYPE svg [<!ENTITY local SYSTEM "file://{outside}">'
        f'<!ENTITY remote SYSTEM "{c.url}">]>\n'
        '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        "<text>&local;&remote;</text></svg>\n"
    ).encode()
    rng = random.Random(4)
    return {
        "playlist.m3u8": ("format", playlist),
        "playlist-named.mp4": ("format", playlist),
        "playlist-behind-an-mp4-magic.mp4": ("unreadable", mp4[:32] + b"\n" + playlist),
        "concat.txt": ("format", concat.encode()),
        "concat-named.mp4": ("format", concat.encode()),
        "external-entity.svg": ("format", svg),
        "external-entity-named.png": ("format", svg),
        "huge.png": ("dimensions", png(100_000, 100_000)),
        "past-the-pixel-limit.png": ("dimensions", png(7000, 7000)),
        "enormous-stream.webm": ("dimensions", enormous_stream(webm)),
        "60-streams.mkv": ("too_many_streams", many_streams(clips / "many.mkv")),
        "18-hours.mp4": ("duration", absurd_duration(mp4)),
        "250000-fps.mp4": ("frame_rate", absurd_frame_rate(mp4)),
        "zero-bytes.mp4": ("empty", b""),
        "header-only.mp4": ("unreadable", mp4[: len(mp4) // 2]),
        "random.mp4": ("format", rng.randbytes(100_000)),
        "random-after-ftyp.mp4": ("unreadable", mp4[:32] + rng.randbytes(100_000)),
    }


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def found(directory: Path, name: str) -> list[Path]:
    """Every file called ``name`` under ``directory``."""
    return list(directory.rglob(name))


async def test_every_hostile_file_is_refused_with_its_reason_and_touches_no_canary(
    tmp_path: Path, canaries: Canaries, clips: Path, good_bytes: tuple[bytes, bytes]
) -> None:
    files = hostile_files(canaries, clips, *good_bytes)
    uploads, scratch = tmp_path / "uploads", tmp_path / "scratch"
    uploads.mkdir()
    seen: dict[str, str] = {}
    for name, (_code, data) in files.items():
        (uploads / name).write_bytes(data)
        try:
            info = await probe.probe(uploads / name, scratch_root=scratch)
        except MediaRefused as refused:
            seen[name] = refused.code
            assert refused.message and str(uploads) not in refused.message
        else:
            seen[name] = f"accepted as {info}"
        assert listing(scratch) == []  # each job's scratch directory is gone
    assert seen == {name: code for name, (code, _data) in files.items()}
    assert canaries.local_hits == [] and canaries.network_hits == []


async def test_a_playlist_past_the_format_whitelist_still_reaches_no_network(
    tmp_path: Path, canaries: Canaries
) -> None:
    """Defence in depth: were the demuxer choice wrong, the protocol whitelist still holds."""
    (tmp_path / "input.m3u8").write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n{canaries.url}\n#EXT-X-ENDLIST\n"
    )
    staged = inputs.StagedInput("m3u8", "hls", "input.m3u8", 1)
    args = ["-v", "error", "-show_streams", *inputs.input_args(staged, MediaLimits())]
    result = await sandbox.run_tool("ffprobe", args, cwd=tmp_path, limits=MediaLimits())
    assert result.returncode != 0
    assert b"not on whitelist" in result.stderr or result.returncode < 0
    assert canaries.network_hits == []


NAMES = [
    "-i",
    "-y",
    ";rm -rf x",
    "$(touch pwned)",
    "`touch pwned`",
    "file:..",
    "concat:a|b",
    "a b.mp4",
]


async def test_file_names_that_look_like_options_or_shell_are_only_names(
    tmp_path: Path, good_bytes: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # where a shell or a relative option would leave its traces
    (work / "x").write_text("must survive")
    before = listing(work)
    for name in NAMES:
        source = tmp_path / name
        source.write_bytes(good_bytes[0])
        info = await probe.probe(source, scratch_root=tmp_path / "scratch")
        assert (info.kind, info.width, info.height) == ("video", 320, 180)
        made = await make_variant("poster", source, info, tmp_path / "variants" / name.strip("-."))
        assert (made.directory / "poster.jpg").stat().st_size > 0
        frames = await sample_frames(source, info, tmp_path / "scratch", count=2, width=16)
        assert len(frames) == 2
    assert listing(work) == before and (work / "x").read_text() == "must survive"
    assert found(tmp_path, "pwned") == [] and listing(tmp_path / "scratch") == []


async def test_a_source_that_is_a_fifo_or_a_directory_is_refused_without_blocking(
    tmp_path: Path, canaries: Canaries
) -> None:
    for source, code in ((canaries.fifo, "not_a_file"), (tmp_path, "not_a_file")):
        with pytest.raises(MediaRefused) as refused:
            await probe.probe(source, scratch_root=tmp_path / "scratch")
        assert refused.value.code == code
    assert canaries.local_hits == []  # opened non-blocking and refused: no reader stayed


async def test_a_job_past_its_deadline_is_killed_and_leaves_nothing(
    tmp_path: Path, clips: Path
) -> None:
    source = make_clip(clips / "long.mp4", size="1280x720", seconds=4)
    info = await probe.probe(source)
    tight = MediaLimits(timeout_s=0.3)
    before = children()  # a session's servers (SeaweedFS…) are children too
    with pytest.raises(MediaRefused) as refused:
        await make_variant("hls", source, info, tmp_path, limits=tight)
    assert refused.value.code == "timeout"
    assert listing(tmp_path) == []  # no half-made variant, no scratch directory
    assert children() == before  # the killed FFmpeg was reaped, not left running or a zombie


async def test_the_address_space_limit_fails_the_job_cleanly(
    tmp_path: Path, good_mp4: Path
) -> None:
    info = await probe.probe(good_mp4)
    small = MediaLimits(address_space_bytes=256 * 1024 * 1024)
    before = children()
    with pytest.raises(MediaRefused) as refused:
        await make_variant("hls", good_mp4, info, tmp_path, limits=small)
    # how an allocation failure shows depends on where it struck: a tool that names it is
    # "memory"; an encoder that cannot open, or a crash, is the tool's failure
    assert refused.value.code in ("memory", "tool_failed", "crashed"), refused.value.message
    assert listing(tmp_path) == [] and children() == before
    # the same job within the default limit succeeds: the limit, not the file, failed it
    assert (await make_variant("hls", good_mp4, info, tmp_path)).main == "master.m3u8"


def children() -> set[int]:
    """This process's child processes (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found
