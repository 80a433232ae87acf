"""What differs between SQLite and PostgreSQL, in one place (no ``if dialect ==`` elsewhere)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


@dataclass(frozen=True)
class Dialect:
    """Dialect-specific SQL building blocks."""

    name: str
    skip_locked: bool

    def insert(self, table: sa.Table) -> Any:
        """An INSERT that supports ``on_conflict_do_nothing`` on this dialect."""
        if self.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)


def dialect_of(bind: AsyncConnection | AsyncEngine | sa.Connection | sa.Engine) -> Dialect:
    """The :class:`Dialect` of an engine or connection (sync or async)."""
    name = bind.dialect.name
    return Dialect(name=name, skip_locked=name == "postgresql")
