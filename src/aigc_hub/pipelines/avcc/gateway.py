"""gateway-svc's one command: take a node's playback batch (seed 000 §9.2.4, §9.3.1).

Two roads leave from here on purpose. Every event goes to ``topic.playback.event`` on the
telemetry road: published straight to the broker (no outbox, no inbox; on Kafka the
``telemetry`` producer profile: ``acks=1``, ``linger.ms=5``, 64 KB batches), for the
analytics sink and the anomaly detector; it never feeds billing. A purchase is money, so it
also takes the reliable road: ``avcc.purchase.recorded`` is written through the outbox in a
transaction before the batch is answered, and settlement-svc books it once per ``event_id``.

The purchase is committed before the telemetry publish: if the publish then fails the node
gets a 503 and resends the batch, and settlement's business keys absorb the repeat.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.store.engine import reader

from . import events
from .models import avcc_records
from .playback import Batch, BatchRefused, Limits, parse_batch
from .state import Avcc


@dataclass(frozen=True)
class Ingested:
    """What became of an accepted batch."""

    accepted: int
    purchases: int


async def ingest(avcc: Avcc, node: str, body: bytes) -> Ingested:
    """Check ``body`` (raises :class:`~.playback.BatchRefused`), record its purchases, publish
    its events."""
    now = avcc.hub.clock.now_ms()
    s = avcc.settings
    limits = Limits(
        s.playback_max_events,
        now - s.playback_max_age_s * 1000,
        now + s.playback_max_skew_s * 1000,
    )
    batch = parse_batch(body, node, limits, avcc.code_checks)
    if batch.purchases:
        await _record_purchases(avcc, batch)
    await avcc.hub.broker.publish(batch.records)
    return Ingested(len(batch.records), len(batch.purchases))


async def _record_purchases(avcc: Avcc, batch: Batch) -> None:
    owners = await _owners(avcc, {p.avcc_code for _, p in batch.purchases})
    unissued = [(i, p) for i, p in batch.purchases if p.avcc_code not in owners]
    if unissued:
        raise BatchRefused(
            f"{len(unissued)} purchase(s) of codes never issued: the batch was not taken",
            [
                {
                    "field": f"body.events[{i}].payload.avcc_code",
                    "message": "no work holds this code: a purchase settles only issued codes",
                }
                for i, _ in unissued[:20]
            ],
            len(unissued),
        )
    envelopes = [
        Envelope.new(
            events.PURCHASE_RECORDED,
            p.model_dump(),
            key=p.avcc_code,
            source=events.GATEWAY_SVC,
            tenant_id=owners[p.avcc_code],
        )
        for _, p in batch.purchases
    ]

    async def write(conn: AsyncConnection) -> None:
        await avcc.hub.outbox.add(conn, envelopes)

    await avcc.hub.service_call(write)


async def _owners(avcc: Avcc, codes: set[str]) -> dict[str, str]:
    """The tenant of each issued code among ``codes`` (issued codes never change owner, so
    answers are remembered)."""
    known = avcc.code_owners
    missing = [c for c in codes if c not in known]
    if missing:
        async with reader(avcc.hub.engine) as conn:
            rows = await conn.execute(
                sa.select(avcc_records.c.avcc_code, avcc_records.c.tenant_id).where(
                    avcc_records.c.avcc_code.in_(missing)
                )
            )
            for code, tenant in rows:
                known[code] = tenant
    return {c: known[c] for c in codes if c in known}
