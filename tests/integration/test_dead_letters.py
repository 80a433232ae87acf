"""Dead letters: permanent errors at once, exhausted retries after all attempts, replay once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from aigc_hub.core.clock import ManualClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.messaging import headers as h
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.catalog import DLQ_TOPIC
from aigc_hub.reliability import audit
from aigc_hub.reliability.dlq import DeadLetterFilter, DeadLetterStatus
from tests.support import effects as fx
from tests.support.hubs import hub_for, make_broker, wait_until


async def _dlq_messages(broker: object, expected: int) -> list[dict[str, str]]:
    """The DLQ topic's announcements, one per event id: the relay publishes at least once
    (the running relay and ``drain()`` may both send a row), so copies are expected."""
    consumer = broker.consumer("dlq-inspector", [DLQ_TOPIC])  # type: ignore[attr-defined]
    found: dict[str, dict[str, str]] = {}
    for _ in range(50):
        for record in await consumer.fetch(100, timeout=0.1):
            headers = dict(record.headers)
            found.setdefault(headers.get(h.EVENT_ID, str(len(found))), headers)
        if len(found) >= expected:
            break
    await consumer.close()
    return list(found.values())


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_permanent_error_goes_to_dlq_at_once_with_reason_headers(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    behaviour = fx.Behaviour(permanent={"bad"})
    broker = make_broker(broker_kind, tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(behaviour)], clock=ManualClock()) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("bad", 1), fx.request("good", 2)])
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def settled() -> bool:
            return await hub.dlq.count() == 1 and len(await fx.effect_rows(hub.engine)) == 1

        await wait_until(settled, timeout=30)  # no clock movement needed: no retry happened
        [letter] = await hub.dlq.list()
        assert letter.error_class == "PermanentError"
        assert letter.attempts == 1
        assert letter.consumer == fx.GROUP and letter.topic == fx.TOPIC
        assert letter.key == "bad" and letter.partition is not None and letter.offset is not None
        assert behaviour.calls.count(("bad", 1)) == 1

        await hub.relay.drain()
        [announced] = await _dlq_messages(broker, 1)
        stop.set()
        await run
        assert announced[h.DLQ_ORIGINAL_TOPIC] == fx.TOPIC
        assert announced[h.DLQ_ORIGINAL_PARTITION] == str(letter.partition)
        assert announced[h.DLQ_ORIGINAL_OFFSET] == str(letter.offset)
        assert announced[h.DLQ_CONSUMER] == fx.GROUP
        assert announced[h.DLQ_ERROR_CLASS] == "PermanentError"
        assert "content rejected" in announced[h.DLQ_ERROR_MESSAGE]
        assert announced[h.DLQ_ATTEMPTS] == "1"
        assert int(announced[h.DLQ_FIRST_FAILURE]) <= int(announced[h.DLQ_LAST_FAILURE])
        assert announced[h.EVENT_ID] == letter.event_id


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_always_failing_handler_goes_through_every_attempt_then_replays_once(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    clock = ManualClock()
    behaviour = fx.Behaviour(always_fail={"doomed"})
    broker = make_broker(broker_kind, tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(behaviour)], clock=clock) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("doomed", 7), fx.request("fine", 8)])
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def dead() -> bool:
            return await hub.dlq.count() == 1

        started = clock.now_ms()
        await wait_until(dead, timeout=120, clock=clock, step_s=30.0)
        [letter] = await hub.dlq.list()
        # 1 try + 3 in-process retries, then 7 delayed redeliveries (seed 000 + seed 002)
        assert letter.attempts == 1 + 3 + 7
        assert behaviour.calls.count(("doomed", 7)) == 11
        assert len(letter.history) == 11
        assert letter.error_class == "RetryableError"
        waited_s = (letter.last_failure_at - letter.first_failure_at) / 1000
        # in-process 1+2+4 s, then 60·(1+2+…+64) s of delayed redelivery
        assert waited_s >= 7 + 60 * 127
        assert letter.last_failure_at - started < 3 * 3600 * 1000 + 60 * 127 * 1000
        assert len([r for r in await fx.effect_rows(hub.engine) if r[2] == "fine"]) == 1

        behaviour.fixed()
        await hub.dlq.replay(letter.id, actor="operator@test")

        async def applied() -> bool:
            return any(r[2] == "doomed" for r in await fx.effect_rows(hub.engine))

        await wait_until(applied, timeout=30)

        async def all_committed() -> bool:
            lag = await broker.lag(fx.GROUP, [fx.TOPIC])
            return sum(p.lag for p in lag) == 0

        await wait_until(all_committed, timeout=30)  # a second copy would have landed by now
        stop.set()
        await run
        doomed = [r for r in await fx.effect_rows(hub.engine) if r[2] == "doomed"]
        assert len(doomed) == 1 and doomed[0][1] == letter.event_id
        assert (await hub.dlq.get(letter.id)).status is DeadLetterStatus.REPLAYED
        [entry] = await audit.recent(hub.engine, action="dlq.replay")
        assert entry.actor == "operator@test" and entry.result == "ok"
        with pytest.raises(Exception, match="replayed"):
            await hub.dlq.replay(letter.id, actor="operator@test")


async def test_parked_key_holds_its_later_events_and_releases_them_in_order(
    db_url: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    behaviour = fx.Behaviour(fail_times={"parked": 4})  # fails the first delivery's 4 tries
    broker = make_broker("memory", tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline(behaviour)], clock=clock) as hub:
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("parked", 0)])
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def parked() -> bool:
            return len(await hub.redeliveries.list(fx.GROUP)) == 1

        await wait_until(parked, timeout=30, clock=clock, step_s=1.0)
        async with hub.transaction() as conn:
            await hub.outbox.add(conn, [fx.request("parked", 1), fx.request("free", 0)])

        async def behind() -> bool:
            rows = await fx.effect_rows(hub.engine)
            return len(await hub.redeliveries.list(fx.GROUP)) == 2 and any(
                r[2] == "free" for r in rows
            )

        await wait_until(behind, timeout=30)
        assert not [r for r in await fx.effect_rows(hub.engine) if r[2] == "parked"]

        async def released() -> bool:
            return len([r for r in await fx.effect_rows(hub.engine) if r[2] == "parked"]) == 2

        await wait_until(released, timeout=30, clock=clock, step_s=20.0)
        stop.set()
        await run
        assert [r[3] for r in await fx.effect_rows(hub.engine) if r[2] == "parked"] == [0, 1]
        assert await hub.redeliveries.list(fx.GROUP) == []


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_garbage_goes_to_dlq_with_a_reason_and_the_consumer_keeps_going(
    db_url: str, tmp_path: Path, broker_kind: str
) -> None:
    broker = make_broker(broker_kind, tmp_path)
    async with hub_for(db_url, broker, [fx.make_pipeline()], clock=ManualClock()) as hub:
        unknown = Envelope.new("test.nobody.knows", {"n": 1}, key="u", source="t")
        invalid = Envelope.new(fx.EVENT, {"n": "not a number"}, key="i", source="t")
        await broker.publish(
            [
                OutgoingMessage(fx.TOPIC, "g", b"\x00\xffnot json at all"),
                OutgoingMessage(fx.TOPIC, "u", unknown.to_bytes()),
                OutgoingMessage(fx.TOPIC, "i", invalid.to_bytes()),
                OutgoingMessage(fx.TOPIC, "ok", fx.request("ok", 1).to_bytes()),
            ]
        )
        stop = asyncio.Event()
        run = asyncio.create_task(hub.run(stop))

        async def settled() -> bool:
            return await hub.dlq.count() == 3 and len(await fx.effect_rows(hub.engine)) == 1

        await wait_until(settled, timeout=30)
        stop.set()
        await run
        letters = {dl.key: dl for dl in await hub.dlq.list(DeadLetterFilter(topic=fx.TOPIC))}
        assert letters["g"].error_class == "EnvelopeError"
        assert letters["g"].value == b"\x00\xffnot json at all"
        assert (
            letters["u"].error_class == "SchemaError"
            and "unknown event type" in letters["u"].error_message
        )
        assert letters["i"].error_class == "SchemaError" and "'n'" in letters["i"].error_message
        assert all(dl.attempts == 1 for dl in letters.values())
        with pytest.raises(Exception, match="not a valid envelope"):
            await hub.dlq.replay(letters["g"].id, actor="op")
        assert await hub.dlq.dismiss([letters["g"].id], actor="op", reason="garbage") == 1
        async with hub.engine.connect() as conn:
            rows = (
                await conn.execute(sa.text("select action, result from audit_log order by id"))
            ).all()
        assert [tuple(r) for r in rows] == [("dlq.replay", "refused"), ("dlq.dismiss", "ok")]
