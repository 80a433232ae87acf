"""SQL the registry's stores share: a subject's version rows, a schema's id by identity, the
write transaction (writers of one subject take turns; one that lost a race on a key runs
again), and the audit record of a write."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.core import errors as core_errors
from aigc_hub.core.clock import Clock
from aigc_hub.reliability import audit
from aigc_hub.schemas.avro_registry import tables as t
from aigc_hub.schemas.avro_registry.records import SubjectVersion
from aigc_hub.store import dialects

R = TypeVar("R")
S, V = t.schema_registry_schemas, t.schema_registry_versions

#: Attempts of a write that lost a race on a key before it gives up (RetryableError).
WRITE_ATTEMPTS = 5

_ROWS = (
    sa.select(V.c.subject, V.c.version, V.c.schema_id, S.c.schema_type, S.c.schema, V.c.deleted_at)
    .join(S, S.c.id == V.c.schema_id)
    .order_by(V.c.version)
)


async def subject_rows(conn: AsyncConnection, subject: str) -> list[SubjectVersion]:
    """Every version row of ``subject``, soft-deleted ones included, oldest first."""
    result = await conn.execute(_ROWS.where(V.c.subject == subject))
    return [
        SubjectVersion(
            subject=row.subject,
            version=row.version,
            schema_id=row.schema_id,
            schema_type=row.schema_type,
            schema=row.schema,
            deleted=row.deleted_at is not None,
        )
        for row in result
    ]


async def schema_id_of(conn: AsyncConnection, fingerprint: str) -> int | None:
    """The id of the schema with this identity, None when it was never registered."""
    found = await conn.scalar(sa.select(S.c.id).where(S.c.fingerprint == fingerprint))
    return None if found is None else int(found)


async def write(
    engine: AsyncEngine, subject: str, work: Callable[[AsyncConnection], Awaitable[R]]
) -> R:
    """``work`` in one write transaction, after the other writers of ``subject``; run again
    (from its reads) when a writer of another subject took a key first (the same new
    schema, registered under two subjects at once); :class:`RetryableError` after
    :data:`WRITE_ATTEMPTS`."""
    for _ in range(WRITE_ATTEMPTS):
        try:
            async with engine.begin() as conn:
                await _take_turn(conn, subject)
                return await work(conn)
        except IntegrityError:
            continue  # the fingerprint was taken meanwhile: read again, decide again
    raise core_errors.RetryableError("schema registry writes kept colliding; try again")


async def _take_turn(conn: AsyncConnection, subject: str) -> None:
    """Wait for the subject's other writers to commit. A registration reads the subject's
    versions, then adds the next one: two side by side would both aim at the same number,
    and a loser retrying at once can lose again to each newcomer. SQLite has one writer at
    a time already (``BEGIN IMMEDIATE``); PostgreSQL takes a transaction-scoped advisory
    lock on the subject's hash, released at commit or rollback."""
    if dialects.dialect_of(conn).name != "postgresql":
        return
    key = int.from_bytes(hashlib.sha256(subject.encode()).digest()[:8], "big", signed=True)
    await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


async def record(
    conn: AsyncConnection, clock: Clock, actor: str, action: str, subject: str, **detail: object
) -> None:
    """The audit log's line for a registry write, in the write's own transaction."""
    await audit.record(
        conn,
        at=clock.now_ms(),
        actor=actor,
        action=action,
        target=f"subject:{subject}",
        result="ok",
        detail=detail,
    )
