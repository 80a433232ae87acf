"""Event-time tumbling windows of playback counters, closed by a watermark (no I/O).

The watermark follows Flink's rules for a partitioned source with bounded out-of-orderness:
each partition's largest event time so far; the watermark is the smallest of them over the
partitions that are not idle (a partition without a record for ``idle_ms`` of processing
time stops holding it back; when every partition is idle, the largest of them), less
``lateness_ms``, and it never moves back. A window ``[start, end)`` closes once the watermark
reaches ``end``; an event of a window already closed is late: counted in :attr:`late`, not
added. Only partitions seen so far take part: one that never delivered holds nothing back.

Per event the work is a few dict increments (:meth:`Windows.add`); the watermark is worked
out once per batch (:meth:`Windows.advance`), as Flink emits periodic watermarks.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TypedDict


class PlaybackFields(TypedDict):
    """The payload of a playback event as decoded from JSON (seed 000 §9.2.4)."""

    avcc_code: str
    platform_node: str
    user_hash: str
    event_type: str
    duration_sec: int
    revenue_cny: float


@dataclass(slots=True)
class Window:
    """The counters of one window: per code, and per (platform node, user hash)."""

    start_ms: int
    end_ms: int
    plays: dict[str, int] = field(default_factory=dict)
    completes: dict[str, int] = field(default_factory=dict)
    purchases: dict[str, int] = field(default_factory=dict)
    #: Revenue in fen (integers: sums of floats drift), and each code's largest purchase.
    revenue_fen: dict[str, int] = field(default_factory=dict)
    top_purchase_fen: dict[str, int] = field(default_factory=dict)
    user_events: dict[tuple[str, str], int] = field(default_factory=dict)
    events: int = 0


@dataclass(slots=True)
class _Partition:
    """What the watermark needs of one partition: its largest event time, when last heard."""

    max_ts: int
    seen_ms: int


class Windows:
    """Open windows and the watermark that closes them; one instance per consumer process.

    Not thread-safe: one caller at a time (the stream handler hands batches over in turn).
    """

    def __init__(self, width_ms: int, lateness_ms: int, idle_ms: int) -> None:
        if width_ms <= 0:
            raise ValueError("a window is at least 1 ms wide")
        self.width_ms = width_ms
        self.lateness_ms = lateness_ms
        self.idle_ms = idle_ms
        #: Events of windows already closed, dropped (since this instance was made).
        self.late = 0
        self._open: dict[int, Window] = {}
        self._partitions: dict[Hashable, _Partition] = {}
        self._watermark: int | None = None
        #: Every window starting before this has closed.
        self._closed_until: int | None = None
        self._now_ms = 0

    @property
    def watermark(self) -> int | None:
        """The current watermark (epoch ms of event time), None before any event."""
        return self._watermark

    @property
    def open_windows(self) -> int:
        """How many windows hold counters now."""
        return len(self._open)

    def begin(self, now_ms: int) -> None:
        """Start a batch read at processing time ``now_ms`` (what idleness is measured in)."""
        self._now_ms = now_ms

    def add(self, partition: Hashable, ts: int, event: PlaybackFields) -> bool:
        """Count one event of ``partition`` at event time ``ts``; False when it is late.

        Raises KeyError or TypeError for an event without the seed's fields, before
        changing anything (every field is read before the first counter moves)."""
        code = event["avcc_code"]
        kind = event["event_type"]
        user = (event["platform_node"], event["user_hash"])
        fen = round(event["revenue_cny"] * 100) if kind == "purchase" else 0
        index = ts // self.width_ms
        mark = self._partitions.get(partition)
        if mark is None:
            self._partitions[partition] = _Partition(ts, self._now_ms)
        else:
            if ts > mark.max_ts:
                mark.max_ts = ts
            mark.seen_ms = self._now_ms
        window = self._open.get(index)
        if window is None:
            start = index * self.width_ms
            if self._closed_until is not None and start < self._closed_until:
                self.late += 1
                return False
            window = self._open[index] = Window(start, start + self.width_ms)
        window.events += 1
        if kind == "play":
            window.plays[code] = window.plays.get(code, 0) + 1
        elif kind == "complete":
            window.completes[code] = window.completes.get(code, 0) + 1
        elif kind == "purchase":
            window.purchases[code] = window.purchases.get(code, 0) + 1
            window.revenue_fen[code] = window.revenue_fen.get(code, 0) + fen
            if fen > window.top_purchase_fen.get(code, -1):
                window.top_purchase_fen[code] = fen
        window.user_events[user] = window.user_events.get(user, 0) + 1
        return True

    def advance(self, now_ms: int) -> list[Window]:
        """Move the watermark at processing time ``now_ms``; the windows it closed, oldest
        first. Called after each batch and on each empty tick (which is how idle partitions
        let go of the watermark when nothing arrives)."""
        if not self._partitions:
            return []
        active = [p.max_ts for p in self._partitions.values() if now_ms - p.seen_ms < self.idle_ms]
        base = min(active) if active else max(p.max_ts for p in self._partitions.values())
        candidate = base - self.lateness_ms
        if self._watermark is not None and candidate <= self._watermark:
            return []
        self._watermark = candidate
        self._closed_until = (candidate // self.width_ms) * self.width_ms
        ready = sorted(i for i, w in self._open.items() if w.end_ms <= candidate)
        return [self._open.pop(i) for i in ready]
