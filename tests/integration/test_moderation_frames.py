"""The output checks on frames the media toolkit samples from real clips made by FFmpeg:
a moving clip passes, a black, a frozen and a too-short clip are rejected with their rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aigc_hub.media import probe, tools
from aigc_hub.media.frames import sample_frames
from aigc_hub.moderation import LocalModeration, ModerationSettings, Verdict
from aigc_hub.moderation.frame_checks import BLACK, FROZEN, WRONG_LENGTH
from tests.support.provider import require_ffmpeg

pytestmark = pytest.mark.ffmpeg


def clip(dest: Path, source: str, seconds: int) -> Path:
    """An H.264 clip of an FFmpeg test source (``name`` or ``name=options``)."""
    require_ffmpeg()
    source += (":" if "=" in source else "=") + "size=320x180:rate=25"
    subprocess.run(
        [tools.executable("ffmpeg"), "-v", "error", "-y", "-f", "lavfi", "-i",
         source, "-t", str(seconds),
         "-c:v", "libx264", "-pix_fmt", "yuv420p", str(dest)],
        check=True,
    )  # fmt: skip
    return dest


async def review(path: Path, work: Path, expected_ms: int | None) -> tuple[Verdict, set[str]]:
    info = await probe.probe(path)
    frames = await sample_frames(path, info, work)
    moderation = LocalModeration(ModerationSettings(semantic=False))
    decision = await moderation.review_frames(
        frames, duration_ms=info.duration_ms, expected_duration_ms=expected_ms, tenant_id="t1"
    )
    assert decision.evidence_ref is not None
    assert decision.evidence_ref.startswith("frames@")
    return decision.verdict, set(decision.hit_rules)


@pytest.mark.parametrize(
    ("source", "seconds", "expected_ms", "verdict", "rules"),
    [
        ("testsrc2", 4, 4000, Verdict.ALLOW, set()),
        ("color=c=black", 4, 4000, Verdict.REJECT, {BLACK, FROZEN}),
        ("smptebars", 4, 4000, Verdict.REJECT, {FROZEN}),
        ("testsrc2", 2, 6000, Verdict.REJECT, {WRONG_LENGTH}),
    ],
    ids=["moving", "black", "frozen", "too-short"],
)
async def test_sampled_frames_of_real_clips_are_judged(
    tmp_path: Path,
    source: str,
    seconds: int,
    expected_ms: int,
    verdict: Verdict,
    rules: set[str],
) -> None:
    path = clip(tmp_path / "clip.mp4", source, seconds)
    assert await review(path, tmp_path, expected_ms) == (verdict, rules)
