"""``avcc-chain`` (chain-svc): ``topic.chain.tx.pending`` → notarization →
``topic.chain.tx.confirmed`` (seed 000 §9.2.3).

The statement goes through the process's :class:`~..notary.Notary`, so works handled at the
same time share one chain transaction. Notarizing is idempotent per work (the chain answers
an existing place instead of a second one), which is what makes a redelivery — or a worker
killed between submit and confirm — anchor the work exactly once.
"""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.runtime.context import HandlerContext

from .. import events
from ..state import Avcc
from ..statements import Statement


async def on_pending(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Notarize one work and announce its place."""
    pending = ctx.payload_as(events.TxPending)
    statement = Statement(
        record_id=pending.avcc_record_id,
        chain_type=pending.chain_type,
        urgent=pending.final_level == "O",
        body=pending.statement.encode(),
    )
    placed = await avcc.notary.notarize(statement)
    avcc.failpoints.hit("avcc.chain.after_submit")
    confirmed = events.TxConfirmed(
        avcc_record_id=pending.avcc_record_id,
        chain_type=pending.chain_type,
        tx_hash=placed.tx_hash,
        block_height=placed.block_height,
        status="success",
        crd_address=placed.crd_address,
        proof=placed.proof,
    )
    return [
        env.derive(
            events.TX_CONFIRMED,
            confirmed.model_dump(),
            key=str(pending.avcc_record_id),
            source=events.CHAIN_SVC,
        )
    ]
