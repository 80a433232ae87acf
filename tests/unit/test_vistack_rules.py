"""The seed's retry delay, counter and lease names, and the transcode contract's versions."""

from __future__ import annotations

import pytest

from aigc_hub.pipelines.vistack import events, rules


def _no_jitter(low: float, high: float) -> float:
    return 0.0


@pytest.mark.parametrize(
    ("attempt", "minutes"),
    [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 32), (7, 64), (9, 256), (10, 480), (60, 480)],
)
def test_the_delay_doubles_from_one_minute_to_an_eight_hour_cap(attempt: int, minutes: int) -> None:
    assert rules.retry_delay_s(attempt, uniform=_no_jitter) == minutes * 60


@pytest.mark.parametrize("u", [-0.2, -0.05, 0.0, 0.2])
def test_jitter_moves_the_delay_by_at_most_a_fifth(u: float) -> None:
    def draw(low: float, high: float) -> float:
        assert (low, high) == (-0.2, 0.2)
        return u

    assert rules.retry_delay_s(3, uniform=draw) == pytest.approx(240 * (1 + u))


def test_jitter_is_random_within_its_bounds() -> None:
    delays = {rules.retry_delay_s(2) for _ in range(200)}
    assert len(delays) > 100
    assert all(96 <= d <= 144 for d in delays)


def test_attempt_counts_from_one() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        rules.retry_delay_s(0)


def test_names_are_the_seeds_and_a_replay_counts_afresh() -> None:
    assert rules.lease_name("vid_1") == "transcode:vid_1"
    assert rules.attempts_key("vid_1", 0) == "transcode:vid_1"
    assert rules.attempts_key("vid_1", 2) == "transcode:vid_1:r2"
    assert rules.RETRY_QUEUE == "transcode:retry:zset"


def test_a_v1_transcode_reads_as_v2_with_the_default_ladder() -> None:
    v1 = events.TranscodeV1.model_validate(
        {"v": 1, "videoId": "vid_1", "tenantId": "t1", "sourceKey": "k"}
    )
    v2 = events.transcode_v2(v1)
    assert (v2.v, v2.videoId, v2.heights) == (2, "vid_1", [360, 720])
    given = events.TranscodeV2.model_validate(
        {"v": 2, "videoId": "vid_2", "tenantId": "t1", "sourceKey": "k", "heights": [720, 240]}
    )
    assert events.transcode_v2(given).heights == [240, 720]


@pytest.mark.parametrize("heights", [[360], [360, 360], [32, 720], [360, 9000]])
def test_a_v2_ladder_is_distinct_heights_within_bounds(heights: list[int]) -> None:
    with pytest.raises(ValueError):
        events.TranscodeV2.model_validate(
            {"videoId": "vid_1", "tenantId": "t1", "sourceKey": "k", "heights": heights}
        )
