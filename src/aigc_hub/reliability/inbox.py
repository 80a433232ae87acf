"""The inbox: ``(consumer, event_id)`` rows that make a consumer's effect happen once.

The mark is written in the same transaction as the handler's fact changes, so either both
exist or neither does; a redelivered event finds its mark and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.store import tables
from aigc_hub.store.dialects import dialect_of

INBOX = tables.inbox


async def mark(
    conn: AsyncConnection,
    consumer: str,
    event_ids: Sequence[str],
    now_ms: int,
    result_code: str | Mapping[str, str] = HandlingOutcome.APPLIED,
) -> set[str]:
    """Insert marks for ``event_ids`` with their ``result_code`` (one for all, or per event id);
    returns the ids that were new (the others are duplicates and keep their stored code)."""
    if not event_ids:
        return set()
    unique = list(dict.fromkeys(event_ids))
    codes = [
        str(result_code if isinstance(result_code, str) else result_code[eid]) for eid in unique
    ]
    if dialect_of(conn).name == "postgresql":
        # One statement with array parameters: the same SQL text for every batch size, so
        # the server plans it once; a VALUES list would be re-parsed per size.
        rows = await conn.execute(
            _PG_MARK, {"consumer": consumer, "ids": unique, "now": now_ms, "codes": codes}
        )
        return {row[0] for row in rows}
    # executemany + RETURNING: compiled once and cached ("insertmanyvalues" batches it).
    stmt = (
        dialect_of(conn)
        .insert(INBOX)
        .on_conflict_do_nothing(index_elements=[INBOX.c.consumer, INBOX.c.event_id])
        .returning(INBOX.c.event_id)
    )
    params = [
        {"consumer": consumer, "event_id": eid, "processed_at": now_ms, "result_code": code}
        for eid, code in zip(unique, codes, strict=True)
    ]
    return {row[0] for row in await conn.execute(stmt, params)}


_PG_MARK = sa.text(
    "INSERT INTO inbox (consumer, event_id, processed_at, result_code) "
    "SELECT :consumer, m.e, :now, m.c "
    "FROM unnest(CAST(:ids AS varchar[]), CAST(:codes AS varchar[])) AS m(e, c) "
    "ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id"
)


async def unmark(conn: AsyncConnection, consumer: str, event_id: str) -> None:
    """Remove a mark written earlier in this transaction (its effect was rolled back)."""
    await conn.execute(
        sa.delete(INBOX).where(INBOX.c.consumer == consumer, INBOX.c.event_id == event_id)
    )


async def seen(conn: AsyncConnection, consumer: str, event_ids: Iterable[str]) -> set[str]:
    """Which of ``event_ids`` this consumer has already applied."""
    wanted = list(event_ids)
    if not wanted:
        return set()
    if dialect_of(conn).name == "postgresql":
        # Asked once per fetched batch: one array parameter keeps the SQL text (and the
        # server's plan) the same for every batch size, as in mark().
        rows = await conn.execute(_PG_SEEN, {"consumer": consumer, "ids": wanted})
        return {row[0] for row in rows}
    rows = await conn.execute(
        sa.select(INBOX.c.event_id).where(
            INBOX.c.consumer == consumer, INBOX.c.event_id.in_(wanted)
        )
    )
    return {row[0] for row in rows}


_PG_SEEN = sa.text(
    "SELECT event_id FROM inbox "
    "WHERE consumer = :consumer AND event_id = ANY(CAST(:ids AS varchar[]))"
)
