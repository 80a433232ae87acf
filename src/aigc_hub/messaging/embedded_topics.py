"""The embedded log's topic directory: topic names to partition ids, cached per broker.

A topic's partition count never changes once created, so ids are cached forever; a topic
created in a transaction that rolls back is forgotten again.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.messaging import embedded_schema as schema
from aigc_hub.messaging.base import TopicPartition


@dataclass(frozen=True)
class TopicInfo:
    """A topic's id and its partitions' ids, index = partition number."""

    id: int
    tp_ids: tuple[int, ...]


class TopicDirectory:
    """Looks topics up (and creates them) inside the caller's transaction; not thread-safe."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicInfo] = {}
        self._names: dict[int, TopicPartition] = {}
        self._uncommitted: list[str] = []

    def begin(self) -> None:
        """A write transaction starts: track the topics it creates."""
        self._uncommitted = []

    def rollback(self) -> None:
        """The write transaction failed: forget the topics it created."""
        for name in self._uncommitted:
            for tp_id in self._topics.pop(name).tp_ids:
                self._names.pop(tp_id, None)
        self._uncommitted = []

    def tp_id(self, tp: TopicPartition) -> int | None:
        """The partition id of a loaded topic-partition, else None."""
        info = self._topics.get(tp.topic)
        if info is None or not 0 <= tp.partition < len(info.tp_ids):
            return None
        return info.tp_ids[tp.partition]

    def name(self, tp_id: int) -> TopicPartition:
        """The topic-partition of a loaded partition id."""
        return self._names[tp_id]

    async def load(
        self, conn: AsyncConnection, names: set[str], *, create: bool = False
    ) -> dict[str, TopicInfo]:
        """The named topics that exist, read once; ``create`` adds missing ones with 1 partition."""
        missing = names - self._topics.keys()
        if missing:
            t, p = schema.topics, schema.partitions
            rows = await conn.execute(
                sa.select(t.c.name, t.c.id, p.c.id)
                .join_from(t, p, p.c.topic_id == t.c.id)
                .where(t.c.name.in_(missing))
                .order_by(t.c.name, p.c.partition)
            )
            found: dict[str, tuple[int, list[int]]] = {}
            for name, topic_id, tp_id in rows:
                found.setdefault(name, (topic_id, []))[1].append(tp_id)
            for name, (topic_id, tp_ids) in found.items():
                self._remember(name, TopicInfo(topic_id, tuple(tp_ids)))
            for name in missing - found.keys() if create else ():
                await self.create(conn, name, 1, None)
        return {n: self._topics[n] for n in names if n in self._topics}

    async def create(
        self, conn: AsyncConnection, name: str, partitions: int, retention_ms: int | None
    ) -> None:
        """Insert a topic and its partitions (the caller checked it does not exist)."""
        if partitions < 1:
            raise ValueError(f"topic {name!r} needs at least one partition")
        t, p = schema.topics, schema.partitions
        topic_id = (
            await conn.execute(
                t.insert()
                .values(name=name, partitions=partitions, retention_ms=retention_ms)
                .returning(t.c.id)
            )
        ).scalar_one()
        rows = [{"topic_id": topic_id, "partition": i, "next_offset": 0} for i in range(partitions)]
        result = await conn.execute(
            p.insert().returning(p.c.id, sort_by_parameter_order=True), rows
        )
        self._remember(name, TopicInfo(topic_id, tuple(result.scalars())))
        self._uncommitted.append(name)

    def _remember(self, name: str, info: TopicInfo) -> None:
        self._topics[name] = info
        for partition, tp_id in enumerate(info.tp_ids):
            self._names[tp_id] = TopicPartition(name, partition)
