"""``avcc-detector`` (the seed's flink-job): playback events → event-time windows → the
judges of each closed window → ``avcc_playback_anomalies``, a counter and a log line each.

A batch is decoded (orjson) and counted in a worker thread: it is CPU work of a few
milliseconds per thousand records and must not hold the event loop. The stream runtime
hands over an empty batch when nothing came for the group's ``max_wait_s``: that tick is
when idle partitions let go of the watermark, so a quiet stream still closes its windows.

At least once: a batch seen again after a crash is counted again only by a new process
(whose state is fresh), and a window's findings are inserted or ignored on (kind, subject,
window start), so a row is never written twice. The state lives in this process: a restart
loses the open windows (their events were committed, so those windows are undercounted or
missed) and every baseline (subjects are judged again after their warm-up). A write that
fails is logged and its findings are written with the next batch or tick (at most
:data:`MAX_PENDING` kept); the handler does not raise for it, as a redelivered batch would be
counted twice into the windows still open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.messaging.base import Record
from aigc_hub.pipeline import StreamHandler
from aigc_hub.store.dialects import dialect_of

from .. import metrics
from ..settings import AvccSettings
from ..settlement_tables import avcc_playback_anomalies
from ..state import Avcc
from ..windows import Windows

if TYPE_CHECKING:
    from ..detector import Anomaly

log = logging.getLogger(__name__)

GROUP = "avcc-detector"
#: Hit inside the write transaction, before the insert (fault tests arm it).
BEFORE_WRITE = "avcc.detector.before_write"
_UNIQUE = ["kind", "subject", "window_start"]
#: Findings kept while the database refuses them; past this the oldest are dropped (a
#: long outage must not grow the process without bound).
MAX_PENDING = 10_000
#: Rows per INSERT: 9 parameters a row stays far below SQLite's 32,766 variables. A batch's
#: findings are one statement unless a burst of floods makes more (then one transaction).
_ROWS_PER_STATEMENT = 1000


class PlaybackDetector:
    """The detector of one process: its windows, its judges and the findings not yet
    written. Batches are handed over one at a time (the stream runtime awaits each)."""

    def __init__(
        self,
        engine: AsyncEngine,
        clock: Clock,
        settings: AvccSettings,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.failpoints = failpoints or Failpoints()
        self.windows = Windows(
            settings.detector_window_s * 1000,
            settings.detector_lateness_ms,
            settings.detector_idle_ms,
        )
        # Imported here: river loads in the process that runs the detector only.
        from ..detector import AnomalyKind, Detector

        self.detector = Detector(settings)
        self.malformed = 0
        #: Findings not yet written (the database refused them), oldest first.
        self.pending: list[Anomaly] = []
        # Every series at 0 from the start: a counter born at 1 hides its first increase
        # from increase(), and the alert rule is built on increase().
        for kind in AnomalyKind:
            metrics.anomalies_of(kind.value)
        for reason in metrics.DROP_REASONS:
            metrics.dropped_of(reason)

    async def __call__(self, records: Sequence[Record]) -> None:
        """Count ``records`` (or just tick, when empty), judge the windows that closed and
        write what was found. A failed write is logged and its findings wait for the next
        call: it does not raise, since the batch is already counted and counting it again
        (a redelivery into windows still open) would double it."""
        now_ms = self.clock.now_ms()
        found = await asyncio.to_thread(self.consume, records, now_ms)
        self.pending.extend(found)
        if not self.pending:
            return
        try:
            await self._write(self.pending, now_ms)
        except Exception as exc:
            log.warning(
                "playback anomalies not written (%d waiting, kept for the next batch): %r",
                len(self.pending),
                exc,
            )
            if len(self.pending) > MAX_PENDING:
                del self.pending[: len(self.pending) - MAX_PENDING]
            return
        for anomaly in self.pending:
            metrics.anomalies_of(anomaly.kind.value).inc()
            log.warning(
                "playback anomaly %s of %s in [%d, %d): observed %.4g, expected %.4g, score %.3g",
                anomaly.kind,
                anomaly.subject,
                anomaly.window_start,
                anomaly.window_end,
                anomaly.observed,
                anomaly.expected,
                anomaly.score,
            )
        self.pending = []

    def consume(self, records: Sequence[Record], now_ms: int) -> list[Anomaly]:
        """Count the batch into the windows, move the watermark, judge what closed (pure
        CPU: run it in a thread from async code)."""
        windows = self.windows
        windows.begin(now_ms)
        late, malformed = windows.late, 0
        add, loads = windows.add, orjson.loads
        for record in records:
            try:
                envelope = loads(record.value)
                add(record.partition, int(envelope["timestamp"]), envelope["payload"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                malformed += 1
        closed = windows.advance(now_ms)
        if windows.late > late:
            metrics.dropped_of("late").inc(windows.late - late)
        if malformed:
            self.malformed += malformed
            metrics.dropped_of("malformed").inc(malformed)
        return self.detector.judge(closed)

    async def _write(self, anomalies: Sequence[Anomaly], now_ms: int) -> None:
        """Insert-or-ignore every finding, in one short transaction."""
        rows = [
            {
                "kind": a.kind.value,
                "subject": a.subject,
                "window_start": a.window_start,
                "window_end": a.window_end,
                "observed": a.observed,
                "expected": a.expected,
                "score": a.score,
                "detail": dict(a.detail),
                "detected_at": now_ms,
            }
            for a in anomalies
        ]
        async with self.engine.begin() as conn:
            self.failpoints.hit(BEFORE_WRITE)
            dialect = dialect_of(conn)
            for at in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[at : at + _ROWS_PER_STATEMENT]
                insert = dialect.insert(avcc_playback_anomalies).values(chunk)
                await conn.execute(insert.on_conflict_do_nothing(index_elements=_UNIQUE))


def make_detector(avcc: Avcc) -> StreamHandler:
    """The ``avcc-detector`` stream handler of a started hub's avcc (built once)."""
    hub = avcc.hub
    return PlaybackDetector(hub.engine, hub.clock, avcc.settings, avcc.failpoints)
