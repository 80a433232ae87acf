"""Which offsets may be committed: per partition, up to the highest contiguous finished record."""

from __future__ import annotations

from collections import deque

from aigc_hub.messaging.base import TopicPartition


class OffsetTracker:
    """Tracks in-flight offsets; a partition's commit point never passes an unfinished record."""

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, deque[int]] = {}
        self._done: dict[TopicPartition, set[int]] = {}
        self._commit_point: dict[TopicPartition, int] = {}
        self._dirty: set[TopicPartition] = set()

    def add(self, tp: TopicPartition, offset: int) -> None:
        """A record was fetched and is now in flight (offsets arrive in order per partition)."""
        self._pending.setdefault(tp, deque()).append(offset)

    def done(self, tp: TopicPartition, offset: int) -> None:
        """A record is finished (applied, duplicate, parked or dead-lettered)."""
        pending = self._pending.get(tp)
        if pending is None:
            return  # partition was revoked meanwhile
        done = self._done.setdefault(tp, set())
        done.add(offset)
        while pending and pending[0] in done:
            finished = pending.popleft()
            done.discard(finished)
            self._commit_point[tp] = finished + 1
            self._dirty.add(tp)

    def take_committable(
        self, only: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Next-offset-to-read per partition (of ``only``) that advanced since the last call."""
        chosen = self._dirty if only is None else self._dirty & only
        out = {tp: self._commit_point[tp] for tp in chosen if tp in self._commit_point}
        self._dirty -= set(out)
        return out

    def retry_later(self, offsets: dict[TopicPartition, int]) -> None:
        """A commit of ``offsets`` failed: offer them again (unless revoked meanwhile)."""
        self._dirty |= {tp for tp in offsets if tp in self._commit_point}

    def forget(self, tps: set[TopicPartition]) -> None:
        """Drop revoked partitions: their unfinished offsets must never be committed by us."""
        for tp in tps:
            self._pending.pop(tp, None)
            self._done.pop(tp, None)
            self._commit_point.pop(tp, None)
            self._dirty.discard(tp)

    def in_flight(self) -> int:
        """Fetched records the commit point has not passed yet (bounds how much is fetched)."""
        return sum(len(p) for p in self._pending.values())
