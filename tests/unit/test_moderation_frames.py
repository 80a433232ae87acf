"""The model-free output checks on synthetic luma frames: black, frozen, wrong length."""

from __future__ import annotations

import random

import pytest

from aigc_hub.core.errors import InvalidInput
from aigc_hub.media.frames import GrayFrame
from aigc_hub.moderation import LocalModeration, ModerationSettings, Verdict
from aigc_hub.moderation import local as local_mod
from aigc_hub.moderation.frame_checks import BLACK, FROZEN, WRONG_LENGTH, FrameThresholds, check

W, H = 64, 36


Frame = GrayFrame


def flat(at_ms: int, luma: int) -> Frame:
    return Frame(at_ms, W, H, bytes([luma]) * (W * H))


def noisy(at_ms: int, seed: int, base: int = 60, spread: int = 120) -> Frame:
    rng = random.Random(seed)
    return Frame(at_ms, W, H, bytes(base + rng.randrange(spread) for _ in range(W * H)))


def moving_clip(count: int = 8, step_ms: int = 1000) -> list[Frame]:
    return [noisy(i * step_ms, seed=i) for i in range(count)]


@pytest.fixture
def moderation() -> LocalModeration:
    return LocalModeration(ModerationSettings(semantic=False))


async def test_a_moving_clip_of_the_right_length_is_allowed(moderation: LocalModeration) -> None:
    decision = await moderation.review_frames(
        moving_clip(), duration_ms=8000, expected_duration_ms=8000, tenant_id="t1"
    )
    assert decision.verdict is Verdict.ALLOW
    assert decision.hit_rules == ()
    assert decision.model_version == local_mod.FRAME_CHECKS
    assert decision.policy_version == "default-v1"
    assert decision.evidence_ref == "frames@0,1000,2000,3000,4000,5000,6000,7000"


async def test_black_output_is_rejected_with_the_dark_frames_timestamps(
    moderation: LocalModeration,
) -> None:
    # Limited-range black (16) with faint noise, one bright frame: "most frames" are black.
    frames = [noisy(i * 500, seed=i, base=14, spread=4) for i in range(7)] + [noisy(3500, 99)]
    decision = await moderation.review_frames(
        frames, duration_ms=4000, expected_duration_ms=None, tenant_id="t1"
    )
    assert decision.verdict is Verdict.REJECT
    assert decision.hit_rules == (BLACK,)
    assert "black@0,500,1000,1500,2000,2500,3000" in (decision.evidence_ref or "")
    assert decision.reason == "the output is black"


def test_a_dark_but_not_black_clip_is_not_black() -> None:
    frames = [noisy(i * 500, seed=i, base=14, spread=4) for i in range(4)] + [
        noisy(2000 + i * 500, seed=10 + i) for i in range(4)
    ]
    assert [h.rule_id for h in check(frames, duration_ms=4000, expected_duration_ms=None)] == []


async def test_frozen_output_is_rejected(moderation: LocalModeration) -> None:
    still = noisy(0, seed=7)
    frames = [Frame(i * 1000, W, H, still.pixels) for i in range(8)]
    decision = await moderation.review_frames(
        frames, duration_ms=8000, expected_duration_ms=8000, tenant_id="t1"
    )
    assert decision.verdict is Verdict.REJECT
    assert decision.hit_rules == (FROZEN,)
    assert "frozen@0-7000" in (decision.evidence_ref or "")


def test_a_clip_frozen_for_a_while_then_moving_is_not_frozen() -> None:
    still = noisy(0, seed=7)
    frames = [Frame(i * 1000, W, H, still.pixels) for i in range(6)] + [
        noisy(6000, seed=1),
        noisy(7000, seed=2),
    ]
    assert check(frames, duration_ms=8000, expected_duration_ms=None) == []


def test_a_slow_drift_is_motion_though_neighbours_barely_differ() -> None:
    # At most one luma level between neighbours (within the threshold), four across the
    # clip: a slow gradient or pan, which a check of neighbours alone would call frozen.
    frames = [flat(i * 125, 100 + round(i * 0.5)) for i in range(8)]
    assert check(frames, duration_ms=1000, expected_duration_ms=None) == []


def test_sensor_noise_below_the_threshold_still_counts_as_frozen() -> None:
    base = noisy(0, seed=3)
    jittered = [
        Frame(i * 1000, W, H, bytes(min(255, p + (i % 2)) for p in base.pixels)) for i in range(8)
    ]
    assert [h.rule_id for h in check(jittered, duration_ms=8000, expected_duration_ms=None)] == [
        FROZEN
    ]


def test_a_black_clip_is_black_and_frozen() -> None:
    frames = [flat(i * 1000, 0) for i in range(8)]
    hits = check(frames, duration_ms=8000, expected_duration_ms=None)
    assert [h.rule_id for h in hits] == [BLACK, FROZEN]


@pytest.mark.parametrize(
    ("duration_ms", "expected_ms", "wrong"),
    [
        (10_000, 10_000, False),
        (10_900, 10_000, False),  # within 10 %
        (11_200, 10_000, True),
        (4_000, 10_000, True),
        (2_600, 2_000, False),  # short clips: at least 1 s of tolerance
        (3_100, 2_000, True),
        (0, 5_000, True),
    ],
)
async def test_wrong_length_is_judged_against_the_expected_duration(
    moderation: LocalModeration, duration_ms: int, expected_ms: int, wrong: bool
) -> None:
    decision = await moderation.review_frames(
        moving_clip(), duration_ms=duration_ms, expected_duration_ms=expected_ms, tenant_id="t"
    )
    assert (WRONG_LENGTH in decision.hit_rules) is wrong
    assert decision.verdict is (Verdict.REJECT if wrong else Verdict.ALLOW)
    if wrong:
        assert f"duration={duration_ms}ms,expected={expected_ms}ms" in (decision.evidence_ref or "")


def test_no_expected_duration_means_no_length_check() -> None:
    assert check(moving_clip(), duration_ms=1, expected_duration_ms=None) == []


def test_thresholds_come_from_settings() -> None:
    grey = [noisy(i * 1000, seed=i, base=30, spread=4) for i in range(8)]
    assert BLACK not in [h.rule_id for h in check(grey, duration_ms=0, expected_duration_ms=None)]
    strict = FrameThresholds(black_luma_max=40.0)
    assert BLACK in [
        h.rule_id for h in check(grey, duration_ms=0, expected_duration_ms=None, thresholds=strict)
    ]
    settings = ModerationSettings(semantic=False, black_luma_max=40.0, duration_tolerance_ms=0)
    assert settings.frame_thresholds() == FrameThresholds(
        black_luma_max=40.0, duration_tolerance_ms=0
    )


def test_large_frames_are_compared_on_a_bounded_sample() -> None:
    big = [Frame(i * 1000, 1920, 1080, bytes([i * 20 % 256]) * (1920 * 1080)) for i in range(8)]
    assert check(big, duration_ms=8000, expected_duration_ms=8000) == []


async def test_no_frames_leaves_only_the_length_check(moderation: LocalModeration) -> None:
    decision = await moderation.review_frames(
        [], duration_ms=3000, expected_duration_ms=8000, tenant_id="t1"
    )
    assert decision.hit_rules == (WRONG_LENGTH,)


@pytest.mark.parametrize(
    "frame",
    [Frame(0, W, H, b"\x00" * 10), Frame(0, 0, 0, b""), Frame(0, -1, 5, b"\x00" * 5)],
)
async def test_a_frame_whose_pixels_do_not_match_its_size_is_invalid_input(
    moderation: LocalModeration, frame: Frame
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await moderation.review_frames(
            [frame], duration_ms=1000, expected_duration_ms=None, tenant_id="t1"
        )
    assert caught.value.field == "frames"
