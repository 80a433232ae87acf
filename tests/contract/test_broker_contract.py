"""The broker contract: one suite, run unchanged on every engine of ``broker_factory``.

Tests read ``broker.features`` to decide what applies. Topic and group names are unique per
test so engines with a shared server (Kafka) need no clean-up between tests.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pytest

from aigc_hub.messaging.base import (
    Broker,
    Consumer,
    OutgoingMessage,
    Record,
    TopicPartition,
    partition_for,
)
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.testing import MemoryBroker

if TYPE_CHECKING:
    from tests.contract.conftest import BrokerFactory

# -- helpers ---------------------------------------------------------------------------------


def fresh(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


async def new_topic(broker: Broker, partitions: int, retention_ms: int | None = None) -> str:
    name = fresh("topic")
    await broker.ensure_topics([TopicSpec(name, partitions, retention_ms)])
    return name


def messages(topic: str, keys: Iterable[str | None], tag: str = "m") -> list[OutgoingMessage]:
    """One message per key; the value names its position in the list."""
    return [OutgoingMessage(topic, key, f"{tag}{i}".encode()) for i, key in enumerate(keys)]


async def collect(consumer: Consumer, n: int, *, within: float = 10.0) -> list[Record]:
    """Fetch until exactly ``n`` records arrived; fails on timeout."""
    out: list[Record] = []
    async with asyncio.timeout(within):
        while len(out) < n:
            out.extend(await consumer.fetch(n - len(out), 0.2))
    return out


async def commit_records(consumer: Consumer, records: Sequence[Record]) -> None:
    """Commit the offset after the last of ``records`` in each partition."""
    offsets: dict[TopicPartition, int] = {}
    for r in records:
        offsets[r.tp] = max(offsets.get(r.tp, 0), r.offset + 1)
    await consumer.commit(offsets)


async def settle(consumers: Sequence[Consumer], expected: set[TopicPartition]) -> None:
    """Fetch (nothing is published yet) until the members split ``expected`` evenly."""
    async with asyncio.timeout(10):
        while True:
            for c in consumers:
                assert await c.fetch(10, 0.01) == []
            owned = [c.assignment() for c in consumers]
            counts = [len(o) for o in owned]
            split = sum(counts) == len(expected) and set().union(*owned) == expected
            if split and max(counts) - min(counts) <= 1:
                return


def all_partitions(topic: str, partitions: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(partitions)}


class Callbacks:
    """Records on_assign / on_revoke calls of one consumer."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    async def assign(self, tps: set[TopicPartition]) -> None:
        self.events.append(("assign", set(tps)))

    async def revoke(self, tps: set[TopicPartition]) -> None:
        self.events.append(("revoke", set(tps)))

    def held(self) -> set[TopicPartition]:
        """What the callbacks say the consumer holds now."""
        out: set[TopicPartition] = set()
        for kind, tps in self.events:
            out = out | tps if kind == "assign" else out - tps
        return out


# -- ordering and records -----------------------------------------------------------------


async def test_same_key_same_partition_in_publish_order(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 4)
    keys = [f"order-{i % 6}" for i in range(60)]
    for start in range(0, 60, 20):
        await broker.publish(messages(topic, keys[start : start + 20], tag=f"b{start}-"))
    records = await collect(broker.consumer(fresh("g"), [topic]), 60)

    by_key: dict[str | None, list[Record]] = defaultdict(list)
    for r in records:
        by_key[r.key].append(r)
    for key, recs in by_key.items():
        assert key is not None
        assert {r.partition for r in recs} == {partition_for(key, 4)}
        assert [r.offset for r in recs] == sorted(r.offset for r in recs)
    assert [r.value for r in by_key["order-0"]] == [
        f"b{s}-{i}".encode() for s in (0, 20, 40) for i in range(20) if (s + i) % 6 == 0
    ]


async def test_publish_batch_takes_consecutive_offsets_per_partition(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 3)
    batch = messages(topic, [f"k{i}" for i in range(30)])
    await broker.publish(batch)
    records = await collect(broker.consumer(fresh("g"), [topic]), 30)

    for p in range(3):
        sent = [m.value for m in batch if partition_for(m.key, 3) == p]
        got = sorted((r for r in records if r.partition == p), key=lambda r: r.offset)
        assert [r.value for r in got] == sent
        assert [r.offset for r in got] == list(range(len(sent)))


async def test_headers_keys_and_binary_values_round_trip(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 1)
    value = bytes(range(256)) + b"\x00\xff\x00"
    sent = [
        OutgoingMessage(topic, "k", value, {"event_id": "e-1", "note": "ümlaut ✓", "empty": ""}),
        OutgoingMessage(topic, None, b"", {}),
        OutgoingMessage(topic, "", b"\x00"),
    ]
    await broker.publish(sent)
    got = await collect(broker.consumer(fresh("g"), [topic]), 3)
    assert [(r.key, r.value, dict(r.headers)) for r in got] == [
        (m.key, m.value, dict(m.headers)) for m in sent
    ]
    assert all(r.topic == topic and r.partition == 0 for r in got)
    assert all(isinstance(r.timestamp_ms, int) for r in got)


async def test_fetch_times_out_empty_and_wakes_on_publish(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 2)
    consumer = broker.consumer(fresh("g"), [topic])
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await consumer.fetch(10, 0.1) == []
    assert loop.time() - started >= 0.09

    waiting = asyncio.create_task(consumer.fetch(10, 10.0))
    await asyncio.sleep(0.05)  # let the fetch start waiting
    await broker.publish(messages(topic, ["a"]))
    async with asyncio.timeout(2):  # woken, not timed out after 10 s
        got = await waiting
    assert [r.value for r in got] == [b"m0"]


async def test_fetch_continues_where_it_stopped_without_commit(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 1)
    await broker.publish(messages(topic, ["k"] * 6))
    consumer = broker.consumer(fresh("g"), [topic])
    first = await collect(consumer, 3)
    second = await collect(consumer, 3)
    assert [r.offset for r in first + second] == list(range(6))
    assert await consumer.fetch(10, 0.05) == []


# -- consumer groups ----------------------------------------------------------------------


async def test_new_member_resumes_at_commit_and_gets_uncommitted_again(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 1)
    group = fresh("g")
    await broker.publish(messages(topic, ["k"] * 10))
    first = broker.consumer(group, [topic])
    await collect(first, 10)
    await first.commit({TopicPartition(topic, 0): 6})
    await first.close()

    second = broker.consumer(group, [topic])
    again = await collect(second, 4)
    assert [r.offset for r in again] == [6, 7, 8, 9]
    assert await second.fetch(10, 0.05) == []


async def test_commit_never_moves_backwards(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 1)
    group = fresh("g")
    tp = TopicPartition(topic, 0)
    await broker.publish(messages(topic, ["k"] * 10))
    consumer = broker.consumer(group, [topic])
    await collect(consumer, 10)
    await consumer.commit({tp: 8})
    await consumer.commit({tp: 3})
    [lag] = await broker.lag(group, [topic])
    assert lag.committed == 8
    await consumer.close()

    resumed = await collect(broker.consumer(group, [topic]), 2)
    assert [r.offset for r in resumed] == [8, 9]


async def test_commit_ignores_partitions_not_assigned(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    mine, other = await new_topic(broker, 1), await new_topic(broker, 1)
    group = fresh("g")
    await broker.publish(messages(mine, ["k"]) + messages(other, ["k"]))
    consumer = broker.consumer(group, [mine])
    await collect(consumer, 1)
    await consumer.commit({TopicPartition(mine, 0): 1, TopicPartition(other, 0): 1})
    assert [(lag.topic, lag.committed) for lag in await broker.lag(group, [mine, other])] == [
        (mine, 1),
        (other, 0),
    ]


async def test_groups_read_independently(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 2)
    await broker.publish(messages(topic, [f"k{i}" for i in range(8)]))
    g1, g2 = fresh("g1"), fresh("g2")
    first = broker.consumer(g1, [topic])
    await commit_records(first, await collect(first, 8))
    second = await collect(broker.consumer(g2, [topic]), 8)
    assert sorted(r.value for r in second) == sorted(f"m{i}".encode() for i in range(8))
    assert sum(lag.committed for lag in await broker.lag(g1, [topic])) == 8
    assert sum(lag.committed for lag in await broker.lag(g2, [topic])) == 0


async def test_members_split_partitions_and_see_each_record_once(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    # Where the engine allows, the second member lives on another broker of the same store.
    other = broker_factory() if broker.features.cross_process else broker
    topic = await new_topic(broker, 4)
    group = fresh("g")
    calls = [Callbacks(), Callbacks()]
    members = [
        b.consumer(group, [topic], on_assign=cb.assign, on_revoke=cb.revoke)
        for b, cb in zip((broker, other), calls, strict=True)
    ]
    await settle(members, all_partitions(topic, 4))
    assert [len(m.assignment()) for m in members] == [2, 2]
    assert [cb.held() for cb in calls] == [m.assignment() for m in members]

    await broker.publish(messages(topic, [f"key-{i}" for i in range(80)]))
    seen: list[tuple[int, Record]] = []
    async with asyncio.timeout(10):
        while len(seen) < 80:
            for i, member in enumerate(members):
                got = await member.fetch(7, 0.02)
                assert {r.tp for r in got} <= member.assignment()
                seen.extend((i, r) for r in got)
                await commit_records(member, got)
    assert len({(r.partition, r.offset) for _, r in seen}) == 80
    for member in members:
        assert await member.fetch(10, 0.05) == []
    assert all(lag.lag == 0 for lag in await broker.lag(group, [topic]))


async def test_leaving_member_hands_over_from_its_last_commit(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    other = broker_factory() if broker.features.cross_process else broker
    topic = await new_topic(broker, 4)
    group = fresh("g")
    stay_calls, leave_calls = Callbacks(), Callbacks()
    stay = broker.consumer(group, [topic], on_assign=stay_calls.assign)
    leave = other.consumer(group, [topic], on_revoke=leave_calls.revoke)
    await settle([stay, leave], all_partitions(topic, 4))
    leaving = leave.assignment()

    await broker.publish(messages(topic, [f"key-{i}" for i in range(60)]))
    stay_got = await collect_all(stay)
    await commit_records(stay, stay_got)
    leave_got = await collect_all(leave)
    assert len(stay_got) + len(leave_got) == 60
    # The leaving member commits only the first half of what it read in each partition.
    halves: dict[TopicPartition, list[Record]] = defaultdict(list)
    for r in leave_got:
        halves[r.tp].append(r)
    committed = [r for recs in halves.values() for r in recs[: len(recs) // 2]]
    await commit_records(leave, committed)
    await leave.close()
    assert leave_calls.events[-1] == ("revoke", leaving)

    expected = sorted((r.tp, r.offset) for r in leave_got if r not in committed)
    redelivered = await collect(stay, len(expected))
    assert sorted((r.tp, r.offset) for r in redelivered) == expected
    assert stay.assignment() == all_partitions(topic, 4)
    assert stay_calls.held() == all_partitions(topic, 4)
    assert await stay.fetch(10, 0.05) == []


async def collect_all(consumer: Consumer) -> list[Record]:
    """Fetch until a short fetch comes back empty."""
    out: list[Record] = []
    async with asyncio.timeout(10):
        while got := await consumer.fetch(100, 0.1):
            out.extend(got)
    return out


async def test_lag_reports_committed_end_and_oldest_unconsumed(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 1)
    group = fresh("g")
    for i in range(5):
        await broker.publish(messages(topic, ["k"], tag=f"r{i}-"))
        await broker_factory.clock.advance(1.0)
    [fresh_lag] = await broker.lag(group, [topic])
    consumer = broker.consumer(group, [topic])
    records = await collect(consumer, 5)
    assert (fresh_lag.committed, fresh_lag.end_offset, fresh_lag.lag) == (0, 5, 5)
    assert fresh_lag.oldest_unconsumed_ms == records[0].timestamp_ms

    await consumer.commit({TopicPartition(topic, 0): 2})
    [lag] = await broker.lag(group, [topic])
    assert (lag.group, lag.topic, lag.partition) == (group, topic, 0)
    assert (lag.committed, lag.end_offset, lag.lag) == (2, 5, 3)
    assert lag.oldest_unconsumed_ms == records[2].timestamp_ms

    await consumer.commit({TopicPartition(topic, 0): 5})
    [done] = await broker.lag(group, [topic])
    assert (done.committed, done.lag, done.oldest_unconsumed_ms) == (5, 0, None)


async def test_lag_lists_every_partition(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 3)
    lags = await broker.lag(fresh("g"), [topic])
    assert [(lag.partition, lag.end_offset, lag.oldest_unconsumed_ms) for lag in lags] == [
        (0, 0, None),
        (1, 0, None),
        (2, 0, None),
    ]


async def test_ensure_topics_is_idempotent_and_checks_partitions(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 2)
    await broker.ensure_topics([TopicSpec(topic, 2, None)])
    with pytest.raises(ValueError, match="partitions"):
        await broker.ensure_topics([TopicSpec(topic, 5, None)])


# -- retention, persistence, processes -----------------------------------------------------


async def test_retention_deletes_old_records_by_age(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    if not broker.features.retention:
        pytest.skip("engine has no retention")
    topic = await new_topic(broker, 1, retention_ms=1_000)
    behind = fresh("g")  # committed nothing: its offset falls below the log start
    await broker.publish(messages(topic, ["k"] * 3, tag="old"))
    await broker_factory.clock.advance(5.0)
    await broker.publish(messages(topic, ["k"] * 2, tag="new"))
    deleted = await broker_factory.expire(broker)
    if deleted is None:
        pytest.skip("engine cannot be made to apply retention now")
    assert deleted == 3
    assert await broker_factory.expire(broker) == 0

    [lag] = await broker.lag(behind, [topic])
    assert (lag.committed, lag.end_offset) == (0, 5)
    got = await collect(broker.consumer(behind, [topic]), 2)
    assert [(r.offset, r.value) for r in got] == [(3, b"new0"), (4, b"new1")]
    assert lag.oldest_unconsumed_ms == got[0].timestamp_ms


async def test_offsets_and_records_survive_reopen(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    if not broker.features.persistent:
        pytest.skip("engine is not persistent")
    topic = await new_topic(broker, 2)
    group = fresh("g")
    await broker.publish(messages(topic, [f"k{i}" for i in range(10)]))
    consumer = broker.consumer(group, [topic])
    await commit_records(consumer, await collect(consumer, 10))
    await broker.publish(messages(topic, [f"k{i}" for i in range(4)], tag="late"))
    await broker.close()

    reopened = broker_factory()
    assert sum(lag.end_offset for lag in await reopened.lag(group, [topic])) == 14
    got = await collect(reopened.consumer(group, [topic]), 4)
    assert sorted(r.value for r in got) == [f"late{i}".encode() for i in range(4)]


async def test_brokers_on_one_store_see_each_other(broker_factory: BrokerFactory) -> None:
    writer = broker_factory()
    if not writer.features.cross_process:
        pytest.skip("engine is not shared across processes")
    reader = broker_factory()
    topic = await new_topic(writer, 2)
    group = fresh("g")
    consumer = reader.consumer(group, [topic])
    assert await consumer.fetch(10, 0.01) == []
    waiting = asyncio.create_task(collect(consumer, 5, within=5))
    await writer.publish(messages(topic, [f"k{i}" for i in range(5)]))
    got = await waiting
    await commit_records(consumer, got)
    assert sum(lag.committed for lag in await writer.lag(group, [topic])) == 5


async def test_records_published_by_another_process(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    code = broker_factory.subprocess_code()
    if not broker.features.cross_process or code is None:
        pytest.skip("engine is not shared across processes")
    topic = await new_topic(broker, 3)
    consumer = broker.consumer(fresh("g"), [topic])
    assert await consumer.fetch(10, 0.01) == []
    script = code + (
        "import asyncio\n"
        "from aigc_hub.messaging.base import OutgoingMessage\n"
        "async def main():\n"
        "    for start in range(0, 300, 50):\n"
        f"        await broker.publish([OutgoingMessage({topic!r}, f'k{{i % 7}}', b'%d' % i)\n"
        "                              for i in range(start, start + 50)])\n"
        "    await broker.close()\n"
        "asyncio.run(main())\n"
    )
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    try:
        got = await collect(consumer, 300, within=30)
    finally:
        assert await child.wait() == 0
    for k in range(7):
        values = [int(r.value) for r in got if r.key == f"k{k}"]
        assert values == list(range(k, 300, 7))


# -- tails: group-less readers from the end ------------------------------------------------


async def test_tail_reads_every_partition_from_the_end_not_history(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 3)
    await broker.publish(messages(topic, [f"old{i}" for i in range(6)], tag="old"))
    tail = await broker.tail([topic])
    assert tail.assignment() == {TopicPartition(topic, p) for p in range(3)}
    assert await tail.fetch(10, 0.2) == []  # history is not replayed

    await broker.publish(messages(topic, [f"k{i}" for i in range(9)], tag="new"))
    got = await collect(tail, 9)
    assert sorted(r.value for r in got) == sorted(f"new{i}".encode() for i in range(9))
    for p in range(3):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == sorted(offsets)
    await tail.commit({r.tp: r.offset + 1 for r in got})  # a no-op, never an error
    assert await tail.fetch(10, 0.05) == []
    await tail.close()


async def test_tails_share_nothing_and_groups_do_not_see_them(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = await new_topic(broker, 2)
    # A second broker on the same store is another API process, where the engine has them.
    other = broker_factory() if broker.features.cross_process else broker
    first, second = await broker.tail([topic]), await other.tail([topic])
    await broker.publish(messages(topic, [f"k{i}" for i in range(6)]))
    for tail in (first, second):
        assert sorted(r.value for r in await collect(tail, 6)) == [
            f"m{i}".encode() for i in range(6)
        ]
    # A group reading the topic starts from the beginning: the tails committed nothing.
    group = fresh("g")
    assert len(await collect(broker.consumer(group, [topic]), 6)) == 6
    await first.close()
    await second.close()


# -- the memory broker's test helpers (not part of the engine contract) --------------------


async def test_memory_drain_waits_for_every_group_to_commit() -> None:
    broker = MemoryBroker()
    await broker.ensure_topics([TopicSpec("t", 3, None)])
    consumer = broker.consumer("g", ["t"])
    await broker.publish(messages("t", [f"k{i}" for i in range(9)]))

    async def work() -> None:
        while True:
            await commit_records(consumer, await consumer.fetch(2, 5.0))

    worker = asyncio.create_task(work())
    await broker.drain(timeout=5)
    assert all(lag.lag == 0 for lag in await broker.lag("g", ["t"]))
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    await broker.publish(messages("t", ["k0"]))
    with pytest.raises(TimeoutError):
        await broker.drain(timeout=0.05)
    await broker.close()


async def test_memory_auto_creates_topics_and_fails_on_demand() -> None:
    def refuse(batch: Sequence[OutgoingMessage]) -> None:
        raise ConnectionError(f"refused {len(batch)}")

    broker = MemoryBroker(fail_publish=refuse)
    with pytest.raises(ConnectionError):
        await broker.publish(messages("auto", ["a", "b"]))
    broker.fail_publish = None
    await broker.publish(messages("auto", ["a", "b"]))
    [lag] = await broker.lag("g", ["auto"])
    assert (lag.partition, lag.end_offset) == (0, 2)
    await broker.close()
