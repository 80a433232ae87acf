"""``avcc-code`` (code-svc): the record's state after the review and the chain, and the code.

* ``review.task.finished`` approved → ``APPROVED → ANCHORING`` and ``chain.tx.pending``
  with the statement to notarize (rejections and need_human were recorded by the review);
* ``chain.tx.confirmed`` → ``ANCHORING → ANCHORED → CODED``: the receipt and the code, in
  one transaction, then ``avcc.code.issued`` (embed it into the work).

Each move is guarded: a redelivered event finds the record moved on and does nothing, so a
code is issued once and never reissued.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext

from .. import events, records
from ..codes import make_code
from ..models import avcc_fingerprints
from ..state import Avcc
from ..statements import statement_of
from ..states import RecordStatus


async def on_event(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Route by event type (the group reads two topics)."""
    if env.event_type == events.REVIEW_FINISHED:
        return await on_review_finished(avcc, env, ctx)
    if env.event_type == events.TX_CONFIRMED:
        return await on_confirmed(avcc, env, ctx)
    return []


async def on_review_finished(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """An approved work goes to the chain."""
    finished = ctx.payload_as(events.ReviewFinished)
    if finished.decision != "approved":
        return []
    async with ctx.read() as conn:
        row = await records.load(conn, finished.avcc_record_id)
    if row is None or row["status"] != RecordStatus.APPROVED:
        return []
    level = row["final_level"]
    body = statement_of(avcc.settings, row)
    now = ctx.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        await records.move(
            conn,
            row,
            RecordStatus.ANCHORING,
            now_ms=now,
            cause="code.to_chain",
            cause_id=env.event_id,
            values={"chain_type": "copyright_main"},
        )
        pending = events.TxPendingV2(
            avcc_record_id=row["id"],
            chain_type="copyright_main",
            final_level=level,
            statement=body,
        )
        return [
            env.derive(
                events.TX_PENDING,
                pending.model_dump(),
                key=str(row["id"]),
                source=events.CODE_SVC,
                schema_version=events.CHAIN_EVENTS_VERSION,
            )
        ]

    ctx.write(record)
    return []


async def on_confirmed(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """The chain confirmed the work: record the receipt and issue the code."""
    confirmed = events.confirmed_v2(ctx.payload)
    # Settlement batches' confirmations are settlement-svc's (avcc-settlement reads them).
    if (
        confirmed.chain_type != "copyright_main"
        or confirmed.status != "success"
        or confirmed.avcc_record_id is None
    ):
        return []
    async with ctx.read() as conn:
        row = await records.load(conn, confirmed.avcc_record_id)
    if row is None or row["status"] != RecordStatus.ANCHORING:
        return []
    settings = avcc.settings
    code = make_code(settings.country, settings.issuer, settings.platform_node, int(row["id"]))
    now = ctx.clock.now_ms()

    async def record(conn: AsyncConnection) -> list[Envelope | Routed]:
        version = await records.move(
            conn,
            row,
            RecordStatus.ANCHORED,
            now_ms=now,
            cause="chain.confirmed",
            cause_id=env.event_id,
            values={
                "tx_hash": confirmed.tx_hash,
                "block_height": confirmed.block_height,
                "crd_address": confirmed.crd_address,
                "chain_proof": confirmed.proof,
            },
        )
        await records.move(
            conn,
            {**row, "status": RecordStatus.ANCHORED.value, "status_version": version},
            RecordStatus.CODED,
            now_ms=now,
            cause="code.issued",
            cause_id=env.event_id,
            values={"avcc_code": code, "issued_at": now},
        )
        await conn.execute(
            sa.update(avcc_fingerprints)
            .where(avcc_fingerprints.c.record_id == row["id"])
            .values(coded_at=now)
        )
        issued = events.CodeIssued(avcc_record_id=row["id"], avcc_code=code)
        return [
            env.derive(
                events.CODE_ISSUED, issued.model_dump(), key=str(row["id"]), source=events.CODE_SVC
            )
        ]

    ctx.write(record)
    return []
