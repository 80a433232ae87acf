"""``avcc-sink`` (the seed's clickhouse-sink, §9.2.4): playback records → the analytics store.

A stream group on the telemetry road: the runtime hands over batches of raw records and
commits once the handler returns. Per batch: skip what the store already holds (its stored
offsets), decode to one Arrow table in a worker thread, dead-letter the rejected records,
then store the rows with the offsets the batch reached (the store's write keeps the two
together, so a batch seen again after a crash or a rebalance is stored once).

Rejected records are dead-lettered *before* the rows are stored: a crash in between sends
them again on redelivery (a duplicate letter a person dismisses), never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import Counter

from aigc_hub.messaging.base import Record
from aigc_hub.observability import metrics
from aigc_hub.observability.metrics import Children
from aigc_hub.pipeline import StreamHandler
from aigc_hub.reliability.dlq import DeadLetterDraft, DeadLetterStore

from .. import events
from ..analytics import AnalyticsStore, SinkBatch
from ..state import NAME, Avcc

if TYPE_CHECKING:
    from .. import playback_rows

GROUP = "avcc-sink"
#: The dead letter's error class; its message is ``<reason>: <field or error>``.
REJECTED_CLASS = "RejectedPlayback"

REJECTED = Counter(
    "aigc_hub_avcc_playback_rejected",
    "Playback records the sink did not store (dead-lettered), by reason.",
    ["reason"],
)
STORED = Counter("aigc_hub_avcc_playback_stored", "Playback rows the sink stored.")
#: This group's metrics (docs/metrics.md lists them with the backbone's).
METRICS = (REJECTED, STORED)
_rejected = Children(REJECTED)


class PlaybackSink:
    """The stream handler: stores each batch's rows in ``store`` once, dead-letters the
    records that are not playback events into ``dead_letters``."""

    def __init__(
        self, store: AnalyticsStore, dead_letters: DeadLetterStore, *, group: str = GROUP
    ) -> None:
        self.store = store
        self.dead_letters = dead_letters
        self.group = group

    async def __call__(self, records: Sequence[Record]) -> None:
        """Store a batch (records in offset order per partition); an empty batch is a tick."""
        if not records:
            return
        stored = await self.store.stored_offsets(events.PLAYBACK_TOPIC)
        # Imported here: numpy, pyarrow and pandas load in the process that runs the sink only.
        from .. import playback_rows

        decoded = await asyncio.to_thread(playback_rows.decode, records, stored)
        if not decoded.spans:
            return  # every record was stored before: a redelivered batch
        if decoded.rejected:
            await self._dead_letter(decoded.rejected)
        await self.store.write(
            SinkBatch(events.PLAYBACK_TOPIC, decoded.table, decoded.reached, decoded.positions)
        )
        STORED.inc(decoded.table.num_rows)

    async def _dead_letter(self, rejected: Sequence[playback_rows.Rejected]) -> None:
        """One transaction for the batch's rejected records, each with its reason."""
        now = self.dead_letters.clock.now_ms()
        async with self.dead_letters.engine.begin() as conn:
            for item in rejected:
                record = item.record
                await self.dead_letters.add(
                    conn,
                    DeadLetterDraft(
                        topic=record.topic,
                        partition=record.partition,
                        offset=record.offset,
                        key=record.key,
                        consumer=self.group,
                        pipeline=NAME,
                        value=record.value,
                        headers=record.headers,
                        error_class=REJECTED_CLASS,
                        error_message=f"{item.reason}: {item.detail}",
                        attempts=1,
                        first_failure_at=now,
                        last_failure_at=now,
                    ),
                )
        for item in rejected:
            _rejected(item.reason.value).inc()
            metrics.DEAD_LETTERS.labels(self.group, item.record.topic, REJECTED_CLASS).inc()


def make_sink(avcc: Avcc) -> StreamHandler:
    """The ``avcc-sink`` handler of a hub's avcc; it opens the analytics store on its first
    batch (``Avcc.analytics``), not at hub start."""
    sink: PlaybackSink | None = None

    async def handle(records: Sequence[Record]) -> None:
        nonlocal sink
        if not records:
            return
        if sink is None:
            sink = PlaybackSink(await avcc.analytics(), avcc.hub.dlq)
        await sink(records)

    return handle
