"""Count what the hub writes to its database: transactions, the statements in them, and the
events staged in the outbox (an SQLAlchemy event listener on the real engine)."""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

_WRITE = re.compile(r"^\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I)


@dataclass
class WriteCounts:
    """What the engine committed while counting."""

    #: Transactions that wrote at least one row, each as the tables its statements wrote.
    transactions: list[tuple[str, ...]] = field(default_factory=list)
    #: Outbox rows inserted, by event type.
    events: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Write statements, by table.
    statements: collections.Counter[str] = field(default_factory=collections.Counter)

    def write_transactions(self, excluding: frozenset[str] = frozenset()) -> int:
        """Committed transactions that wrote a table other than ``excluding``."""
        return sum(1 for tables in self.transactions if set(tables) - excluding)


@contextlib.contextmanager
def counting_writes(engine: AsyncEngine) -> Iterator[WriteCounts]:
    """Count the write transactions, write statements and outbox events ``engine`` commits."""
    counts = WriteCounts()
    open_writes: dict[int, list[str]] = {}
    sync = engine.sync_engine

    def on_execute(
        conn: sa.Connection, _cursor: Any, statement: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        found = _WRITE.match(statement)
        if found is None:
            return
        table = found.group(2).lower()
        open_writes.setdefault(id(conn), []).append(table)
        counts.statements[table] += 1

    def on_statement(
        _conn: sa.Connection, clause: Any, multiparams: Any, params: Any, _options: Any
    ) -> None:
        if isinstance(clause, sa.Insert) and clause.table.name == "outbox":
            rows = list(multiparams) if multiparams else [params]
            for row in rows:
                counts.events[str(row.get("event_type"))] += 1

    def on_commit(conn: sa.Connection) -> None:
        tables = open_writes.pop(id(conn), None)
        if tables:
            counts.transactions.append(tuple(tables))

    def on_rollback(conn: sa.Connection) -> None:
        open_writes.pop(id(conn), None)

    sa.event.listen(sync, "before_cursor_execute", on_execute)
    sa.event.listen(sync, "before_execute", on_statement)
    sa.event.listen(sync, "commit", on_commit)
    sa.event.listen(sync, "rollback", on_rollback)
    try:
        yield counts
    finally:
        sa.event.remove(sync, "before_cursor_execute", on_execute)
        sa.event.remove(sync, "before_execute", on_statement)
        sa.event.remove(sync, "commit", on_commit)
        sa.event.remove(sync, "rollback", on_rollback)
