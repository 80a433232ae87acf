"""Delayed redelivery that parks only the failing key (durable table on embedded defaults).

When a record exhausts its in-process retries, it is parked here as the *head* of its
(consumer, key) with a due time; later records of the same key are parked *behind* it
(no due time) so the key's order holds while every other key keeps flowing. When the head
finally succeeds or is dead-lettered, the next parked record of the key becomes the head,
due at once. Rows survive restarts: a process that starts loads the parked keys it must hold.

A head is settled (rescheduled or finished) only as the version that was tried: its
``attempts`` grows with every try, so a copy read before another run settled it (a scan that
raced that run's commit, a member that lost the partition) changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.store import tables
from aigc_hub.store.engine import reader

R = tables.redeliveries
WAITING = "waiting"  # the head of its key, due at ``due_at``
BLOCKED = "blocked"  # behind the head, never tried yet


@dataclass(frozen=True)
class Parked:
    """A parked record."""

    seq: int
    consumer: str
    key: str
    event_id: str | None
    topic: str
    partition: int
    offset: int
    value: bytes
    headers: Mapping[str, str]
    attempts: int
    redeliveries: int
    due_at: int | None
    state: str
    error_class: str | None
    error_message: str | None
    first_failure_at: int | None
    last_failure_at: int | None
    history: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class ParkRequest:
    """A record to park, head (with ``due_at``) or behind (``due_at`` None)."""

    consumer: str
    key: str
    event_id: str | None
    topic: str
    partition: int
    offset: int
    value: bytes
    headers: Mapping[str, str]
    attempts: int = 0
    due_at: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    first_failure_at: int | None = None
    last_failure_at: int | None = None
    history: Sequence[Mapping[str, Any]] = ()


class RedeliveryStore:
    """The parked records of every consumer group."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def park(self, conn: AsyncConnection, req: ParkRequest) -> int:
        """Park a record in ``conn``'s transaction; returns its sequence number."""
        row = (
            await conn.execute(
                R.insert()
                .values(
                    consumer=req.consumer,
                    key=req.key,
                    event_id=req.event_id,
                    topic=req.topic,
                    partition=req.partition,
                    offset=req.offset,
                    value=req.value,
                    headers=dict(req.headers),
                    attempts=req.attempts,
                    redeliveries=0,
                    due_at=req.due_at,
                    state=WAITING if req.due_at is not None else BLOCKED,
                    error_class=req.error_class,
                    error_message=req.error_message,
                    first_failure_at=req.first_failure_at,
                    last_failure_at=req.last_failure_at,
                    history=[dict(x) for x in req.history],
                )
                .returning(R.c.seq)
            )
        ).one()
        return int(row[0])

    async def reschedule(
        self,
        conn: AsyncConnection,
        head: Parked,
        *,
        due_at: int,
        attempts: int,
        redeliveries: int,
        error_class: str,
        error_message: str,
        first_failure_at: int,
        last_failure_at: int,
        history: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Set a head's next due time after another failed try; False if ``head`` is stale."""
        result = await conn.execute(
            sa.update(R)
            .where(R.c.seq == head.seq, R.c.attempts == head.attempts)
            .values(
                due_at=due_at,
                state=WAITING,
                attempts=attempts,
                redeliveries=redeliveries,
                error_class=error_class,
                error_message=error_message[:2000],
                first_failure_at=first_failure_at,
                last_failure_at=last_failure_at,
                history=[dict(x) for x in history],
            )
        )
        return result.rowcount == 1

    async def finish_head(self, conn: AsyncConnection, head: Parked, now_ms: int) -> bool | None:
        """Remove a finished head and make the key's next record due now.

        True if a record of the key remains, False if none does, None if ``head`` is stale
        (another run settled it first): then nothing is changed.
        """
        removed = await conn.execute(
            sa.delete(R).where(R.c.seq == head.seq, R.c.attempts == head.attempts)
        )
        if removed.rowcount != 1:
            return None
        nxt = (
            await conn.execute(
                sa.select(R.c.seq)
                .where(R.c.consumer == head.consumer, R.c.key == head.key)
                .order_by(R.c.seq)
                .limit(1)
            )
        ).first()
        if nxt is None:
            return False
        await conn.execute(
            sa.update(R).where(R.c.seq == nxt[0]).values(state=WAITING, due_at=now_ms)
        )
        return True

    async def parked_keys(self, consumer: str) -> set[str]:
        """Keys of ``consumer`` that have parked records."""
        async with reader(self.engine) as conn:
            rows = await conn.execute(sa.select(R.c.key).where(R.c.consumer == consumer).distinct())
            return {r[0] for r in rows}

    async def due(self, consumer: str, now_ms: int, *, limit: int = 100) -> list[Parked]:
        """Heads of ``consumer`` whose due time has come, oldest due first."""
        async with reader(self.engine) as conn:
            rows = (
                await conn.execute(
                    sa.select(R)
                    .where(R.c.consumer == consumer, R.c.state == WAITING, R.c.due_at <= now_ms)
                    .order_by(R.c.due_at, R.c.seq)
                    .limit(limit)
                )
            ).all()
        return [_parked(r) for r in rows]

    async def next_due_at(self, consumer: str) -> int | None:
        """The earliest due time among ``consumer``'s heads, or None."""
        async with reader(self.engine) as conn:
            value = (
                await conn.execute(
                    sa.select(sa.func.min(R.c.due_at)).where(
                        R.c.consumer == consumer, R.c.state == WAITING
                    )
                )
            ).scalar()
        return None if value is None else int(value)

    async def list(self, consumer: str | None = None) -> list[Parked]:
        """Every parked record (of one consumer), in sequence order."""
        stmt = sa.select(R).order_by(R.c.seq)
        if consumer:
            stmt = stmt.where(R.c.consumer == consumer)
        async with reader(self.engine) as conn:
            return [_parked(r) for r in (await conn.execute(stmt)).all()]


def _parked(r: sa.Row[Any]) -> Parked:
    # Columns and fields share names; only the JSON/BLOB columns need normalising.
    fields = dict(r._mapping)
    fields.update(value=bytes(r.value), headers=r.headers or {}, history=r.history or [])
    return Parked(**fields)
