"""A group-less reader of the embedded log: every partition of some topics, from their end.

It never writes to the file (no member row, no lease, no committed offset), so it leaves
nothing behind and any number of processes may tail the same topics. It reads with the
same fair ``UNION ALL`` query as group members and wakes on in-process appends, else polls
every ``poll_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa

from aigc_hub.messaging import embedded_reads as reads
from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import Record, TopicPartition

if TYPE_CHECKING:
    from aigc_hub.messaging.embedded import EmbeddedBroker


async def open_tail(broker: EmbeddedBroker, topics: Sequence[str]) -> EmbeddedTail:
    """A tail whose positions are each partition's ``next_offset`` now (one read snapshot)."""
    await broker.start()
    p = schema.partitions
    async with broker.reading() as conn:
        infos = await broker.directory.load(conn, set(topics))
        tp_ids = [tp for info in infos.values() for tp in info.tp_ids]
        ends = await conn.execute(sa.select(p.c.id, p.c.next_offset).where(p.c.id.in_(tp_ids)))
        positions = {int(tp): int(end) for tp, end in ends}
    return EmbeddedTail(broker, positions, tuple(infos))


class EmbeddedTail:
    """Reads new records of its partitions; fetch from one task at a time."""

    def __init__(
        self, broker: EmbeddedBroker, positions: dict[int, int], topics: Sequence[str]
    ) -> None:
        self.broker = broker
        self._positions = positions  # partition id -> next offset to read
        self._wake = broker.signal.watch(topics)  # set by appends to ``topics`` here
        self._rotation = itertools.count()
        self._closed = False

    async def fetch(self, max_records: int, timeout: float) -> list[Record]:
        """Up to ``max_records`` new records, shared fairly over partitions; [] on timeout."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        broker = self.broker
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._closed:
            self._wake.clear()  # an append from now on sets it again: none is missed
            async with broker.reading() as conn:
                _, batches = await reads.read_owned(
                    conn, None, self._positions, max_records, next(self._rotation)
                )
            if batches:
                return reads.to_records(batches, broker.directory, self._positions)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, broker.poll_interval)):
                    await self._wake.wait()
        return []

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Nothing to commit: a tail belongs to no group."""

    def assignment(self) -> set[TopicPartition]:
        """Every partition this reader follows."""
        return {self.broker.directory.name(tp) for tp in self._positions}

    async def close(self) -> None:
        """Stop reading; a waiting fetch returns [] at once."""
        self._closed = True
        self._wake.set()
        self.broker.signal.unwatch(self._wake)
