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
write lock can make a statement wait, and that wait must not block the loop: SQLite's own
busy handler sleeps on the calling thread, so the connection has none (busy timeout 0) and a
statement that meets the lock pauses with ``asyncio.sleep`` and runs again (see
:meth:`InlineConnection.run`) until the overall busy timeout is spent, then raises SQLite's
own "database is locked" error.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")

# Pauses between attempts on a locked file, doubling: short at first (most transactions of
# the other process last milliseconds), and at most a fifth of the longest sleep of SQLite's
# own busy handler (100 ms), so a freed lock is taken soon; a pause costs the loop nothing.
FIRST_PAUSE_S = 0.001
LONGEST_PAUSE_S = 0.02


class InlineCursor:
    """aiosqlite's cursor interface over a ``sqlite3.Cursor``, run inline."""

    def __init__(self, cursor: sqlite3.Cursor, connection: InlineConnection) -> None:
        self._cursor = cursor
        self._connection = connection

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._cursor.close()

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        """Run one statement (waiting out another process's write lock, see ``run``)."""
        cursor = self._cursor
        if parameters is None:
            await self._connection.run(sql, lambda: cursor.execute(sql))
        else:
            await self._connection.run(sql, lambda: cursor.execute(sql, parameters))
        return self

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> InlineCursor:
        """Run one statement per parameter set (waiting out another process's write lock)."""
        cursor = self._cursor
        rows = seq if isinstance(seq, list | tuple) else list(seq)  # an attempt may repeat
        await self._connection.run(sql, lambda: cursor.executemany(sql, rows))
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

    def __init__(self, conn: sqlite3.Connection, busy_timeout_s: float) -> None:
        self._conn = conn
        self._connection: sqlite3.Connection | None = conn
        self._tx = _ImmediateQueue()
        self._busy_timeout_s = busy_timeout_s
        # True while this connection holds no lock of the file (see ``run``).
        self._holds_no_lock = True

    def cursor(self) -> InlineCursor:
        """A new cursor (usable with ``async with`` like aiosqlite's)."""
        return InlineCursor(self._conn.cursor(), self)

    async def run(self, sql: str, call: Callable[[], _T]) -> _T:
        """``call()``, one sqlite3 call running ``sql``; a locked file is waited for asynchronously.

        When the file is locked by another process, SQLite answers SQLITE_BUSY at once (the
        connection's busy timeout is 0) and this pauses, without blocking the loop, and calls
        again, until the overall busy timeout is spent: then SQLite's error is raised, as its
        own busy handler would have done. It waits exactly where SQLite's busy handler would
        have: SQLite calls it only while the connection holds no lock of the file (outside a
        transaction, after a DEFERRED ``BEGIN``, on ``COMMIT``), where the failed statement
        did nothing and may simply run again. A BUSY answer while the connection holds a lock
        (a DEFERRED transaction that read, then writes) is raised at once, as SQLite does:
        waiting could not help, only the whole transaction can be retried. Outside a
        transaction each row of ``executemany`` commits alone, so it runs again only if no
        row changed anything yet.
        """
        conn = self._conn
        was_in_transaction = conn.in_transaction
        changes = conn.total_changes
        deadline: float | None = None
        pause = FIRST_PAUSE_S
        while True:
            try:
                result = call()
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    self._holds_no_lock = not conn.in_transaction  # it may have taken a lock
                    raise
                may_wait = self._holds_no_lock or not was_in_transaction or sql == "COMMIT"
                if not may_wait or conn.total_changes != changes:
                    raise
                now = asyncio.get_running_loop().time()
                deadline = now + self._busy_timeout_s if deadline is None else deadline
                if now >= deadline:
                    raise
                await asyncio.sleep(min(pause, deadline - now))
                pause = min(pause * 2, LONGEST_PAUSE_S)
                continue
            self._holds_no_lock = not conn.in_transaction or (
                self._holds_no_lock and _takes_no_lock(sql)
            )
            return result

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        """Run one statement on a new cursor."""
        return await self.cursor().execute(sql, parameters)

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> InlineCursor:
        """Run one statement per parameter set on a new cursor."""
        return await self.cursor().executemany(sql, seq)

    async def commit(self) -> None:
        """Commit the open transaction (waiting out another process's lock, see ``run``)."""
        await self.run("COMMIT", self._conn.commit)

    async def rollback(self) -> None:
        """Roll back the open transaction."""
        self._conn.rollback()
        self._holds_no_lock = True

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


def _is_busy(error: sqlite3.OperationalError) -> bool:
    """True when SQLite answered SQLITE_BUSY (another connection holds the lock)."""
    return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def _takes_no_lock(sql: str) -> bool:
    """True for statements after which a fresh transaction still holds no lock of the file.

    A DEFERRED ``BEGIN`` and ``SAVEPOINT`` take none; after ``BEGIN IMMEDIATE`` the
    connection holds the write lock and WAL lets nothing answer BUSY until it ends, so
    counting it here changes nothing.
    """
    return sql[:9].upper().startswith(("BEGIN", "SAVEPOINT"))


def creator(database: str, busy_timeout_s: float) -> Callable[[], Any]:
    """An ``async_creator`` opening ``database`` inline; a lock waits up to ``busy_timeout_s``."""

    async def connect() -> InlineConnection:
        # timeout=0: no busy handler sleeping on the loop's thread (see InlineConnection.run)
        conn = sqlite3.connect(database, timeout=0, isolation_level=None, check_same_thread=False)
        return InlineConnection(conn, busy_timeout_s)

    return connect
