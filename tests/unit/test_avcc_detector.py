"""The judges of a closed window (avcc's detector), each on hand-built windows: what each
finds, what it leaves alone, what it learns and what it forgets."""

from __future__ import annotations

from typing import Any

import pytest

from aigc_hub.pipelines.avcc.detector import (
    AnomalyKind,
    Detector,
    FloodJudge,
    RatioJudge,
    RevenueJudge,
    SpikeJudge,
    Subjects,
)
from aigc_hub.pipelines.avcc.settings import AvccSettings
from aigc_hub.pipelines.avcc.windows import Window

CODE = "MA.156.10005.8361/0000001A"
OTHER = "MA.156.10005.8361/0000002B"
W = 1000


def settings(**values: Any) -> AvccSettings:
    return AvccSettings(**values)


def window(
    index: int,
    plays: dict[str, int] | None = None,
    completes: dict[str, int] | None = None,
    revenue_fen: dict[str, int] | None = None,
    top_fen: dict[str, int] | None = None,
    users: dict[tuple[str, str], int] | None = None,
) -> Window:
    w = Window(index * W, (index + 1) * W)
    w.plays = dict(plays or {})
    w.completes = dict(completes or {})
    w.revenue_fen = dict(revenue_fen or {})
    w.top_purchase_fen = dict(top_fen or {})
    w.purchases = {code: 1 for code in w.top_purchase_fen}
    w.user_events = dict(users or {})
    return w


# -- spike ----------------------------------------------------------------------------------


def test_a_spike_is_judged_only_after_warmup_and_against_the_codes_own_baseline() -> None:
    judge = SpikeJudge(settings(spike_warmup_windows=5), W)
    # before warm-up, even 500 plays is no spike (nothing to compare with yet)
    assert judge.judge(window(0, {CODE: 500})) == []
    judge = SpikeJudge(settings(spike_warmup_windows=5), W)
    for i in range(5):
        assert judge.judge(window(i, {CODE: 20, OTHER: 200})) == []
    [found] = judge.judge(window(5, {CODE: 120, OTHER: 210}))
    assert (found.kind, found.subject, found.window_start, found.window_end) == (
        AnomalyKind.SPIKE,
        CODE,
        5000,
        6000,
    )
    assert found.observed == 120
    assert found.expected == pytest.approx(20)
    assert found.score > 10


def test_a_spike_needs_the_factor_and_the_minimum_plays() -> None:
    judge = SpikeJudge(settings(spike_warmup_windows=3, spike_factor=5, spike_min_plays=50), W)
    for i in range(3):
        judge.judge(window(i, {CODE: 2, OTHER: 20}))
    assert judge.judge(window(3, {CODE: 40, OTHER: 99})) == []  # 20x, but under 50 plays
    assert judge.judge(window(4, {CODE: 2, OTHER: 100})) == []  # 5x exactly is not above


def test_a_spike_window_is_not_learned_so_a_lasting_spike_is_found_every_window() -> None:
    judge = SpikeJudge(settings(spike_warmup_windows=3), W)
    for i in range(3):
        judge.judge(window(i, {CODE: 20}))
    found = [judge.judge(window(i, {CODE: 400})) for i in range(3, 8)]
    assert all(len(f) == 1 and f[0].expected == pytest.approx(20) for f in found)


def test_windows_without_plays_count_as_zero_and_lower_the_baseline() -> None:
    steady = SpikeJudge(settings(spike_warmup_windows=5), W)
    gapped = SpikeJudge(settings(spike_warmup_windows=5), W)
    for i in range(5):
        steady.judge(window(i, {CODE: 20}))
        gapped.judge(window(i, {CODE: 20}))
    for i in range(5, 30):
        steady.judge(window(i, {CODE: 20}))
    assert steady.judge(window(30, {CODE: 60})) == []  # 3x its baseline of 20
    [found] = gapped.judge(window(30, {CODE: 60}))  # 25 silent windows: baseline near 0
    assert found.expected < 1
    assert found.detail["history_windows"] == 30


def test_a_code_silent_longer_than_forget_starts_again_from_warmup() -> None:
    judge = SpikeJudge(settings(spike_warmup_windows=3, detector_forget_s=10), W)
    for i in range(3):
        judge.judge(window(i, {CODE: 1}))
    assert len(judge.codes) == 1
    judge.judge(window(20, {OTHER: 1}))  # 18 windows later: CODE is forgotten
    assert len(judge.codes) == 1
    assert judge.judge(window(21, {CODE: 500})) == []  # a new code: no history, no spike


# -- ratio ----------------------------------------------------------------------------------


def test_a_collapse_of_the_complete_play_ratio_is_found_against_the_baseline() -> None:
    judge = RatioJudge(settings(spike_warmup_windows=3, ratio_floor=0.25, ratio_min_plays=50), W)
    for i in range(3):
        assert judge.judge(window(i, {CODE: 100}, {CODE: 60})) == []
    [found] = judge.judge(window(3, {CODE: 100}, {CODE: 10}))
    assert (found.kind, found.subject) == (AnomalyKind.RATIO, CODE)
    assert found.observed == pytest.approx(0.10)
    assert found.expected == pytest.approx(0.60)
    assert found.detail["completes"] == 10
    assert judge.judge(window(4, {CODE: 100}, {CODE: 16})) == []  # 0.16 > 0.25 x 0.6
    # too few plays to judge, however low
    assert judge.judge(window(5, {CODE: 49}, {})) == []


def test_a_collapsed_window_is_not_learned() -> None:
    judge = RatioJudge(settings(spike_warmup_windows=3), W)
    for i in range(3):
        judge.judge(window(i, {CODE: 100}, {CODE: 60}))
    for i in range(3, 10):
        [found] = judge.judge(window(i, {CODE: 100}, {}))
        assert found.expected == pytest.approx(0.6)


# -- flood ----------------------------------------------------------------------------------


def test_a_user_hash_flooding_a_node_is_found_once_on_its_worst_node() -> None:
    judge = FloodJudge(settings(flood_events=60), W)
    users = {("8361", f"u{i}"): 2 for i in range(100)}
    users |= {("8361", "flooder"): 61, ("8362", "flooder"): 90, ("8362", "busy"): 59}
    [found] = judge.judge(window(0, users=users))
    assert (found.kind, found.subject, found.observed) == (AnomalyKind.FLOOD, "flooder", 90)
    assert found.detail["platform_node"] == "8362"
    assert found.score == pytest.approx(1.5)
    # the expectation is the node's events per user, learned without the flooders
    assert found.expected == pytest.approx(59)


# -- revenue --------------------------------------------------------------------------------


def test_a_purchase_above_the_line_is_out_of_range_at_once() -> None:
    judge = RevenueJudge(settings(revenue_per_purchase_max_cny=500), W)
    [found] = judge.judge(window(0, {CODE: 3}, top_fen={CODE: 50_001, OTHER: 50_000}))
    assert (found.kind, found.subject, found.observed) == (AnomalyKind.REVENUE, CODE, 500.01)
    assert found.detail["check"] == "purchase_max"


def test_revenue_per_play_far_off_the_codes_baseline_is_out_of_range() -> None:
    judge = RevenueJudge(settings(spike_warmup_windows=4, ratio_min_plays=50, revenue_z=6), W)
    for i, fen in enumerate([5000, 6000, 4000, 5500, 4500, 5000]):  # ~0.50 CNY a play
        assert judge.judge(window(i, {CODE: 100}, revenue_fen={CODE: fen})) == []
    assert judge.judge(window(6, {CODE: 100}, revenue_fen={CODE: 9000})) == []
    [found] = judge.judge(window(7, {CODE: 100}, revenue_fen={CODE: 100_000}))
    assert (found.kind, found.detail["check"]) == (AnomalyKind.REVENUE, "per_play")
    assert found.observed == pytest.approx(10.0)
    assert found.expected == pytest.approx(0.55, abs=0.1)
    # a window with too few plays is neither judged nor learned
    assert judge.judge(window(8, {CODE: 10}, revenue_fen={CODE: 100_000})) == []


# -- memory and the whole ---------------------------------------------------------------------


def test_subjects_keep_at_most_their_cap_forgetting_the_least_recently_seen() -> None:
    subjects: Subjects[list[int]] = Subjects(list, cap=2, ttl_windows=100)
    subjects.at(0)
    subjects.get("a").append(1)
    subjects.get("b").append(2)
    subjects.get("a")  # seen again: "b" is now the oldest
    subjects.get("c")
    assert len(subjects) == 2
    assert subjects.get("a") == [1]
    assert subjects.get("b") == []  # forgotten, made anew


def test_the_detector_runs_every_judge_over_each_closed_window_in_order() -> None:
    detector = Detector(settings(spike_warmup_windows=2, flood_events=10))
    closed = [window(i, {CODE: 20}, {CODE: 12}) for i in range(2)]
    closed.append(
        window(2, {CODE: 400}, {CODE: 240}, users={("8361", "x"): 10}, top_fen={CODE: 99_900})
    )
    kinds = [(a.kind, a.window_start) for a in detector.judge(closed)]
    assert kinds == [
        (AnomalyKind.SPIKE, 2000),
        (AnomalyKind.FLOOD, 2000),
        (AnomalyKind.REVENUE, 2000),
    ]
