"""``avcc-chain`` (chain-svc): ``topic.chain.tx.pending`` → notarization →
``topic.chain.tx.confirmed`` (seed 000 §9.2.3).

The statement goes through the process's :class:`~..notary.Notary`, so works handled at the
same time share one chain transaction. Notarizing is idempotent per work (the chain answers
an existing place instead of a second one), which is what makes a redelivery — or a worker
killed between submit and confirm — anchor the work exactly once.

The topic also carries settlement batches (§9.1 "分账指令", ``chain_type=settlement``): the
same path, the batch id in place of the record id. Both schema versions are read (v2 only
adds); v2 is what this group publishes.
"""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError
from aigc_hub.runtime.context import HandlerContext

from .. import events
from ..state import Avcc
from ..statements import Statement


async def on_pending(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Notarize one work or one settlement batch and announce its place (v1 or v2 read)."""
    pending = events.pending_v2(ctx.payload)
    subject, key = _subject_of(pending)
    statement = Statement(
        record_id=subject,
        chain_type=pending.chain_type,
        urgent=pending.final_level == "O",
        body=pending.statement.encode(),
    )
    placed = await avcc.notary.notarize(statement)
    avcc.failpoints.hit("avcc.chain.after_submit")
    settlement = pending.chain_type == "settlement"
    confirmed = events.TxConfirmedV2(
        avcc_record_id=None if settlement else subject,
        chain_type=pending.chain_type,
        tx_hash=placed.tx_hash,
        block_height=placed.block_height,
        status="success",
        crd_address=placed.crd_address,
        proof=placed.proof,
        settlement_batch_id=subject if settlement else None,
    )
    return [
        env.derive(
            events.TX_CONFIRMED,
            confirmed.model_dump(),
            key=key,
            source=events.CHAIN_SVC,
            schema_version=events.CHAIN_EVENTS_VERSION,
        )
    ]


def _subject_of(pending: events.TxPendingV2) -> tuple[int, str]:
    """The statement's subject id and the event key: a work's record id, or a settlement
    batch's id (its entry key ``settlement:<id>`` keeps it apart from works)."""
    if pending.chain_type == "settlement":
        if pending.settlement_batch_id is None:
            raise PermanentError("a settlement chain.tx.pending without settlement_batch_id")
        return pending.settlement_batch_id, f"settlement:{pending.settlement_batch_id}"
    if pending.avcc_record_id is None:
        raise PermanentError("a copyright_main chain.tx.pending without avcc_record_id")
    return pending.avcc_record_id, str(pending.avcc_record_id)
