"""Fenced writes: storage refuses a write whose lease token is older than one it has seen.

A lease alone cannot stop a holder that paused (GC, network, a stalled provider call) past
its ttl and then writes as if it still held the lease. So every write made under a lease
carries the lease's fencing token (:attr:`aigc_hub.cache.base.Lease.token`), and the row
remembers the highest token that wrote it::

    UPDATE t SET ..., fencing_token=:token
     WHERE <where> AND (fencing_token IS NULL OR fencing_token <= :token)

A newer holder has a larger token, so once it wrote, the old holder's late write matches no
row and raises :class:`FencedOut`. Fencing is per row: aim ``where`` at one resource.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import errors


class FencedOut(errors.HubError):
    """A write carried a fencing token older than one already written: its lease was lost.

    Neither retryable with this token (tokens only grow, it can never pass) nor a defect of
    the message (so not a ``PermanentError``: the dead-letter queue is not the place; the
    newer holder owns the outcome). The holder must stop its work. If the runtime sees it,
    a later delivery re-reads the state under a fresh lease and finds the work done.
    """

    def __init__(self, table: str, token: int, newer: int) -> None:
        self.table = table
        self.token = token
        self.newer = newer
        super().__init__(
            f"fenced out: {table} holds fencing token {newer}, this write carries {token}"
        )


async def fenced_update(
    conn: AsyncConnection,
    table: sa.Table,
    where: sa.ColumnElement[bool],
    values: Mapping[str, object],
    *,
    token: int,
    token_column: str = "fencing_token",
) -> int:
    """Update the rows matching ``where`` with ``values`` if no newer token wrote them.

    Stamps ``token`` into ``token_column``; a row whose token equals ``token`` (the same
    tenure writing again) passes. Returns the number of rows written; 0 when ``where``
    matched no row at all. Raises :class:`FencedOut` when nothing was written because a
    matching row holds a newer token; nothing is written then. Runs in the caller's
    transaction, which commits it.
    """
    if token_column in values:
        raise ValueError(f"values may not set {token_column}; pass token= instead")
    fence = table.c[token_column]
    stmt = (
        sa.update(table)
        .where(where, sa.or_(fence.is_(None), fence <= token))
        .values({**values, token_column: token})
        # RETURNING says how many rows matched; psycopg's rowcount can be -1.
        .returning(fence)
    )
    written = len((await conn.execute(stmt)).all())
    if written:
        return written
    newer = (await conn.execute(sa.select(sa.func.max(fence)).where(where, fence > token))).scalar()
    if newer is not None:
        raise FencedOut(table.name, token, int(newer))
    return 0
