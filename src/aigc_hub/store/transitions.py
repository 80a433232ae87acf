"""Guarded state transitions: the one way a stateful row changes its ``status``.

Every change is a conditional update (compare-and-set on ``status`` and ``status_version``)::

    UPDATE t SET status=:to, status_version=status_version+1, ...
     WHERE id=:id AND status IN (:allowed_from) AND status_version=:seen

so a stale event, a replayed message or the loser of a race changes nothing and learns so
from :class:`~aigc_hub.core.errors.StaleTransition`: re-read, then decide again.

:func:`move` is the one way a pipeline moves a stateful row: it checks the row's
:class:`~aigc_hub.core.states.StateMachine`, makes the guarded update, writes the row's
history and returns the events announcing the move, all in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from aigc_hub.core import errors
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.states import S, StateMachine


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


@dataclass(frozen=True)
class History:
    """The table that records every move of a stateful row, one row per move.

    :func:`move` fills the from/to/version columns; the caller gives the rest (row id,
    cause, time). ``version_column`` is None when the history keeps no version.
    """

    table: sa.Table
    from_column: str = "from_status"
    to_column: str = "to_status"
    version_column: str | None = "status_version"


@dataclass(frozen=True)
class Stateful(Generic[S]):
    """A table whose rows move through ``machine``.

    ``history`` has no default on purpose: a table without one says ``history=None``.
    ``version_column`` None means the table has no ``status_version``: the guard is then the
    status alone (the row must still be in the state the caller read).
    """

    table: sa.Table
    machine: StateMachine[S]
    history: History | None
    id_column: str = "id"
    status_column: str = "status"
    version_column: str | None = "status_version"


@dataclass(frozen=True)
class Moved(Generic[S]):
    """What :func:`move` did: the move, the row's new version (None if unversioned), and the
    events the caller publishes with it (outbox or a handler's returned events)."""

    source: S
    target: S
    version: int | None
    events: tuple[Envelope, ...]


async def move(
    conn: AsyncConnection,
    kind: Stateful[S],
    row_id: object,
    *,
    current: S,
    to: S,
    seen_version: int | None,
    values: Mapping[str, object] | None = None,
    record: Mapping[str, object] | None = None,
    announce: Callable[[int | None], Sequence[Envelope]] | None = None,
) -> Moved[S]:
    """Move row ``row_id`` from ``current`` (as read) to ``to`` in the caller's transaction.

    Raises :class:`~aigc_hub.core.states.TransitionNotAllowed` when the machine forbids the
    move and :class:`StaleTransition` when the row is no longer as read; nothing is written
    then. ``record`` holds the caller's history columns; ``announce(version)`` builds the
    events (e.g. a notification) returned in :class:`Moved`.
    """
    if kind.history is None and record:
        raise ValueError(f"{kind.table.name} keeps no history: record must be empty")
    kind.machine.check(current, to)
    if kind.version_column is None:
        if seen_version is not None:
            raise ValueError(f"{kind.table.name} has no version column: seen_version must be None")
        version: int | None = None
        await _guard_status_only(conn, kind, row_id, current=current, to=to, values=values)
    else:
        if seen_version is None:
            raise ValueError(f"{kind.table.name} is versioned: seen_version is required")
        version = await transition(
            conn,
            kind.table,
            row_id,
            to=to.value,
            allowed_from=[current.value],
            seen_version=seen_version,
            values=values,
            id_column=kind.id_column,
            status_column=kind.status_column,
            version_column=kind.version_column,
        )
    if kind.history is not None:
        await conn.execute(
            kind.history.table.insert().values(
                _history_row(kind.history, current, to, version, record)
            )
        )
    events = tuple(announce(version)) if announce is not None else ()
    return Moved(current, to, version, events)


async def move_from_any(
    conn: AsyncConnection,
    kind: Stateful[S],
    row_id: object,
    *,
    to: S,
    values: Mapping[str, object] | None = None,
) -> bool:
    """Move row ``row_id`` to ``to`` from whatever allowed state it is in, in one guarded
    update (no read first: the common case is one statement). False when nothing moved
    because the row is missing or already in ``to`` (a repeated observation).

    For rows without version or history only (a history row must name the state left, which
    the caller then reads first and passes to :func:`move`). Raises
    :class:`~aigc_hub.core.states.TransitionNotAllowed` when the row's state may not go to
    ``to``.
    """
    if kind.history is not None or kind.version_column is not None:
        raise ValueError(f"{kind.table.name} keeps a version or history: use move()")
    table = kind.table
    extra = _extra_values(kind, values)
    sources = sorted(state.value for state in kind.machine.sources_of(to))
    status = table.c[kind.status_column]
    moved = (
        await conn.execute(
            sa.update(table)
            .where(table.c[kind.id_column] == row_id, status.in_(sources))
            .values({kind.status_column: to.value, **extra})
            .returning(table.c[kind.id_column])
        )
    ).scalar_one_or_none()
    if moved is not None:
        return True
    # Nothing matched: read why (only on this rare path).
    found = (
        await conn.execute(sa.select(status).where(table.c[kind.id_column] == row_id))
    ).scalar_one_or_none()
    if found is not None and found != to.value:
        kind.machine.check(type(to)(found), to)  # raises: that state may not move to ``to``
    return False


def _extra_values(kind: Stateful[S], values: Mapping[str, object] | None) -> dict[str, object]:
    """The other columns a move sets; never the row's id or status (the move owns those)."""
    extra = dict(values or {})
    if extra.keys() & {kind.id_column, kind.status_column}:
        raise ValueError(f"values may not set {kind.id_column} or {kind.status_column}")
    return extra


def _history_row(
    history: History, current: S, to: S, version: int | None, record: Mapping[str, object] | None
) -> dict[str, object]:
    row = {**(record or {}), history.from_column: current.value, history.to_column: to.value}
    if history.version_column is not None:
        row[history.version_column] = version
    return row


async def _guard_status_only(
    conn: AsyncConnection,
    kind: Stateful[S],
    row_id: object,
    *,
    current: S,
    to: S,
    values: Mapping[str, object] | None,
) -> None:
    """The guarded update of a table without a version: matches only while ``status`` is
    still ``current``."""
    table = kind.table
    extra = _extra_values(kind, values)
    matched = (
        await conn.execute(
            sa.update(table)
            .where(table.c[kind.id_column] == row_id, table.c[kind.status_column] == current.value)
            .values({kind.status_column: to.value, **extra})
            .returning(table.c[kind.id_column])
        )
    ).scalar_one_or_none()
    if matched is None:
        raise errors.StaleTransition(
            f"stale transition: {table.name} {kind.id_column}={row_id!r} -> {to.value!r} "
            f"matched no row (expected {kind.status_column}={current.value!r})"
        )
