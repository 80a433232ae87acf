"""The fetched output's probe reads an MP4 in process (PyAV) and says what ffprobe says, on
real clips made by FFmpeg; a truncated or foreign file is refused as ffprobe refuses it, and
what the header alone cannot tell (another container, no size in the header, a codec with
no decoder) is sent to ffprobe."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import av.logging
import pytest

from aigc_hub.media import probe, tools
from aigc_hub.media.sandbox import MediaLimits
from tests.support.provider import require_ffmpeg

pytestmark = pytest.mark.ffmpeg

TESTSRC = ["-f", "lavfi", "-i", "testsrc=size=160x90:rate=25", "-t", "1"]
H264 = ["-c:v", "libx264", "-pix_fmt", "yuv420p"]


def encode(dest: Path, *args: str) -> Path:
    """A clip made by FFmpeg with these arguments."""
    require_ffmpeg()
    subprocess.run([tools.executable("ffmpeg"), "-v", "error", "-y", *args, str(dest)], check=True)
    return dest


def h264(dest: Path, size: str, rate: str, seconds: int, *extra: str) -> Path:
    """A test-pattern H.264 clip."""
    source = ["-f", "lavfi", "-i", f"testsrc=size={size}:rate={rate}", "-t", str(seconds)]
    return encode(dest, *source, *H264, *extra)


def variable_rate(dest: Path) -> Path:
    """Every third frame kept after the tenth, and late ones slowed: no constant rate."""
    keep = "select='lt(n\\,10)+not(mod(n\\,3))',setpts=N/TB/25+if(gt(N\\,10)\\,0.3*N/TB/25\\,0)"
    return encode(dest, *TESTSRC, "-t", "2", "-vf", keep, "-fps_mode", "vfr", *H264)


def with_audio(dest: Path) -> Path:
    return encode(dest, *TESTSRC, "-f", "lavfi", "-i", "sine", "-t", "1", *H264, "-c:a", "aac")


CLIPS: dict[str, Callable[[Path], Path]] = {
    "25 fps": lambda d: h264(d / "a.mp4", "160x90", "25", 1),
    "30 fps, 2 s": lambda d: h264(d / "a.mp4", "320x180", "30", 2),
    "23.976 fps": lambda d: h264(d / "a.mp4", "640x360", "24000/1001", 1),
    "moov first": lambda d: h264(d / "a.mp4", "160x90", "25", 1, "-movflags", "+faststart"),
    "QuickTime": lambda d: h264(d / "a.mov", "160x90", "25", 1),
    "variable rate": lambda d: variable_rate(d / "a.mp4"),
    "with an audio track": lambda d: with_audio(d / "a.mp4"),
}


@pytest.fixture
def ffprobe_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths probe_video hands to ffprobe (which still runs)."""
    calls: list[Path] = []
    real: Callable[..., Awaitable[probe.VideoInfo]] = probe.ffprobe_video

    async def counted(path: Path, **options: Any) -> probe.VideoInfo:
        calls.append(path)
        return await real(path, **options)

    monkeypatch.setattr(probe, "ffprobe_video", counted)
    return calls


async def outcome(read: Awaitable[probe.VideoInfo]) -> probe.VideoInfo | type[Exception]:
    """The facts read, or the class of error raised."""
    try:
        return await read
    except probe.InvalidMedia:
        return probe.InvalidMedia


@pytest.mark.parametrize("make", CLIPS.values(), ids=CLIPS.keys())
async def test_an_mp4_is_read_in_process_and_says_what_ffprobe_says(
    tmp_path: Path, make: Callable[[Path], Path], ffprobe_calls: list[Path]
) -> None:
    path = make(tmp_path)
    seen = await probe.probe_video(path)
    assert ffprobe_calls == []  # answered in process
    assert seen == await probe.ffprobe_video(path)
    assert seen.width > 0 and seen.duration_ms > 0 and seen.frame_rate_num > 0


def test_the_in_process_read_opens_no_decoder(tmp_path: Path) -> None:
    path = h264(tmp_path / "a.mp4", "160x90", "25", 1)
    before = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)  # libav's messages reach Capture only when on
    try:
        with av.logging.Capture() as logs:
            found = probe.read_mp4(path)
    finally:
        av.logging.set_level(before)
    assert found is not None and found.width == 160
    # the stream analysis tried to open H.264's decoder and was refused
    assert any("(h264) not on whitelist" in message for _level, _name, message in logs), logs


async def test_a_duration_is_exact_to_the_millisecond_on_both_paths(tmp_path: Path) -> None:
    path = h264(tmp_path / "a.mp4", "160x90", "24000/1001", 1)  # 24 frames of 1001/24000 s
    assert (await probe.probe_video(path)).duration_ms == 1001
    assert (await probe.ffprobe_video(path)).duration_ms == 1001


def truncated(dest: Path, *extra: str) -> Path:
    whole = h264(dest.with_suffix(".whole.mp4"), "160x90", "25", 1, *extra)
    data = whole.read_bytes()
    dest.write_bytes(data[: len(data) // 2])
    return dest


def foreign(dest: Path) -> Path:
    dest.write_bytes(b"not a video at all, only words" * 10)
    return dest


DAMAGED: dict[str, Callable[[Path], Path]] = {
    "cut in half, header at the end": lambda d: truncated(d / "a.mp4"),
    "cut in half, header first": lambda d: truncated(d / "a.mp4", "-movflags", "+faststart"),
    "text named .mp4": lambda d: foreign(d / "a.mp4"),
    "audio only": lambda d: encode(d / "a.mp4", "-f", "lavfi", "-i", "sine", "-t", "1"),
}


@pytest.mark.parametrize("make", DAMAGED.values(), ids=DAMAGED.keys())
async def test_a_truncated_or_foreign_file_ends_as_ffprobe_ends_it_without_ffprobe(
    tmp_path: Path, make: Callable[[Path], Path], ffprobe_calls: list[Path]
) -> None:
    path = make(tmp_path)
    seen = await outcome(probe.probe_video(path))
    assert ffprobe_calls == []
    assert seen == await outcome(probe.ffprobe_video(path))


def unknown_codec(dest: Path) -> Path:
    """A real clip whose sample entry names a codec nobody decodes ('zzzz' for 'avc1')."""
    data = h264(dest.with_suffix(".whole.mp4"), "160x90", "25", 1).read_bytes()
    entry = data.index(b"avc1", data.index(b"stsd"))
    dest.write_bytes(data[:entry] + b"zzzz" + data[entry + 4 :])
    return dest


ELSEWHERE: dict[str, Callable[[Path], Path]] = {
    "Matroska": lambda d: encode(d / "a.mkv", *TESTSRC, *H264),
    "MPEG-4 Part 2 (no size in the MP4 header)": lambda d: encode(
        d / "a.mp4", *TESTSRC, "-c:v", "mpeg4"
    ),
    "a codec with no decoder": lambda d: unknown_codec(d / "a.mp4"),
}


@pytest.mark.parametrize("make", ELSEWHERE.values(), ids=ELSEWHERE.keys())
async def test_what_the_mp4_header_cannot_tell_is_read_by_ffprobe(
    tmp_path: Path, make: Callable[[Path], Path], ffprobe_calls: list[Path]
) -> None:
    path = make(tmp_path)
    seen = await probe.probe_video(path)
    assert ffprobe_calls == [path]
    assert seen.width == 160 and seen.height == 90


async def test_a_read_past_its_time_limit_is_invalid_media(tmp_path: Path) -> None:
    path = h264(tmp_path / "a.mp4", "160x90", "25", 1)
    with pytest.raises(probe.InvalidMedia, match="timed out"):
        await probe.probe_video(path, timeout_s=0)


async def test_the_limits_hold_on_both_paths(tmp_path: Path, ffprobe_calls: list[Path]) -> None:
    in_process = h264(tmp_path / "a.mp4", "160x90", "25", 1)
    by_ffprobe = encode(tmp_path / "a.mkv", *TESTSRC, *H264)
    narrow = MediaLimits(max_width=100)
    for path in (in_process, by_ffprobe):
        with pytest.raises(probe.InvalidMedia) as refused:
            await probe.probe_video(path, limits=narrow)
        assert refused.value.code == "dimensions"
    assert ffprobe_calls == [by_ffprobe]
