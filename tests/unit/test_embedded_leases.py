"""Embedded-log group membership: fair shares, prompt hand-over, expired leases, dead processes."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from aigc_hub.core.clock import ManualClock
from aigc_hub.messaging.base import OutgoingMessage, Record, TopicPartition
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.messaging.embedded_consumer import EmbeddedConsumer

FAST = {"poll_interval": 0.01, "heartbeat_interval": 0.05, "retention_interval": None}


async def settle(consumers: Sequence[EmbeddedConsumer], partitions: int) -> list[int]:
    """Fetch until the members hold every partition once, evenly spread; their counts."""
    async with asyncio.timeout(10):
        while True:
            for c in consumers:
                await c.fetch(10, 0.01)
            owned = [c.assignment() for c in consumers]
            counts = [len(o) for o in owned]
            covered = sum(counts) == partitions == len(set().union(*owned))
            if covered and max(counts) - min(counts) <= 1:
                return counts


async def test_three_members_share_four_partitions_fairly(tmp_path: Path) -> None:
    brokers = [EmbeddedBroker(tmp_path / "log.db", **FAST) for _ in range(3)]  # type: ignore[arg-type]
    try:
        await brokers[0].ensure_topics([TopicSpec("t", 4, None)])
        members = [b.consumer("g", ["t"]) for b in brokers]
        assert sorted(await settle(members, 4)) == [1, 1, 2]
    finally:
        for b in brokers:
            await b.close()


async def test_close_hands_over_at_once_not_after_the_lease(tmp_path: Path) -> None:
    first = EmbeddedBroker(tmp_path / "log.db", lease_ttl=60, **FAST)  # type: ignore[arg-type]
    second = EmbeddedBroker(tmp_path / "log.db", lease_ttl=60, **FAST)  # type: ignore[arg-type]
    try:
        await first.ensure_topics([TopicSpec("t", 4, None)])
        a, b = first.consumer("g", ["t"]), second.consumer("g", ["t"])
        assert await settle([a, b], 4) == [2, 2]
        await a.close()
        async with asyncio.timeout(2):  # far below the 60 s lease
            while len(b.assignment()) < 4:
                await b.fetch(10, 0.05)
    finally:
        await second.close()
        await first.close()


async def test_expired_lease_moves_and_late_commit_is_refused(tmp_path: Path) -> None:
    clock = ManualClock()
    slow_hb = {"heartbeat_interval": 100.0, "lease_ttl": 6.0, "retention_interval": None}
    first = EmbeddedBroker(tmp_path / "log.db", clock=clock, **slow_hb)  # type: ignore[arg-type]
    second = EmbeddedBroker(tmp_path / "log.db", clock=clock, **slow_hb)  # type: ignore[arg-type]
    revoked: list[set[TopicPartition]] = []

    async def on_revoke(tps: set[TopicPartition]) -> None:
        revoked.append(tps)

    try:
        await first.ensure_topics([TopicSpec("t", 2, None)])
        await first.publish([OutgoingMessage("t", f"k{i}", b"x") for i in range(10)])
        stalled = first.consumer("g", ["t"], on_revoke=on_revoke)
        got = await stalled.fetch(100, 1)
        assert stalled.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}

        await clock.advance(7)  # the stalled member's lease runs out
        taker = second.consumer("g", ["t"])
        assert len(await taker.fetch(100, 1)) == 10  # took both, from the committed offset 0
        await stalled.commit({r.tp: r.offset + 1 for r in got})
        assert all(lag.committed == 0 for lag in await first.lag("g", ["t"]))

        await stalled.fetch(10, 0.01)  # its next fetch notices the loss
        assert revoked == [{TopicPartition("t", 0), TopicPartition("t", 1)}]
    finally:
        await second.close()
        await first.close()


CHILD = """
import asyncio, sys
from aigc_hub.messaging.base import TopicPartition
from aigc_hub.messaging.embedded import EmbeddedBroker

async def main():
    broker = EmbeddedBroker(sys.argv[1], heartbeat_interval=0.05, lease_ttl=0.5,
                            retention_interval=None)
    consumer = broker.consumer("g", ["t"])
    got = []
    while len(got) < 20:
        got += await consumer.fetch(20 - len(got), 1)
    await consumer.commit({TopicPartition("t", p): 3 for p in range(2)})
    print("ready", flush=True)
    await asyncio.sleep(3600)  # killed here, holding its leases

asyncio.run(main())
"""


async def test_partitions_of_a_killed_process_move_after_its_lease(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    broker = EmbeddedBroker(path, lease_ttl=0.5, **FAST)  # type: ignore[arg-type]
    try:
        await broker.ensure_topics([TopicSpec("t", 2, None)])
        keys = ["a", "d"]  # "a" and "d" land in different partitions of 2
        await broker.publish([OutgoingMessage("t", keys[i % 2], b"%d" % i) for i in range(20)])
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, str(path), stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        async with asyncio.timeout(30):
            assert await child.stdout.readline() == b"ready\n"
        child.kill()
        await child.wait()

        survivor = broker.consumer("g", ["t"])
        got: list[Record] = []
        async with asyncio.timeout(10):
            while len(got) < 14:
                got += await survivor.fetch(14 - len(got), 0.1)
        assert sorted((r.partition, r.offset) for r in got) == [
            (p, o) for p in range(2) for o in range(3, 10)
        ]
    finally:
        await broker.close()
