"""The inbox mark stores how the event was handled, written in the commit that marks it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.observability import metrics
from aigc_hub.pipeline import Pipeline
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store import tables
from tests.support import effects as fx
from tests.support.hubs import DoublePublisher, hub_for, make_broker, wait_until

GROUP = "effects-sometimes"


def _pipeline() -> Pipeline:
    """Stages an effect for even ``n``; for odd ``n`` it changes nothing."""
    p = Pipeline("effects")
    p.topic(TopicSpec(fx.TOPIC, 2, 7 * 86_400_000, pipeline="effects"))
    p.event(fx.EVENT, 1, topic=fx.TOPIC)(fx.EffectRequested)

    @p.handler(GROUP, [fx.TOPIC], concurrency=2)
    async def maybe_write(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        n = ctx.payload_as(fx.EffectRequested).n
        if n % 2 == 0:
            ctx.insert(fx.effects, event_id=env.event_id, key=env.key, n=n)
        return []

    return p


async def _codes(hub_engine: sa.ext.asyncio.AsyncEngine) -> dict[str, str | None]:
    async with hub_engine.connect() as conn:
        rows = await conn.execute(
            sa.select(tables.inbox.c.event_id, tables.inbox.c.result_code).where(
                tables.inbox.c.consumer == GROUP
            )
        )
        return {r.event_id: r.result_code for r in rows}


def _consumed(outcome: HandlingOutcome) -> float:
    return float(metrics.CONSUMED.labels(GROUP, fx.TOPIC, outcome)._value.get())


async def test_inbox_rows_store_applied_or_no_op_and_a_duplicate_keeps_the_first_code(
    db_url: str, tmp_path: Path
) -> None:
    before = {o: _consumed(o) for o in HandlingOutcome}
    inner = make_broker("embedded", tmp_path)
    broker = DoublePublisher(inner)  # every event is delivered twice
    async with hub_for(db_url, broker, [_pipeline()]) as hub:  # type: ignore[arg-type]
        events = [fx.request(f"k{n}", n) for n in range(6)]
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, events)
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def all_handled() -> bool:
            lag = await inner.lag(GROUP, [fx.TOPIC])
            return len(await _codes(hub.engine)) == 6 and sum(p.lag for p in lag) == 0

        await wait_until(all_handled, timeout=60)
        stop.set()
        await run
        codes = await _codes(hub.engine)
        effects = sorted(r[3] for r in await fx.effect_rows(hub.engine))

    assert codes == {
        e.event_id: (HandlingOutcome.APPLIED if n % 2 == 0 else HandlingOutcome.NO_OP).value
        for n, e in enumerate(events)
    }
    assert effects == [0, 2, 4]
    # The metric counts the same outcomes by the same names; each second copy is a duplicate.
    # (at least once: the relay may send a row more than twice, never fewer)
    counted = {o: _consumed(o) - before[o] for o in HandlingOutcome if _consumed(o) > before[o]}
    assert counted.pop(HandlingOutcome.DUPLICATE) >= 6
    assert counted == {HandlingOutcome.APPLIED: 3, HandlingOutcome.NO_OP: 3}
