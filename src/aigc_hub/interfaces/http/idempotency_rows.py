"""The ``idempotency_keys`` rows behind :mod:`.idempotency`: claim, store, release, read.

Every statement is built once with its parameters bound at execute time (each keyed request
runs some of them). The functions take a connection, so a caller chooses the transaction:
the claim-first mode runs each in a short transaction of its own, the folded mode runs
:func:`insert_answer` inside the route's own creating transaction.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.store import tables
from aigc_hub.store.dialects import Dialect, dialect_of

IN_FLIGHT = "in_flight"
DONE = "done"


@dataclass(frozen=True)
class KeyRef:
    """One key of one scope (a tenant id, or the admin scope), with the request's fingerprint."""

    scope: str
    key: str
    fingerprint: str


@dataclass(frozen=True)
class Answer:
    """A response as stored under a key: status, the stored headers, the body bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


class KeyTaken(Exception):
    """The key already has a live row: the transaction that tried to take it must roll back."""


_T = tables.idempotency_keys
_THIS_KEY = (_T.c.tenant_id == sa.bindparam("scope"), _T.c.key == sa.bindparam("idem_key"))
_DELETE_EXPIRED = _T.delete().where(*_THIS_KEY, _T.c.expires_at <= sa.bindparam("now"))
_SELECT_KEY = sa.select(_T).where(*_THIS_KEY)
_UNTOUCHED_CLAIM = (
    *_THIS_KEY,
    _T.c.status == IN_FLIGHT,
    _T.c.created_at == sa.bindparam("claimed_at"),
)
_RELEASE = _T.delete().where(*_UNTOUCHED_CLAIM)
_STORE = (
    _T.update()
    .where(*_UNTOUCHED_CLAIM)
    .values(
        status=DONE,
        response_status=sa.bindparam("answer_status"),
        response_headers=sa.bindparam("answer_headers"),
        response_body=sa.bindparam("answer_body"),
    )
)


@functools.cache
def _insert(dialect: Dialect) -> Any:
    """INSERT of a key row that does nothing when the key is taken, for ``dialect``."""
    return (
        dialect.insert(_T)
        .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
        .returning(_T.c.key)
    )


def _where(ref: KeyRef) -> dict[str, Any]:
    return {"scope": ref.scope, "idem_key": ref.key}


async def claim(conn: AsyncConnection, ref: KeyRef, now_ms: int, ttl_ms: int) -> bool:
    """Take the key with an ``in_flight`` row (an expired row is deleted first); True when
    taken, False when another request holds it."""
    await conn.execute(_DELETE_EXPIRED, _where(ref) | {"now": now_ms})
    row = {
        "tenant_id": ref.scope,
        "key": ref.key,
        "fingerprint": ref.fingerprint,
        "status": IN_FLIGHT,
        "created_at": now_ms,
        "expires_at": now_ms + ttl_ms,
    }
    return (await conn.execute(_insert(dialect_of(conn)), row)).first() is not None


async def insert_answer(
    conn: AsyncConnection, ref: KeyRef, answer: Answer, now_ms: int, ttl_ms: int
) -> None:
    """Write the key as ``done`` with ``answer`` in the caller's transaction.

    Raises :class:`KeyTaken` when a live row holds the key (the caller rolls back, then reads
    the row with :func:`read`). An expired row is replaced. On PostgreSQL the INSERT waits on
    the unique index for a concurrent transaction inserting the same key, and conflicts once
    that one commits.
    """
    row = {
        "tenant_id": ref.scope,
        "key": ref.key,
        "fingerprint": ref.fingerprint,
        "status": DONE,
        "response_status": answer.status,
        "response_headers": answer.headers,
        "response_body": answer.body,
        "created_at": now_ms,
        "expires_at": now_ms + ttl_ms,
    }
    insert = _insert(dialect_of(conn))
    if (await conn.execute(insert, row)).first() is not None:
        return
    # Taken: only an expired row (the scanner has not run yet) may be replaced; it is rare,
    # so the common path stays one statement.
    expired = await conn.execute(_DELETE_EXPIRED, _where(ref) | {"now": now_ms})
    if expired.rowcount and (await conn.execute(insert, row)).first() is not None:
        return
    raise KeyTaken(ref.key)


async def read(conn: AsyncConnection, ref: KeyRef) -> Any:
    """The key's row, or None."""
    return (await conn.execute(_SELECT_KEY, _where(ref))).first()


def _claimed(ref: KeyRef, claimed_at: int) -> dict[str, Any]:
    return _where(ref) | {"claimed_at": claimed_at}


async def store(conn: AsyncConnection, ref: KeyRef, claimed_at: int, answer: Answer) -> None:
    """Turn the claim made at ``claimed_at`` into ``done`` with ``answer`` (no-op when gone)."""
    values = {
        "answer_status": answer.status,
        "answer_headers": answer.headers,
        "answer_body": answer.body,
    }
    await conn.execute(_STORE, _claimed(ref, claimed_at) | values)


async def release(conn: AsyncConnection, ref: KeyRef, claimed_at: int) -> None:
    """Delete the claim made at ``claimed_at`` if it is still in flight (the key is free)."""
    await conn.execute(_RELEASE, _claimed(ref, claimed_at))
