"""Guarded state transitions: the one way a stateful row changes its ``status``.

Every change is a conditional update (compare-and-set on ``status`` and ``status_version``)::

    UPDATE t SET status=:to, status_version=status_version+1, ...
     WHERE id=:id AND status IN (:allowed_from) AND status_version=:seen

so a stale event, a replayed message or the loser of a race changes nothing and learns so
from :class:`~aigc_hub.core.errors.StaleTransition`: re-read, then decide again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import errors


async def transition(
    conn: AsyncConnection,
    table: sa.Table,
    row_id: object,
    *,
    to: str,
    allowed_from: Collection[str],
    seen_version: int,
    values: Mapping[str, object] | None = None,
    id_column: str = "id",
    status_column: str = "status",
    version_column: str = "status_version",
) -> int:
    """Move row ``row_id`` to ``to`` if it is in ``allowed_from`` at ``seen_version``.

    Also sets ``values`` in the same statement. Returns the new version (``seen_version + 1``).
    Raises :class:`StaleTransition` when no row matched (wrong state, newer version, no such
    row); nothing is written then. Runs inside the caller's transaction, which commits it.
    """
    if isinstance(allowed_from, str):
        raise TypeError("allowed_from must be a collection of states, not one string")
    if not allowed_from:
        raise ValueError("allowed_from is empty: no transition could ever match")
    extra = dict(values or {})
    if extra.keys() & {id_column, status_column, version_column}:
        raise ValueError(f"values may not set {id_column}, {status_column} or {version_column}")
    version = table.c[version_column]
    stmt = (
        sa.update(table)
        .where(
            table.c[id_column] == row_id,
            table.c[status_column].in_(sorted(allowed_from)),
            version == seen_version,
        )
        .values({status_column: to, version_column: version + 1, **extra})
        # RETURNING says whether a row matched; psycopg's rowcount can be -1.
        .returning(version)
    )
    new_version = (await conn.execute(stmt)).scalar_one_or_none()
    if new_version is None:
        raise errors.StaleTransition(
            f"stale transition: {table.name} {id_column}={row_id!r} -> {to!r} matched no row "
            f"(expected {status_column} in {sorted(allowed_from)!r} at "
            f"{version_column}={seen_version})"
        )
    return int(new_version)
