"""OffsetTracker: a partition's commit point is the end of its contiguous finished prefix."""

from __future__ import annotations

from aigc_hub.messaging.base import TopicPartition
from aigc_hub.runtime.offsets import OffsetTracker

A0 = TopicPartition("topic.a", 0)
A1 = TopicPartition("topic.a", 1)
B0 = TopicPartition("topic.b", 0)


def tracker_with(*fetched: tuple[TopicPartition, range]) -> OffsetTracker:
    tracker = OffsetTracker()
    for tp, offsets in fetched:
        for offset in offsets:
            tracker.add(tp, offset)
    return tracker


def test_nothing_is_committable_before_anything_finishes() -> None:
    tracker = tracker_with((A0, range(3)))

    assert tracker.take_committable() == {}


def test_out_of_order_completion_commits_only_the_contiguous_prefix() -> None:
    tracker = tracker_with((A0, range(10, 15)))

    tracker.done(A0, 12)
    tracker.done(A0, 11)
    assert tracker.take_committable() == {}  # 10 is still running

    tracker.done(A0, 10)
    assert tracker.take_committable() == {A0: 13}  # next offset to read, after 10, 11, 12

    tracker.done(A0, 14)
    assert tracker.take_committable() == {}  # 13 is still running

    tracker.done(A0, 13)
    assert tracker.take_committable() == {A0: 15}


def test_offsets_need_not_be_dense() -> None:
    tracker = OffsetTracker()
    for offset in (3, 7, 20):
        tracker.add(A0, offset)

    tracker.done(A0, 7)
    tracker.done(A0, 3)

    assert tracker.take_committable() == {A0: 8}


def test_take_committable_returns_advanced_partitions_only_once() -> None:
    tracker = tracker_with((A0, range(3)), (A1, range(3)), (B0, range(3)))
    tracker.done(A0, 0)
    tracker.done(B0, 0)
    tracker.done(B0, 1)
    tracker.done(A1, 1)  # A1 does not advance: 0 is unfinished

    assert tracker.take_committable() == {A0: 1, B0: 2}
    assert tracker.take_committable() == {}

    tracker.done(A0, 1)
    assert tracker.take_committable() == {A0: 2}
    assert tracker.take_committable() == {}


def test_only_filter_takes_the_chosen_partitions_and_keeps_the_others_dirty() -> None:
    tracker = tracker_with((A0, range(2)), (A1, range(2)), (B0, range(2)))
    for tp in (A0, A1, B0):
        tracker.done(tp, 0)

    assert tracker.take_committable(only={A1}) == {A1: 1}
    assert tracker.take_committable(only={A1}) == {}
    assert tracker.take_committable(only={A1, TopicPartition("topic.c", 0)}) == {}
    assert tracker.take_committable() == {A0: 1, B0: 1}
    assert tracker.take_committable() == {}


def test_only_filter_with_an_empty_set_takes_nothing() -> None:
    tracker = tracker_with((A0, range(1)))
    tracker.done(A0, 0)

    assert tracker.take_committable(only=set()) == {}
    assert tracker.take_committable() == {A0: 1}


def test_forget_drops_a_revoked_partition_for_good() -> None:
    tracker = tracker_with((A0, range(5)), (B0, range(5)))
    tracker.done(A0, 0)
    tracker.done(A0, 1)  # A0 advanced but not taken yet
    tracker.done(B0, 0)

    tracker.forget({A0})
    for offset in range(5):  # late completions of records fetched before the revocation
        tracker.done(A0, offset)

    assert tracker.take_committable() == {B0: 1}
    assert tracker.take_committable(only={A0}) == {}
    assert tracker.take_committable() == {}
    assert tracker.in_flight() == 4  # B0's 1..4


def test_forget_of_an_unknown_partition_is_harmless() -> None:
    tracker = tracker_with((A0, range(2)))

    tracker.forget({B0})
    tracker.done(A0, 0)

    assert tracker.take_committable() == {A0: 1}


def test_a_partition_assigned_again_after_forget_starts_afresh() -> None:
    tracker = tracker_with((A0, range(5)))
    tracker.done(A0, 0)
    tracker.forget({A0})

    for offset in range(3, 6):  # refetched from the group's committed offset
        tracker.add(A0, offset)
    tracker.done(A0, 3)

    assert tracker.take_committable() == {A0: 4}


def test_done_for_a_never_fetched_partition_is_ignored() -> None:
    tracker = OffsetTracker()

    tracker.done(A0, 0)

    assert tracker.take_committable() == {}
    assert tracker.in_flight() == 0


def test_in_flight_counts_fetched_records_until_their_prefix_finishes() -> None:
    tracker = OffsetTracker()
    assert tracker.in_flight() == 0

    for offset in range(4):
        tracker.add(A0, offset)
    tracker.add(B0, 0)
    assert tracker.in_flight() == 5

    tracker.done(A0, 0)
    tracker.done(A0, 1)
    assert tracker.in_flight() == 3

    tracker.done(B0, 0)
    tracker.done(A0, 2)
    tracker.done(A0, 3)
    assert tracker.in_flight() == 0

    tracker.add(A0, 4)
    assert tracker.in_flight() == 1
    tracker.forget({A0})
    assert tracker.in_flight() == 0


def test_offsets_of_a_failed_commit_are_offered_again() -> None:
    tracker = OffsetTracker()
    tp = TopicPartition("t", 0)
    tracker.add(tp, 0)
    tracker.done(tp, 0)
    offsets = tracker.take_committable()
    assert offsets == {tp: 1}
    assert tracker.take_committable() == {}
    tracker.retry_later(offsets)
    assert tracker.take_committable() == {tp: 1}
    tracker.retry_later(offsets)
    tracker.forget({tp})
    assert tracker.take_committable() == {}
