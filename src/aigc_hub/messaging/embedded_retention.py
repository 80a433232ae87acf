"""Retention for the embedded log: delete, per partition, the prefix of records past their age.

Like Kafka's time-based retention (which drops whole old segments), a pass stops at a
partition's first young record and ignores what groups have committed; a group behind the
new log start simply goes on from the oldest record left. Work is split into short
transactions so appends and fetches carry on meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from aigc_hub.messaging import embedded_schema as schema

if TYPE_CHECKING:
    from aigc_hub.messaging.embedded import EmbeddedBroker

#: Records deleted per write transaction, so the write lock is never held for long.
RETENTION_CHUNK = 5_000


async def enforce(broker: EmbeddedBroker, now_ms: int) -> int:
    """Apply every topic's ``retention_ms`` as of ``now_ms``; how many records were deleted."""
    t, p = schema.topics, schema.partitions
    async with broker.reading() as conn:
        rows = await conn.execute(
            sa.select(p.c.id, t.c.retention_ms)
            .join_from(p, t, p.c.topic_id == t.c.id)
            .where(t.c.retention_ms.is_not(None))
        )
        targets = rows.all()
    deleted = 0
    for tp_id, retention_ms in targets:
        deleted += await expire_partition(broker, tp_id, now_ms - retention_ms)
    return deleted


async def expire_partition(broker: EmbeddedBroker, tp_id: int, cutoff_ms: int) -> int:
    """Delete the partition's records before its first one stamped at or after ``cutoff_ms``."""
    r = schema.records
    deleted = 0
    while True:
        head = (
            sa.select(r.c.offset, r.c.timestamp_ms)
            .where(r.c.tp_id == tp_id)
            .order_by(r.c.offset)
            .limit(RETENTION_CHUNK)
            .subquery()
        )
        first_young = sa.func.min(sa.case((head.c.timestamp_ms >= cutoff_ms, head.c.offset)))
        probe = sa.select(
            first_young, sa.func.min(head.c.offset), sa.func.max(head.c.offset), sa.func.count()
        )
        async with broker.reading() as conn:  # most passes find nothing: no write lock
            young, first, last, n = (await conn.execute(probe)).one()
        if n == 0:
            return deleted
        upto = young if young is not None else last + 1
        if upto > first:
            # Only appends (above) and retention (the same prefix) can have run meanwhile.
            async with broker.writing() as conn:
                stmt = r.delete().where(r.c.tp_id == tp_id, r.c.offset < upto)
                deleted += (await conn.execute(stmt)).rowcount
        if young is not None or n < RETENTION_CHUNK:
            return deleted
