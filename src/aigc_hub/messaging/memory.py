"""An in-process broker for tests: partitioned topics, consumer groups, and a ``drain()``.

Nothing survives the process. A consumer joins its group when it is created (so ``drain``
sees it at once) and the group's partitions are spread round-robin over its members again
on every join and leave; ``on_revoke`` / ``on_assign`` run at the member's next ``fetch``.
Publishing to an undeclared topic creates it with one partition (like Kafka's
``auto.create.topics.enable``); declare topics with ``ensure_topics`` to get more.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.messaging.base import (
    Features,
    OutgoingMessage,
    PartitionLag,
    RebalanceCallback,
    Record,
    TopicPartition,
    partition_for,
)
from aigc_hub.messaging.catalog import TopicSpec

#: Called with every batch before it is appended; raising makes ``publish`` fail, appending nothing.
PublishFailpoint = Callable[[Sequence[OutgoingMessage]], None]


@dataclass
class _Topic:
    name: str
    logs: list[list[Record]]
    retention_ms: int | None


@dataclass
class _Group:
    members: list[MemoryConsumer] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


class MemoryBroker:
    """A broker held in memory; safe for many tasks of one event loop, not for threads."""

    features = Features(
        ordered_by_key=True,
        persistent=False,
        consumer_groups=True,
        cross_process=False,
        retention=False,
    )

    def __init__(
        self, *, clock: Clock | None = None, fail_publish: PublishFailpoint | None = None
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        #: Test hook: set it (or pass it) to make ``publish`` raise before appending.
        self.fail_publish = fail_publish
        self._topics: dict[str, _Topic] = {}
        self._groups: dict[str, _Group] = {}
        self._changed = asyncio.Event()
        self._sticky = itertools.count()
        self._closed = False

    # -- topics and records ------------------------------------------------------------

    async def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create missing topics; an existing one must have the same partition count."""
        for spec in specs:
            topic = self._topics.get(spec.name)
            if topic is None:
                self._create(spec.name, spec.partitions, spec.retention_ms)
            elif len(topic.logs) != spec.partitions:
                raise ValueError(
                    f"topic {spec.name!r} has {len(topic.logs)} partitions, not {spec.partitions}"
                )
            else:
                topic.retention_ms = spec.retention_ms

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Append all messages atomically, in input order per partition."""
        self._check_open()
        if not messages:
            return
        if self.fail_publish is not None:
            self.fail_publish(messages)
        now = self.clock.now_ms()
        keyless = next(self._sticky)  # one partition per batch for keyless messages
        for msg in messages:
            topic = self._topics.get(msg.topic) or self._create(msg.topic, 1, None)
            partition = partition_for(msg.key, len(topic.logs), fallback=keyless)
            log = topic.logs[partition]
            log.append(
                Record(msg.topic, partition, len(log), msg.key, msg.value, dict(msg.headers), now)
            )
        self._notify()

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> MemoryConsumer:
        """A new member of ``group``; it joins now and takes its share of the partitions."""
        self._check_open()
        member = MemoryConsumer(self, group, tuple(topics), on_assign, on_revoke)
        self._groups.setdefault(group, _Group()).members.append(member)
        self._rebalance(group)
        return member

    async def tail(self, topics: Sequence[str]) -> MemoryTail:
        """A group-less reader of ``topics`` from their current end; commits nothing."""
        self._check_open()
        ends = {tp: len(self._log(tp)) for tp in self._partitions(topics)}
        return MemoryTail(self, ends)

    async def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        """Committed offset, end offset and oldest unconsumed timestamp per existing partition.

        In the order of ``topics``, then by partition; a group that never committed is at 0.
        """
        committed = self._groups[group].committed if group in self._groups else {}
        out = []
        for name in dict.fromkeys(topics):
            topic = self._topics.get(name)
            for partition, log in enumerate(topic.logs if topic else []):
                pos = committed.get(TopicPartition(name, partition), 0)
                oldest = log[pos].timestamp_ms if pos < len(log) else None
                out.append(PartitionLag(group, name, partition, pos, len(log), oldest))
        return out

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every group with members has committed every record of its topics.

        Wakes on publish, commit and membership changes only (no polling); raises
        ``TimeoutError`` after ``timeout`` seconds. A group whose members never fetch never
        drains, so this times out rather than returning early.
        """
        async with asyncio.timeout(timeout):
            while not self._drained():
                await self._changed.wait()

    async def close(self) -> None:
        """Close every consumer of this broker; later calls raise ``RuntimeError``."""
        for group in list(self._groups.values()):
            for member in list(group.members):
                await member.close()
        self._closed = True

    # -- internals used by MemoryConsumer ------------------------------------------------

    def _create(self, name: str, partitions: int, retention_ms: int | None) -> _Topic:
        if partitions < 1:
            raise ValueError(f"topic {name!r} needs at least one partition")
        topic = _Topic(name, [[] for _ in range(partitions)], retention_ms)
        self._topics[name] = topic
        for group_name, group in self._groups.items():
            if any(name in m.topics for m in group.members):
                self._rebalance(group_name)
        return topic

    def _notify(self) -> None:
        # Waiters hold the old event, which stays set; new waiters get a fresh one.
        self._changed.set()
        self._changed = asyncio.Event()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("broker is closed")

    def _partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        return [
            TopicPartition(name, p)
            for name in sorted(set(topics))
            if name in self._topics
            for p in range(len(self._topics[name].logs))
        ]

    def _rebalance(self, group_name: str) -> None:
        """Spread the group's partitions round-robin over the members subscribed to each."""
        group = self._groups[group_name]
        wanted: dict[MemoryConsumer, set[TopicPartition]] = {m: set() for m in group.members}
        all_topics = [t for m in group.members for t in m.topics]
        for i, tp in enumerate(self._partitions(all_topics)):
            eligible = [m for m in group.members if tp.topic in m.topics]
            wanted[eligible[i % len(eligible)]].add(tp)
        for member, tps in wanted.items():
            member._reassign(tps, group.committed)
        self._notify()

    def _leave(self, member: MemoryConsumer) -> None:
        group = self._groups[member.group]
        group.members.remove(member)
        self._rebalance(member.group)

    def _commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        committed = self._groups[group].committed
        for tp, offset in offsets.items():
            committed[tp] = max(committed.get(tp, 0), offset)
        self._notify()

    def _log(self, tp: TopicPartition) -> list[Record]:
        return self._topics[tp.topic].logs[tp.partition]

    def _drained(self) -> bool:
        for group in self._groups.values():
            if not group.members:
                continue
            topics = [t for m in group.members for t in m.topics]
            for tp in self._partitions(topics):
                if group.committed.get(tp, 0) < len(self._log(tp)):
                    return False
        return True


class MemoryConsumer:
    """A member of a :class:`MemoryBroker` group; fetch from one task at a time.

    ``commit`` and ``assignment`` may be called from other tasks while a fetch waits.
    """

    def __init__(
        self,
        broker: MemoryBroker,
        group: str,
        topics: tuple[str, ...],
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
    ) -> None:
        self.broker = broker
        self.group = group
        self.topics = topics
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._positions: dict[TopicPartition, int] = {}
        self._announced: set[TopicPartition] = set()
        self._rotation = 0
        self._closed = False

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` records, round-robin over assigned partitions; [] on timeout."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await self._announce()
            changed = self.broker._changed
            records = self._take(max_records)
            remaining = deadline - loop.time()
            if records or remaining <= 0 or self._closed:
                return records
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets of assigned partitions; others are ignored, none moves backwards."""
        mine = {tp: off for tp, off in offsets.items() if tp in self._positions}
        if mine and not self._closed:
            self.broker._commit(self.group, mine)

    def assignment(self) -> set[TopicPartition]:
        """Partitions assigned to this member now (callbacks may not have run yet)."""
        return set(self._positions)

    async def close(self) -> None:
        """Run ``on_revoke`` for what this member was told it holds, then leave the group."""
        if self._closed:
            return
        if self._announced and self._on_revoke is not None:
            await self._on_revoke(set(self._announced))
        self._announced.clear()
        self._closed = True
        self.broker._leave(self)

    def _reassign(self, tps: set[TopicPartition], committed: Mapping[TopicPartition, int]) -> None:
        # Kept partitions keep their fetch position; new ones start at the committed offset.
        self._positions = {tp: self._positions.get(tp, committed.get(tp, 0)) for tp in tps}

    async def _announce(self) -> None:
        current = set(self._positions)
        revoked, assigned = self._announced - current, current - self._announced
        self._announced = current
        if revoked and self._on_revoke is not None:
            await self._on_revoke(revoked)
        if assigned and self._on_assign is not None:
            await self._on_assign(assigned)

    def _take(self, max_records: int) -> list[Record]:
        tps = sorted(self._positions)
        if not tps:
            return []
        self._rotation = (self._rotation + 1) % len(tps)
        out: list[Record] = []
        for tp in tps[self._rotation :] + tps[: self._rotation]:
            pos = self._positions[tp]
            chunk = self.broker._log(tp)[pos : pos + max_records - len(out)]
            self._positions[tp] = pos + len(chunk)
            out.extend(chunk)
            if len(out) >= max_records:
                break
        return out


class MemoryTail:
    """A :meth:`MemoryBroker.tail` reader: every partition it was given, from its end then."""

    def __init__(self, broker: MemoryBroker, positions: dict[TopicPartition, int]) -> None:
        self.broker = broker
        self._positions = positions
        self._rotation = 0
        self._closed = False

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` new records, round-robin over partitions; [] on timeout."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self.broker._changed
            records = self._take(max_records)
            remaining = deadline - loop.time()
            if records or remaining <= 0 or self._closed:
                return records
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Nothing to commit: a tail belongs to no group."""

    def assignment(self) -> set[TopicPartition]:
        """Every partition this reader follows."""
        return set(self._positions)

    async def close(self) -> None:
        """Stop reading; a waiting fetch returns []."""
        self._closed = True
        self.broker._notify()

    def _take(self, max_records: int) -> list[Record]:
        tps = sorted(self._positions)
        if not tps:
            return []
        self._rotation = (self._rotation + 1) % len(tps)
        out: list[Record] = []
        for tp in tps[self._rotation :] + tps[: self._rotation]:
            pos = self._positions[tp]
            chunk = self.broker._log(tp)[pos : pos + max_records - len(out)]
            self._positions[tp] = pos + len(chunk)
            out.extend(chunk)
            if len(out) >= max_records:
                break
        return out
