"""Batch consumer groups run by a real hub on the embedded log and the memory broker: batches
cut at ``max_records`` or after ``max_wait_s``, at most ``concurrency`` calls at once, each
record's effect exactly once (duplicates published included), a record's own failure
dead-letters only it, and a batch call that fails has its records retried alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.bootstrap import Hub
from aigc_hub.core.clock import ManualClock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError, RetryableError
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.pipeline import BatchResults, Pipeline
from aigc_hub.reliability.dlq import DeadLetterFilter
from aigc_hub.runtime.context import HandlerContext
from tests.support import effects as fx
from tests.support.hubs import DoublePublisher, hub_for, make_broker, wait_until

GROUP = "effects-batcher"


@dataclass
class Calls:
    """What the batch handler saw, and how it misbehaves."""

    sizes: list[int] = field(default_factory=list)
    #: The ``n`` of each call's records, call by call.
    batches: list[list[int]] = field(default_factory=list)
    #: Keys whose record fails alone (its own result is a PermanentError).
    poison: set[str] = field(default_factory=set)
    #: Keys that make a whole call fail while they share it with other records, as a vendor
    #: refusing a request for one bad input; alone, the record is refused for good.
    spoilers: set[str] = field(default_factory=set)
    in_flight: int = 0
    most_in_flight: int = 0
    gate: asyncio.Event | None = None


def batch_pipeline(
    calls: Calls,
    *,
    max_records: int,
    max_wait_s: float,
    slots: int,
    priority: Callable[[Envelope], int] | None = None,
) -> Pipeline:
    p = Pipeline("effects")
    p.topic(TopicSpec(fx.TOPIC, 6, 7 * 86_400_000, pipeline="effects"))
    p.event(fx.EVENT, 1, topic=fx.TOPIC)(fx.EffectRequested)

    async def note_failure(conn: AsyncConnection, env: Envelope, error: BaseException) -> None:
        # The pipeline's own fact about the failure, committed with the dead letter.
        await conn.execute(fx.facts.insert().values(key=env.key, n=-1))

    @p.batch_handler(
        GROUP,
        [fx.TOPIC],
        max_records=max_records,
        max_wait_s=max_wait_s,
        concurrency=slots,
        on_dead_letter=note_failure,
        priority=priority,
    )
    async def write_effects(items: Sequence[tuple[Envelope, HandlerContext]]) -> BatchResults:
        calls.sizes.append(len(items))
        calls.batches.append([int(env.payload["n"]) for env, _ in items])
        calls.in_flight += 1
        calls.most_in_flight = max(calls.most_in_flight, calls.in_flight)
        try:
            if calls.gate is not None:
                await calls.gate.wait()
            keys = {env.key for env, _ in items}
            if keys & calls.spoilers:
                if len(items) > 1:
                    raise RetryableError("the vendor refused the whole request")
                return [PermanentError("input refused")]
            results: list[list[Envelope] | Exception] = []
            for env, ctx in items:
                if env.key in calls.poison:
                    results.append(PermanentError(f"bad data in {env.key}"))
                    continue
                payload = ctx.payload_as(fx.EffectRequested)
                ctx.insert(fx.effects, event_id=env.event_id, key=env.key, n=payload.n)
                results.append([])
            return results
        finally:
            calls.in_flight -= 1

    return p


@contextlib.asynccontextmanager
async def running(hub: Hub) -> AsyncIterator[None]:
    [spec] = [s for s in hub.handler_specs if s.group == GROUP]
    stop = asyncio.Event()
    task = asyncio.create_task(hub.runtime(spec).run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def publish(hub: Hub, envelopes: list[Envelope]) -> None:
    async with hub.transaction() as conn:
        await hub.outbox.add(conn, envelopes)
    await hub.relay.drain()


async def effects_of(hub: Hub) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _id, _event, key, _n in await fx.effect_rows(hub.engine):
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("broker_kind", ["memory", "embedded"])
async def test_records_are_handled_in_batches_and_each_takes_effect_once(
    sqlite_url: str, tmp_path: Path, broker_kind: str
) -> None:
    calls = Calls()
    # Every batch is published twice (a relay retry): the copies must take no effect.
    broker = DoublePublisher(make_broker(broker_kind, tmp_path))
    pipeline = batch_pipeline(calls, max_records=16, max_wait_s=0.5, slots=2)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub:  # type: ignore[arg-type]
        # 100 records of 20 keys: a key's records may share a batch.
        await publish(hub, [fx.request(f"doc-{i % 20}", i) for i in range(100)])
        async with running(hub):

            async def all_applied() -> bool:
                return sum((await effects_of(hub)).values()) >= 100

            await wait_until(all_applied, timeout=30)
        rows = await fx.effect_rows(hub.engine)
    assert sorted(n for *_, n in rows) == list(range(100))
    assert max(calls.sizes) == 16 and all(size <= 16 for size in calls.sizes)
    # 200 deliveries (copies included) in batches, far fewer calls than records.
    assert len(calls.sizes) <= 200 / 4


async def test_a_short_batch_waits_max_wait_s_then_goes(sqlite_url: str, tmp_path: Path) -> None:
    calls = Calls()
    pipeline = batch_pipeline(calls, max_records=50, max_wait_s=0.3, slots=2)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub, running(hub):
        await publish(hub, [fx.request(f"doc-{i}", i) for i in range(7)])

        async def applied() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 7

        await wait_until(applied, timeout=30)
    assert calls.sizes == [7]


async def test_no_more_than_concurrency_batches_run_at_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    calls = Calls(gate=gate)
    pipeline = batch_pipeline(calls, max_records=5, max_wait_s=0.05, slots=2)
    broker = make_broker("memory", tmp_path)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub, running(hub):
        await publish(hub, [fx.request(f"doc-{i}", i) for i in range(40)])

        async def two_running() -> bool:
            return calls.in_flight == 2

        await wait_until(two_running, timeout=30)
        gate.set()

        async def applied() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 40

        await wait_until(applied, timeout=30)
    assert calls.most_in_flight == 2
    # Records kept gathering while both slots were busy: the later batches are full.
    assert calls.sizes[2:] and all(size == 5 for size in calls.sizes[2:])


def waiting_for_a_batch() -> float:
    """The batch runtime's gauge of records waiting for a batch of this group."""
    return REGISTRY.get_sample_value("aigc_hub_handler_batch_waiting", {"group": GROUP}) or 0.0


async def test_a_batch_takes_the_most_urgent_records_waiting_first(
    sqlite_url: str, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    calls = Calls(gate=gate)
    urgent = range(100, 105)

    def rank(env: Envelope) -> int:
        return 1 if int(env.payload["n"]) in urgent else 0

    pipeline = batch_pipeline(calls, max_records=5, max_wait_s=1.0, slots=1, priority=rank)
    broker = make_broker("embedded", tmp_path)
    async with hub_for(sqlite_url, broker, [pipeline]) as hub, running(hub):
        await publish(hub, [fx.request(f"doc-{i}", i) for i in range(20)])

        async def first_batch_held_the_rest_waiting() -> bool:
            return calls.in_flight == 1 and waiting_for_a_batch() == 15

        await wait_until(first_batch_held_the_rest_waiting, timeout=30)
        # Urgent records arrive behind fifteen others while the only slot is busy.
        await publish(hub, [fx.request(f"hot-{n}", n) for n in urgent])

        async def urgent_ones_waiting_too() -> bool:
            return waiting_for_a_batch() == 20

        await wait_until(urgent_ones_waiting_too, timeout=30)
        gate.set()

        async def applied() -> bool:
            return len(await fx.effect_rows(hub.engine)) == 25

        await wait_until(applied, timeout=30)
    assert calls.sizes == [5] * 5
    assert max(calls.batches[0]) < 100
    assert sorted(calls.batches[1]) == list(urgent)
    rest = [n for batch in (calls.batches[0], *calls.batches[2:]) for n in batch]
    assert sorted(rest) == list(range(20))
    assert waiting_for_a_batch() == 0


async def failure_facts(hub: Hub) -> list[str]:
    async with hub.engine.connect() as conn:
        return list((await conn.execute(sa.select(fx.facts.c.key))).scalars())


async def test_a_records_own_failure_dead_letters_it_alone(sqlite_url: str, tmp_path: Path) -> None:
    calls = Calls(poison={"doc-3"})
    pipeline = batch_pipeline(calls, max_records=10, max_wait_s=0.2, slots=1)
    async with hub_for(sqlite_url, make_broker("memory", tmp_path), [pipeline]) as hub:
        async with running(hub):
            await publish(hub, [fx.request(f"doc-{i}", i) for i in range(10)])

            async def settled() -> bool:
                letters = await hub.dlq.list(DeadLetterFilter(consumer=GROUP))
                return len(await fx.effect_rows(hub.engine)) == 9 and len(letters) == 1

            await wait_until(settled, timeout=30)
        [letter] = await hub.dlq.list(DeadLetterFilter(consumer=GROUP))
        noted = await failure_facts(hub)
    assert letter.key == "doc-3" and "bad data" in letter.error_message
    # The group's dead-letter hook wrote its fact in the dead letter's transaction.
    assert noted == ["doc-3"]
    # The nine others committed from the one call: nothing was tried twice.
    assert calls.sizes == [10]


async def test_a_failed_batch_is_retried_record_by_record(sqlite_url: str, tmp_path: Path) -> None:
    clock = ManualClock()
    calls = Calls(spoilers={"doc-5"})
    pipeline = batch_pipeline(calls, max_records=8, max_wait_s=0.0, slots=1)
    broker = make_broker("memory", tmp_path, clock=clock)
    async with hub_for(sqlite_url, broker, [pipeline], clock=clock) as hub:
        await publish(hub, [fx.request(f"doc-{i}", i) for i in range(8)])
        async with running(hub):

            async def settled() -> bool:
                letters = await hub.dlq.list(DeadLetterFilter(consumer=GROUP))
                return len(await fx.effect_rows(hub.engine)) == 7 and len(letters) == 1

            await wait_until(settled, timeout=30, clock=clock)
        [letter] = await hub.dlq.list(DeadLetterFilter(consumer=GROUP))
        counts = await effects_of(hub)
        noted = await failure_facts(hub)
    assert letter.key == "doc-5" and letter.error_class == "PermanentError"
    assert noted == ["doc-5"]
    assert counts == {f"doc-{i}": 1 for i in range(8) if i != 5}
    # One call of eight failed; then each record was tried alone, once.
    assert calls.sizes[0] == 8 and calls.sizes[1:] == [1] * 8
