"""SQLite for the async engine without a thread hop per call.

SQLAlchemy's aiosqlite dialect runs every cursor operation on aiosqlite's worker thread: a
statement costs three to four thread round trips (cursor, execute, fetch, close), each
0.1-0.3 ms on a small machine, so a two-insert transaction takes milliseconds. A local SQLite
statement itself takes microseconds. This module gives the aiosqlite dialect (through
``create_async_engine(..., async_creator=...)``) a connection object with aiosqlite's async
interface whose methods run the ``sqlite3`` calls inline, on the event loop's thread.

Why that is safe here: every SQLite engine of the hub writes through a pool of ONE
connection per file (``store.engine``), so two writers of one process never wait on each
other's file lock; WAL readers never wait on a writer. Only another *process* holding the
write lock can make a statement wait (SQLite's busy handler), and that wait is bounded by
``busy_timeout``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any


class InlineCursor:
    """aiosqlite's cursor interface over a ``sqlite3.Cursor``, run inline."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._cursor.close()

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        """Run one statement."""
        if parameters is None:
            self._cursor.execute(sql)
        else:
            self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> InlineCursor:
        """Run one statement per parameter set."""
        self._cursor.executemany(sql, seq)
        return self

    async def fetchone(self) -> Any:
        """The next row or None."""
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        """Up to ``size`` rows."""
        return self._cursor.fetchmany(size if size is not None else self._cursor.arraysize)

    async def fetchall(self) -> list[Any]:
        """Every remaining row."""
        return self._cursor.fetchall()

    async def close(self) -> None:
        """Close the cursor."""
        self._cursor.close()

    async def nextset(self) -> None:
        """SQLite has one result set per statement."""
        return None

    async def setinputsizes(self, *sizes: Any) -> None:
        """Not used by SQLite."""
        return None

    @property
    def description(self) -> Any:
        """Column descriptions of the last statement."""
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        """Rows changed by the last statement."""
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        """Rowid of the last inserted row."""
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        """Default fetchmany size."""
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value


class _ImmediateQueue:
    """Stands in for aiosqlite's request queue: runs the function at once."""

    def __init__(self) -> None:
        self.closed = False

    def put_nowait(self, item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as exc:  # handed to the awaiting caller
            future.set_exception(exc)


class InlineConnection:
    """aiosqlite's connection interface over a ``sqlite3.Connection``, run inline."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._connection: sqlite3.Connection | None = conn
        self._tx = _ImmediateQueue()

    def cursor(self) -> InlineCursor:
        """A new cursor (usable with ``async with`` like aiosqlite's)."""
        return InlineCursor(self._conn.cursor())

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        """Run one statement on a new cursor."""
        return await self.cursor().execute(sql, parameters)

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> InlineCursor:
        """Run one statement per parameter set on a new cursor."""
        return await self.cursor().executemany(sql, seq)

    async def commit(self) -> None:
        """Commit the open transaction."""
        self._conn.commit()

    async def rollback(self) -> None:
        """Roll back the open transaction."""
        self._conn.rollback()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._connection is not None:
            self._connection = None
            self._conn.close()

    def stop(self) -> None:
        """Terminate: close at once."""
        if self._connection is not None:
            self._connection = None
            self._conn.close()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        """Register a SQL function."""
        self._conn.create_function(*args, **kwargs)

    @property
    def isolation_level(self) -> str | None:
        """The driver's transaction mode (we set None and begin transactions ourselves)."""
        return self._conn.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._conn.isolation_level = value  # type: ignore[assignment]

    @property
    def in_transaction(self) -> bool:
        """True inside BEGIN ... COMMIT."""
        return self._conn.in_transaction


def creator(database: str, timeout_s: float) -> Callable[[], Any]:
    """An ``async_creator`` for ``create_async_engine`` opening ``database`` inline."""

    async def connect() -> InlineConnection:
        conn = sqlite3.connect(
            database, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        return InlineConnection(conn)

    return connect
