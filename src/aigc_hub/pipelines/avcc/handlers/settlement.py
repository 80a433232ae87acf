"""``avcc-settlement`` (settlement-svc): purchases → the settlement ledger; the chain's
confirmation of a settlement batch → its period ANCHORED (seed 000 §9.2.3's second consumer).

* ``avcc.purchase.recorded`` → the work of the code, then its three lines (tenant, node,
  platform) appended through the backbone ledger, in the one transaction that marks the
  delivery handled (``settlement_books.book``). A purchase delivered twice, in one envelope
  or two, is booked once: the inbox drops the same envelope, the ledger's business keys
  ``<purchase_id>:<party>`` the same purchase in another.
* ``chain.tx.confirmed`` (v1 or v2) with ``chain_type=settlement`` → the period ANCHORED with
  its chain fields and proof (a guarded move); ``copyright_main`` ones are code-svc's.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError
from aigc_hub.reliability.outbox import Routed
from aigc_hub.runtime.context import HandlerContext

from .. import events, settlement_books
from ..state import Avcc

#: The longest purchase id the ledger's ``purchase_id`` column (``String(64)``) holds.
PURCHASE_ID_MAX = 64


class UnknownCode(PermanentError):
    """The purchase names a code that was never issued: nobody's share to credit."""


class InvalidPurchase(PermanentError):
    """The purchase cannot be booked as it is (the message says why)."""


async def on_event(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Route by event type (the group reads two topics)."""
    if env.event_type == events.PURCHASE_RECORDED:
        return await on_purchase(avcc, env, ctx)
    if env.event_type == events.TX_CONFIRMED:
        return await on_confirmed(avcc, env, ctx)
    return []


async def on_purchase(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """Book one purchase (staged: it commits with the delivery's inbox mark)."""
    purchase = ctx.payload_as(events.PurchaseRecorded)
    if not 0 < len(purchase.purchase_id) <= PURCHASE_ID_MAX:
        raise InvalidPurchase(
            f"purchase_id must be 1 to {PURCHASE_ID_MAX} characters, "
            f"not {len(purchase.purchase_id)}"
        )
    async with ctx.read() as conn:
        work = await settlement_books.work_of(conn, purchase.avcc_code)
    if work is None:
        raise UnknownCode(
            f"purchase {purchase.purchase_id}: no work was issued code {purchase.avcc_code}"
        )
    s = avcc.settings
    shares = settlement_books.Shares(s.creator_share_bps, s.node_share_bps, s.settlement_period_s)
    now = ctx.clock.now_ms()

    async def book(conn: AsyncConnection) -> list[Envelope | Routed]:
        await settlement_books.book(conn, purchase, work, shares, now)
        return []

    ctx.write(book)
    return []


async def on_confirmed(avcc: Avcc, env: Envelope, ctx: HandlerContext) -> list[Envelope]:
    """A settlement batch is on the chain: its period ANCHORED (once)."""
    confirmed = events.confirmed_v2(ctx.payload)
    if (
        confirmed.chain_type != "settlement"
        or confirmed.status != "success"
        or confirmed.settlement_batch_id is None
    ):
        return []
    now = ctx.clock.now_ms()

    async def anchor(conn: AsyncConnection) -> list[Envelope | Routed]:
        await settlement_books.anchor(conn, confirmed, now)
        return []

    ctx.write(anchor)
    return []
