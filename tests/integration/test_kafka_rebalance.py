"""Kafka consumer groups under rebalances: hand-over without loss, duplicates only after the
last commit, and exactly-once effects through the hub's real inbox: each handled batch writes
its inbox marks (``reliability.inbox.mark``) and one effect row per new mark in one database
transaction, and the effects are counted from the database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.messaging.base import (
    Consumer,
    OutgoingMessage,
    Record,
    TopicPartition,
    partition_for,
)
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.kafka import KafkaBroker
from aigc_hub.reliability import inbox
from aigc_hub.store import engine as store_engine
from aigc_hub.testing.tansu import KafkaEndpoint
from tests.conftest import kafka_or_skip
from tests.support import effects as fx

pytestmark = pytest.mark.kafka

N = 2000
PARTITIONS = 6


@pytest.fixture(scope="module")
def kafka_endpoint() -> Iterator[KafkaEndpoint]:
    """A Tansu of this module (or ``$AIGC_HUB_TEST_KAFKA``)."""
    with kafka_or_skip() as endpoint:
        yield endpoint


@pytest.fixture
async def effect_store(sqlite_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite file (the hub's inbox table) with the test effect table."""
    engine = store_engine.create_engine(sqlite_url)
    await fx.create_tables(engine)
    yield engine
    await engine.dispose()


def fresh(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


@dataclass
class Handler:
    """Applies records as the runtime does: per fetched batch, one transaction writes the
    inbox marks and an effect row for each mark that was new; a marked event does nothing.

    ``deliveries`` only records what the broker handed to which member (delivery facts);
    whether an effect happened is read back from the database, never from this object.
    """

    engine: AsyncEngine
    consumer: str
    deliveries: list[tuple[str, Record]] = field(default_factory=list)

    async def handle(self, member: str, records: list[Record]) -> None:
        """Record the deliveries, then apply the batch's new events in one transaction."""
        if not records:
            return
        self.deliveries.extend((member, r) for r in records)
        by_event = {r.value.decode(): r for r in records}
        async with self.engine.begin() as conn:
            new = await inbox.mark(conn, self.consumer, list(by_event), now_ms=0)
            if new:
                await conn.execute(
                    fx.effects.insert(),
                    [
                        {"event_id": e, "key": by_event[e].key or "", "n": int(e)}
                        for e in sorted(new, key=int)
                    ],
                )


def next_offsets(records: list[Record]) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for r in records:
        out[r.tp] = max(out.get(r.tp, 0), r.offset + 1)
    return out


async def wait_split(members: list[Consumer], topic: str) -> None:
    """Fetch (nothing is published yet) until the members hold 3 partitions each."""
    async with asyncio.timeout(20):
        while sorted(len(m.assignment()) for m in members) != [3, 3]:
            for m in members:
                assert await m.fetch(10, 0.02) == []


async def test_a_member_leaves_mid_stream_and_the_other_takes_over_exactly_once(
    kafka_endpoint: KafkaEndpoint, effect_store: AsyncEngine
) -> None:
    stay_broker, leave_broker = kafka_endpoint.broker(), kafka_endpoint.broker()
    topic, group = fresh("rebalance"), fresh("g")
    handler = Handler(effect_store, consumer=group)
    try:
        await stay_broker.ensure_topics([TopicSpec(topic, PARTITIONS, None)])
        stay_committed: dict[TopicPartition, int] = {}

        async def stay_revoked(tps: set[TopicPartition]) -> None:
            # The runtime's on_revoke: commit what is done before the partitions go.
            await stay.commit({tp: o for tp, o in stay_committed.items() if tp in tps})

        stay = stay_broker.consumer(group, [topic], on_revoke=stay_revoked)
        leave = leave_broker.consumer(group, [topic])  # no on_revoke: leaves uncommitted work
        await wait_split([stay, leave], topic)
        leaving = leave.assignment()

        left = asyncio.Event()

        async def publisher() -> None:
            for start in range(0, N, 100):
                if start == N // 2:
                    await left.wait()  # the second half flows after the hand-over
                batch = [
                    OutgoingMessage(topic, f"key-{i % 97}", str(i).encode())
                    for i in range(start, start + 100)
                ]
                await stay_broker.publish(batch)

        async def run_stay(done: asyncio.Event) -> None:
            while not done.is_set():
                records = await stay.fetch(50, 0.1)
                await handler.handle("stay", records)
                offsets = next_offsets(records)
                await stay.commit(offsets)
                stay_committed.update(offsets)
                # Stop once every offset was delivered (to either member): a delivery fact.
                if len({(r.tp, r.offset) for _, r in handler.deliveries}) == N:
                    done.set()

        leaver_commits: dict[TopicPartition, int] = {}
        uncommitted: set[tuple[TopicPartition, int]] = set()

        async def run_leave() -> None:
            handled = 0
            while handled < 200:  # commit after every batch for a while...
                records = await leave.fetch(50, 0.1)
                await handler.handle("leave", records)
                handled += len(records)
                offsets = next_offsets(records)
                await leave.commit(offsets)
                leaver_commits.update(offsets)
            async with asyncio.timeout(10):  # ...then handle one batch without committing
                while not (records := await leave.fetch(50, 0.1)):
                    pass
            await handler.handle("leave", records)
            uncommitted.update((r.tp, r.offset) for r in records)
            await leave.close()
            left.set()

        done = asyncio.Event()
        async with asyncio.timeout(60):
            await asyncio.gather(publisher(), run_stay(done), run_leave())

        assert stay.assignment() == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        # Exactly once, counted from the database: one effect row per event, none missing.
        rows = await fx.effect_rows(effect_store)
        assert sorted(n for *_, n in rows) == list(range(N))
        # Duplicates are exactly what the leaver handled after its last commit, so the
        # inbox above had real redeliveries to absorb.
        seen = Counter((r.tp, r.offset) for _, r in handler.deliveries)
        duplicates = {pos for pos, n in seen.items() if n > 1}
        assert uncommitted and duplicates == uncommitted
        assert all(tp in leaving and off >= leaver_commits.get(tp, 0) for tp, off in duplicates)
        assert max(seen.values()) == 2
        lags = await stay_broker.lag(group, [topic])
        assert [lag.lag for lag in lags] == [0] * PARTITIONS
        assert sum(lag.end_offset for lag in lags) == N
    finally:
        await leave_broker.close()
        await stay_broker.close()


async def _publish_and_read_half(broker: KafkaBroker, topic: str, group: str) -> list[Record]:
    """Publish 40 records, read them all with a member of ``group``, commit the first half of
    each partition, and return the records that were read but not committed."""
    await broker.ensure_topics([TopicSpec(topic, 2, None)])
    await broker.publish([OutgoingMessage(topic, f"k{i}", b"%d" % i) for i in range(40)])
    first = broker.consumer(group, [topic])
    got: list[Record] = []
    async with asyncio.timeout(15):
        while len(got) < 40:
            got.extend(await first.fetch(40, 0.2))
    halves = [sorted((r for r in got if r.partition == p), key=lambda r: r.offset) for p in (0, 1)]
    await first.commit({TopicPartition(topic, p): len(h) // 2 for p, h in enumerate(halves)})
    await first.close()
    return [r for h in halves for r in h[len(h) // 2 :]]


async def test_a_member_closed_without_commit_redelivers_from_the_last_commit(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    broker = kafka_endpoint.broker()
    topic, group = fresh("redeliver"), fresh("g")
    try:
        rest = await _publish_and_read_half(broker, topic, group)
        second = broker.consumer(group, [topic])
        again: list[Record] = []
        async with asyncio.timeout(15):
            while len(again) < len(rest):
                again.extend(await second.fetch(40, 0.2))
        assert sorted((r.tp, r.offset) for r in again) == sorted((r.tp, r.offset) for r in rest)
        assert await second.fetch(10, 0.2) == []
    finally:
        await broker.close()


CHILD = """
import asyncio, sys
from aigc_hub.messaging.base import TopicPartition
from aigc_hub.messaging.kafka import KafkaBroker

async def main(topic, group):
    broker = KafkaBroker({bootstrap!r}, **{options!r})
    consumer = broker.consumer(group, [topic])
    got = []
    while len(got) < 40:
        got.extend(await consumer.fetch(40, 0.2))
    await consumer.commit({{TopicPartition(topic, p): 5 for p in (0, 1)}})
    print("committed", flush=True)
    await asyncio.sleep(3600)  # killed here, with 15 records of each partition uncommitted

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_killed_member_is_replaced_from_its_last_commit(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    """SIGKILL leaves no LeaveGroup: the group waits out the session (2 s on Tansu), then
    the new member resumes at the dead one's commits."""
    broker = kafka_endpoint.broker()
    topic, group = fresh("killed"), fresh("g")
    code = CHILD.format(bootstrap=kafka_endpoint.bootstrap, options=kafka_endpoint.broker_options())
    try:
        await broker.ensure_topics([TopicSpec(topic, 2, None)])
        for key in ("free", "held"):  # partitions 0 and 1
            assert partition_for(key, 2) == ("free", "held").index(key)
            await broker.publish([OutgoingMessage(topic, key, b"%d" % i) for i in range(20)])
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, topic, group, stdout=subprocess.PIPE
        )
        try:
            assert child.stdout is not None
            async with asyncio.timeout(20):
                assert (await child.stdout.readline()).strip() == b"committed"
        finally:
            if child.returncode is None:
                os.kill(child.pid, signal.SIGKILL)
            await child.wait()
        assert child.returncode == -signal.SIGKILL
        successor = broker.consumer(group, [topic])
        again: list[Record] = []
        async with asyncio.timeout(20):
            while len(again) < 30:
                again.extend(await successor.fetch(40, 0.2))
        assert sorted((r.partition, r.offset) for r in again) == [
            (p, o) for p in (0, 1) for o in range(5, 20)
        ]
        assert await successor.fetch(10, 0.2) == []
    finally:
        await broker.close()


async def test_on_revoke_commits_done_work_before_partitions_move(
    kafka_endpoint: KafkaEndpoint,
) -> None:
    """As the runtime does: ``on_revoke`` commits what is finished, inside the rebalance, so
    neither a joining member nor a successor after ``close`` sees any of it again."""
    first_broker, second_broker = kafka_endpoint.broker(), kafka_endpoint.broker()
    topic, group = fresh("revoke"), fresh("g")
    done: dict[TopicPartition, int] = {}
    revoked: list[set[TopicPartition]] = []

    async def commit_done(tps: set[TopicPartition]) -> None:
        revoked.append(set(tps))
        await first.commit({tp: off for tp, off in done.items() if tp in tps})

    try:
        await first_broker.ensure_topics([TopicSpec(topic, 4, None)])
        await first_broker.publish([OutgoingMessage(topic, f"k{i}", b"%d" % i) for i in range(80)])
        first = first_broker.consumer(group, [topic], on_revoke=commit_done)
        handled: list[Record] = []
        async with asyncio.timeout(15):
            while len(handled) < 80:
                handled.extend(await first.fetch(80, 0.2))
        done.update(next_offsets(handled))  # finished, never committed outside on_revoke

        second = second_broker.consumer(group, [topic])
        async with asyncio.timeout(15):
            while len(second.assignment()) != 2 or len(first.assignment()) != 2:
                assert await second.fetch(10, 0.05) == []
                assert await first.fetch(10, 0.01) == []
        assert len(revoked) == 1 and revoked[0] == second.assignment()
        await first.close()
        assert revoked[-1] == {TopicPartition(topic, p) for p in range(4)} - revoked[0]
        async with asyncio.timeout(15):
            while len(second.assignment()) != 4:
                assert await second.fetch(10, 0.05) == []
        assert await second.fetch(10, 0.3) == []
        assert [lag.lag for lag in await second_broker.lag(group, [topic])] == [0] * 4
    finally:
        await second_broker.close()
        await first_broker.close()
