"""Every variant of real clips made by FFmpeg in the test, read back by ffprobe: the proxy,
the HLS ladder (master and every rendition), the poster, the thumbnail strip and the
waveform; a clip without sound, a small clip and a still image; gray frame samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aigc_hub.media import ladder, probe
from aigc_hub.media.frames import sample_frames
from aigc_hub.media.ladder import make_variant
from aigc_hub.media.sandbox import MediaRefused
from tests.integration.media_clips import (
    drawn_rows,
    encode,
    make_clip,
    picture_size,
    read_playlist,
)

pytestmark = pytest.mark.ffmpeg


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("clips")


@pytest.fixture(scope="module")
def hd(clips: Path) -> Path:
    """3.5 s of 1280x720 at 25 fps with a 440 Hz tone."""
    return make_clip(clips / "hd.mp4", seconds=3.5)


@pytest.fixture(scope="module")
def mute(clips: Path) -> Path:
    """3 s of 320x240, no audio stream."""
    return make_clip(clips / "mute.mp4", size="320x240", seconds=3, audio=False)


def names(directory: Path) -> list[str]:
    """What ``directory`` holds, sorted."""
    return sorted(p.name for p in directory.iterdir())


def only_files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def stream_infs(master: str) -> list[tuple[dict[str, str], str]]:
    """(attributes, URI) of each EXT-X-STREAM-INF in a master playlist."""
    lines = [line for line in master.splitlines() if line.strip()]
    found = []
    for i, line in enumerate(lines):
        if line.startswith("#EXT-X-STREAM-INF:"):
            attrs = dict(re.findall(r'([A-Z-]+)=("[^"]*"|[^,]*)', line.split(":", 1)[1]))
            found.append(({k: v.strip('"') for k, v in attrs.items()}, lines[i + 1]))
    return found


async def test_the_hls_ladder_is_a_master_playlist_over_two_renditions_ffprobe_reads(
    hd: Path, tmp_path: Path
) -> None:
    info = await probe.probe(hd)
    made = await make_variant("hls", hd, info, tmp_path)
    assert made.directory == tmp_path / "hls" and made.main == "master.m3u8"
    assert made.content_type == "application/vnd.apple.mpegurl"
    assert (made.width, made.height) == (1280, 720) and made.cpu_s > 0
    assert names(tmp_path) == ["hls"]  # the scratch dir is gone

    renditions = stream_infs((made.directory / "master.m3u8").read_text())
    assert [uri for _a, uri in renditions] == ["360p/index.m3u8", "720p/index.m3u8"]
    assert [a["RESOLUTION"] for a, _u in renditions] == ["640x360", "1280x720"]
    for attrs, _uri in renditions:
        assert int(attrs["BANDWIDTH"]) > 0
        assert attrs["CODECS"].startswith("avc1.") and "mp4a.40.2" in attrs["CODECS"]
    # a player's demuxer opens the master (every rendition in it) and each rendition
    master = read_playlist(made.directory / "master.m3u8")
    assert master.format_name == "hls"
    assert [(w, h) for kind, _c, w, h in master.streams if kind == "video"] == [
        (640, 360),
        (1280, 720),
    ]
    for attrs, uri in renditions:
        seen = read_playlist(made.directory / uri)
        video = [s for s in seen.streams if s[0] == "video"]
        audio = [s for s in seen.streams if s[0] == "audio"]
        assert f"{video[0][2]}x{video[0][3]}" == attrs["RESOLUTION"]
        assert video[0][1] == "h264" and audio[0][1] == "aac"
        assert 3.4 < seen.duration_s < 3.7
        playlist = (made.directory / uri).read_text()
        # a keyframe every 2 s: the segments are cut on time, not once at the end
        lengths = [float(x) for x in re.findall(r"#EXTINF:([\d.]+),", playlist)]
        assert len(lengths) == 2 and abs(lengths[0] - 2.0) < 0.05, lengths
        assert "#EXT-X-ENDLIST" in playlist and "://" not in playlist
    assert only_files(made.directory) == {
        "master.m3u8",
        "360p/init_0.mp4",
        "720p/init_1.mp4",
        *(
            f"{n}/{f}"
            for n in ("360p", "720p")
            for f in ("index.m3u8", "seg_000.m4s", "seg_001.m4s")
        ),
    }


async def test_the_proxy_is_a_faststart_h264_aac_mp4_no_taller_than_720p(
    hd: Path, tmp_path: Path
) -> None:
    info = await probe.probe(hd)
    made = await make_variant("proxy", hd, info, tmp_path)
    assert only_files(made.directory) == {"proxy.mp4"}
    seen = await probe.probe(made.directory / "proxy.mp4")
    assert (seen.video_codec, seen.audio_codec) == ("h264", "aac")
    assert (seen.width, seen.height) == (made.width, made.height) == (1280, 720)
    assert abs(seen.duration_ms - info.duration_ms) < 100
    data = (made.directory / "proxy.mp4").read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # faststart: playable while loading


async def test_poster_strip_and_waveform_are_images_of_their_stated_sizes(
    hd: Path, tmp_path: Path
) -> None:
    info = await probe.probe(hd)
    expected = {"poster": (1280, 720), "thumbnails": (1600, 90), "waveform": (1280, 240)}
    for profile, size in expected.items():
        made = await make_variant(profile, hd, info, tmp_path)
        main = made.directory / made.main
        assert only_files(made.directory) == {made.main}
        assert (made.width, made.height) == size == picture_size(main)
        assert made.content_type == {"jpg": "image/jpeg", "png": "image/png"}[main.suffix[1:]]
    assert names(tmp_path) == sorted(expected)
    # the tone draws a band around the middle line, well wider than silence's flat line
    rows = drawn_rows(tmp_path / "waveform" / "waveform.png")
    assert max(rows) - min(rows) > 10 and min(rows) < 120 < max(rows), rows


async def test_a_small_clip_without_sound_gets_every_variant(mute: Path, tmp_path: Path) -> None:
    info = await probe.probe(mute)
    assert info.audio_codec is None and info.height == 240
    made = {p: await make_variant(p, mute, info, tmp_path) for p in ladder.profiles_for(info)}
    assert set(made) == set(ladder.PROFILES)
    renditions = stream_infs((made["hls"].directory / "master.m3u8").read_text())
    # no rung of the default ladder fits under 240 p: its own height and half of it
    assert [(a["RESOLUTION"], uri) for a, uri in renditions] == [
        ("160x120", "120p/index.m3u8"),
        ("320x240", "240p/index.m3u8"),
    ]
    assert all("mp4a" not in a["CODECS"] for a, _u in renditions)
    for _a, uri in renditions:
        assert [s[0] for s in read_playlist(made["hls"].directory / uri).streams] == ["video"]
    assert (await probe.probe(made["proxy"].directory / "proxy.mp4")).audio_codec is None
    # a silent waveform: still an image of the usual size, one flat line across it
    waveform = made["waveform"].directory / "waveform.png"
    assert picture_size(waveform) == (1280, 240)
    rows = drawn_rows(waveform)
    assert rows and max(rows) - min(rows) <= 2 and 115 <= min(rows) <= 125, rows


async def test_a_still_image_gets_a_poster_and_no_moving_variant(
    clips: Path, tmp_path: Path
) -> None:
    png = encode(
        clips / "still.png", "-f", "lavfi", "-i", "testsrc2=size=1920x1080", "-frames:v", "1"
    )
    info = await probe.probe(png)
    assert (info.kind, info.width, info.height, info.duration_ms) == ("image", 1920, 1080, 0)
    assert ladder.profiles_for(info) == ("poster",)
    made = await make_variant("poster", png, info, tmp_path)
    assert picture_size(made.directory / "poster.jpg") == (1280, 720)
    for profile in ("proxy", "hls", "thumbnails", "waveform", "dash"):
        with pytest.raises(MediaRefused) as refused:
            await make_variant(profile, png, info, tmp_path)
        assert refused.value.code == "profile"
    with pytest.raises(ValueError, match="unknown variant profile"):
        await make_variant("smooth", png, info, tmp_path)


async def test_a_second_run_replaces_the_first_runs_files(mute: Path, tmp_path: Path) -> None:
    info = await probe.probe(mute)
    first = await make_variant("poster", mute, info, tmp_path)
    (first.directory / "left-over.txt").write_text("from an earlier, interrupted run")
    again = await make_variant("poster", mute, info, tmp_path)
    assert again.directory == first.directory and only_files(again.directory) == {"poster.jpg"}


async def test_a_file_changed_since_its_probe_is_refused(mute: Path, tmp_path: Path) -> None:
    info = await probe.probe(mute)
    swapped = encode(tmp_path / "swapped.webm", "-f", "lavfi", "-i", "testsrc2", "-t", "1")
    with pytest.raises(MediaRefused) as refused:
        await make_variant("poster", swapped, info, tmp_path / "out")
    assert refused.value.code == "format"


async def test_gray_frames_are_evenly_spaced_and_show_what_is_in_the_clip(
    hd: Path, clips: Path, tmp_path: Path
) -> None:
    info = await probe.probe(hd)
    frames = await sample_frames(hd, info, tmp_path, count=7, width=64)
    step = info.duration_ms / 7
    assert [f.at_ms for f in frames] == [round((i + 0.5) * step) for i in range(7)]
    assert all((f.width, f.height, len(f.pixels)) == (64, 36, 64 * 36) for f in frames)
    assert len({f.pixels for f in frames}) == 7  # testsrc2 moves: no two samples alike
    assert names(tmp_path) == []  # the scratch dir is gone

    black = encode(clips / "black.mp4", "-f", "lavfi", "-i", "color=black:size=320x180", "-t", "2")
    black_info = await probe.probe(black)
    dark = await sample_frames(black, black_info, tmp_path, count=4, width=32)
    assert len(dark) == 4 and all(max(f.pixels) <= 20 for f in dark)  # video black is 16

    still = encode(
        clips / "frame.png", "-f", "lavfi", "-i", "testsrc2=size=320x180", "-frames:v", "1"
    )
    one = await sample_frames(still, await probe.probe(still), tmp_path, count=8, width=32)
    assert [(f.at_ms, f.width, f.height) for f in one] == [(0, 32, 18)]
