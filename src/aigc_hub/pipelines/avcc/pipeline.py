"""``Pipeline("avcc", state=build_state)``: seed 000's content codes. Topics, events, the
consumer groups (the seed's services), routes and the ``aigc-hub avcc`` CLI.

Consumer groups, each its own concurrency pool, each handled by its module in ``handlers/``:

* ``avcc-review`` (review-svc) — ``topic.avcc.apply.created`` → the review;
* ``avcc-code`` (code-svc) — ``topic.review.task.finished`` → to the chain;
  ``topic.chain.tx.confirmed`` → the code;
* ``avcc-chain`` (chain-svc) — ``topic.chain.tx.pending`` → notarization, batched;
* ``avcc-embed`` — ``topic.avcc.code.issued`` → the C2PA manifest in the work;
* ``avcc-settlement`` (settlement-svc) — ``topic.avcc.purchase.recorded`` → the settlement
  ledger; ``topic.chain.tx.confirmed`` (settlement batches) → the period ANCHORED;
* ``avcc-detector`` (flink-job) — ``topic.playback.event`` → anomalies (a stream group).

Failures follow the seed's §9.3.3 through the backbone: 1 s, 2 s, 4 s in the consumer, then
the delayed redelivery (the seed's ``topic.system.retry`` stage: the backbone parks the
failing key in its ``redeliveries`` table), then ``topic.system.dlq`` (re-injected from the
console).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from aigc_hub.pipeline import Pipeline, TimelineEntry
from aigc_hub.store.engine import reader

from . import (
    events,
    http,
    models,
    playback_http,
    scanners,
    settlement_http,
    settlement_scanners,
)
from .handlers import chain, code, detector, embed, review, settlement, sink
from .settings import AvccSettings
from .state import NAME, build_state

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

pipeline = Pipeline(
    NAME,
    state=build_state,
    settings=AvccSettings,
    cli="aigc_hub.pipelines.avcc.cli:app",
    models=models.__name__,
    # Its tables' revisions are in the hub's own linear chain: no branch of its own.
    migrations=None,
)
events.register(pipeline)
pipeline.routers += [http.router, http.public_router, http.review_router]
pipeline.routers += [
    playback_http.playback_router,
    playback_http.nodes_router,
    playback_http.watch_router,
]
pipeline.scanner_with_state(scanners.StuckRecords)
pipeline.scanner_with_state(scanners.UnknownAnchors)
pipeline.routers += [settlement_http.router, settlement_http.admin_router]
pipeline.scanner_with_state(settlement_scanners.SettlementPeriods)

# Reviews wait on the store, threads (decoding, hashing) and the database: 8 at a time per
# process keep the event loop busy without queueing behind one another (bench/avcc.py).
pipeline.handler_with_state("avcc-review", [events.APPLY_TOPIC], concurrency=8, timeout=600)(
    review.on_apply
)
pipeline.handler_with_state(
    "avcc-code", [events.REVIEW_TOPIC, events.CONFIRMED_TOPIC], concurrency=8
)(code.on_event)
# Many in flight: concurrent statements are what fills a chain transaction.
pipeline.handler_with_state("avcc-chain", [events.PENDING_TOPIC], concurrency=64, timeout=120)(
    chain.on_pending
)
pipeline.handler_with_state(
    "avcc-settlement", [events.PURCHASE_TOPIC, events.CONFIRMED_TOPIC], concurrency=8
)(settlement.on_event)
pipeline.handler_with_state("avcc-embed", [events.ISSUED_TOPIC], concurrency=2, timeout=600)(
    embed.on_issued
)

# The seed's clickhouse-sink (telemetry road). A DuckDB batch costs a fixed ~35 ms (its
# commit) whatever its size, so rows/s grow with it: measured on 2 shared cores 28k/s at
# 1,000 records, 130k/s at 5,000, 153k/s at 20,000 (a third of that under heavy load).
# 20,000 it is; 0.5 s bounds the wait of a quiet stream.
pipeline.stream_with_state(sink.GROUP, [events.PLAYBACK_TOPIC], max_records=20_000, max_wait_s=0.5)(
    sink.make_sink
)
# The seed's flink-job, beside the sink on the same topic: batches of up to 5000 records
# (100k events/s is 20 a second); an empty batch after 0.2 s of silence is the tick that
# lets idle partitions go, so windows close when traffic stops (latency ~2 s, measured).
pipeline.stream_with_state(
    detector.GROUP, [events.PLAYBACK_TOPIC], max_records=5000, max_wait_s=0.2
)(detector.make_detector)


@pipeline.timeline
async def record_timeline(hub: Hub, subject_id: str) -> list[TimelineEntry] | None:
    """An application's moves, oldest first (the console's explorer)."""
    if not subject_id.isdigit():
        return None
    async with reader(hub.engine) as conn:
        rows = (
            await conn.execute(
                sa.select(models.avcc_record_events)
                .where(models.avcc_record_events.c.record_id == int(subject_id))
                .order_by(models.avcc_record_events.c.id)
            )
        ).all()
    if not rows:
        return None
    return [
        TimelineEntry(
            at_ms=int(r.at),
            source="transition",
            title=f"{r.from_status or '∅'} → {r.to_status}",
            detail={"cause": r.cause, "version": r.status_version},
        )
        for r in rows
    ]
