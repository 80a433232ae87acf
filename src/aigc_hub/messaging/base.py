"""The broker protocol every messaging engine implements, and the records it moves.

A broker stores keyed records in partitioned topics (partition = stable hash of the key,
so one key keeps its order) and serves them to consumer groups, which commit the offset
of the next record to read per partition. What an engine guarantees is stated in its
:class:`Features`; the runtime and the contract suite read the flags, never the class.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from aigc_hub.messaging.catalog import TopicSpec

DeliveryProfile = Literal["reliable", "telemetry"]


@dataclass(frozen=True)
class Features:
    """What a broker engine guarantees, declared as data."""

    ordered_by_key: bool = True
    persistent: bool = False
    consumer_groups: bool = True
    cross_process: bool = False
    retention: bool = False
    delayed_delivery: bool = False
    pause_resume: bool = False


@dataclass(frozen=True, order=True)
class TopicPartition:
    """One partition of one topic."""

    topic: str
    partition: int


@dataclass(frozen=True)
class OutgoingMessage:
    """A record to publish; ``key`` picks the partition, ``headers`` ride along untouched."""

    topic: str
    key: str | None
    value: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class Record(NamedTuple):
    """A record as read back from a partition, with its position and append time.

    A named tuple, not a frozen dataclass: consumers build one per record (100,000 a second on
    the telemetry road) and a tuple is built in about a third of the time.
    """

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    headers: Mapping[str, str]
    timestamp_ms: int

    @property
    def tp(self) -> TopicPartition:
        """This record's topic-partition."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class PartitionLag:
    """A consumer group's position on one partition."""

    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int
    oldest_unconsumed_ms: int | None

    @property
    def lag(self) -> int:
        """Records appended but not yet committed by the group."""
        return max(0, self.end_offset - self.committed)


#: Called with the partitions a consumer gains or loses in a rebalance.
RebalanceCallback = Callable[[set[TopicPartition]], Awaitable[None]]


def partition_for(key: str | None, partitions: int, *, fallback: int = 0) -> int:
    """Stable partition of a key (CRC-32), the same in every process and engine."""
    if key is None:
        return fallback % partitions
    return zlib.crc32(key.encode()) % partitions


class Consumer(Protocol):
    """One member of a consumer group reading a set of topics."""

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Return up to ``max_records`` records of assigned partitions, waiting up to ``timeout`` s.

        Records of one partition come in offset order; a fetch continues where the previous
        one stopped (not at the committed offset), so uncommitted records are not repeated
        unless the partition is reassigned.
        """
        ...

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit, per partition, the offset of the next record to read.

        Offsets never move backwards; a partition no longer assigned to this member is not
        committed.
        """
        ...

    def assignment(self) -> set[TopicPartition]:
        """Partitions currently assigned to this member."""
        ...

    async def close(self) -> None:
        """Leave the group; assigned partitions go to the remaining members."""
        ...


class Broker(Protocol):
    """A partitioned, keyed log with consumer groups."""

    features: Features

    async def ensure_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create missing topics with the given partitions and retention."""
        ...

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Append messages; on return all are durable, in order per key. Raises on failure."""
        ...

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> Consumer:
        """A new member of ``group`` reading ``topics`` from the group's committed offsets."""
        ...

    async def tail(self, topics: Sequence[str]) -> Consumer:
        """A reader of every partition of ``topics`` from their current end, outside any group.

        Returns once its positions are fixed: it delivers every record appended after that
        and none appended before. It joins no group, shares nothing with other readers,
        and ``commit`` is a no-op, so it leaves no state behind (a per-process live feed).
        Only partitions that exist when it is made are read.
        """
        ...

    async def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        """The group's committed offset, end offset and oldest unconsumed age per partition."""
        ...

    async def close(self) -> None:
        """Release connections and background tasks."""
        ...
