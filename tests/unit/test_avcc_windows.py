"""Event-time windows under a watermark (avcc's detector): out-of-order partitions,
idleness in processing time, lateness, and what a late or malformed event does."""

from __future__ import annotations

import pytest

from aigc_hub.pipelines.avcc.windows import PlaybackFields, Windows

CODE = "MA.156.10005.8361/0000001A"


def event(kind: str = "play", *, user: str = "sha256:u1", revenue: float = 0.0) -> PlaybackFields:
    return {
        "avcc_code": CODE,
        "platform_node": "8361",
        "user_hash": user,
        "event_type": kind,
        "duration_sec": 0,
        "revenue_cny": revenue,
    }


def windows(lateness_ms: int = 0, idle_ms: int = 2000) -> Windows:
    return Windows(1000, lateness_ms, idle_ms)


def test_a_window_closes_when_the_watermark_reaches_its_end_with_its_counters() -> None:
    w = windows(lateness_ms=500)
    w.begin(0)
    for kind in ("play", "play", "complete"):
        w.add(0, 100, event(kind))
    w.add(0, 900, event("purchase", user="sha256:u2", revenue=12.34))
    w.add(0, 1400, event())
    assert w.advance(0) == []  # 1400 - 500 = 900 < 1000
    w.add(0, 1500, event())
    [closed] = w.advance(0)  # 1500 - 500 = 1000: [0, 1000) is complete
    assert (closed.start_ms, closed.end_ms, closed.events) == (0, 1000, 4)
    assert closed.plays == {CODE: 2}
    assert closed.completes == {CODE: 1}
    assert closed.purchases == {CODE: 1}
    assert closed.revenue_fen == {CODE: 1234}
    assert closed.top_purchase_fen == {CODE: 1234}
    assert closed.user_events == {("8361", "sha256:u1"): 3, ("8361", "sha256:u2"): 1}
    assert w.watermark == 1000
    assert w.open_windows == 1


def test_the_slowest_active_partition_holds_the_watermark_back() -> None:
    w = windows()
    w.begin(0)
    w.add(0, 9_500, event())
    w.add(1, 2_500, event())
    w.add(1, 3_200, event())
    closed = w.advance(0)
    assert w.watermark == 3_200
    assert [c.start_ms for c in closed] == [2_000]
    # partition 1 catches up out of order: its windows close in event-time order
    w.add(1, 8_100, event())
    w.add(1, 5_000, event())
    assert [c.start_ms for c in w.advance(100)] == [3_000, 5_000]
    assert w.watermark == 8_100


def test_an_idle_partition_stops_holding_the_watermark_and_all_idle_gives_the_max() -> None:
    w = windows(lateness_ms=0, idle_ms=2000)
    w.begin(0)
    w.add(0, 1_500, event())
    w.add(1, 6_500, event())
    assert w.advance(0) == []
    assert w.watermark == 1_500
    w.begin(1_500)
    w.add(1, 7_100, event())  # partition 1 is heard from again; partition 0 is silent
    assert w.advance(1_999) == []  # partition 0 silent 1999 ms: still holds it back
    assert [c.start_ms for c in w.advance(2_000)] == [1_000, 6_000]
    assert w.watermark == 7_100  # only partition 1 is active
    assert [c.start_ms for c in w.advance(10_000)] == []  # both idle: the largest
    assert w.watermark == 7_100


def test_the_watermark_never_moves_back_when_a_slower_partition_appears() -> None:
    w = windows()
    w.begin(0)
    w.add(0, 5_000, event())
    w.advance(0)
    w.add(1, 4_200, event())  # a new partition, behind: its event is late, not a rewind
    assert w.advance(0) == []
    assert w.watermark == 5_000
    assert w.late == 1


def test_an_event_within_lateness_counts_and_one_of_a_closed_window_is_late() -> None:
    w = windows(lateness_ms=1000)
    w.begin(0)
    w.add(0, 3_300, event())
    w.advance(0)  # watermark 2300: [0, 1000) and [1000, 2000) would be closed
    assert w.add(0, 2_100, event()) is True  # [2000, 3000) is still open
    assert w.add(0, 1_999, event()) is False
    assert w.late == 1
    w.add(0, 4_000, event())
    [closed] = w.advance(0)
    assert (closed.start_ms, closed.events) == (2_000, 1)


def test_an_event_without_the_seeds_fields_raises_before_counting_anything() -> None:
    w = windows()
    w.begin(0)
    broken: dict[str, object] = dict(event("purchase"))
    del broken["revenue_cny"]
    with pytest.raises(KeyError):
        w.add(0, 100, broken)  # type: ignore[arg-type]  # a record not as typed: the point
    assert w.open_windows == 0
    assert w.watermark is None
    assert w.advance(0) == []


def test_a_window_must_have_a_width() -> None:
    with pytest.raises(ValueError, match="at least 1 ms"):
        Windows(0, 0, 100)
