"""Async engines for SQLite (aiosqlite) and PostgreSQL (psycopg 3), set up for the backbone.

SQLite: WAL journal, a busy timeout (waited out without blocking the event loop, see
``store/sqlite_inline.py``), and transactions we begin ourselves with
``BEGIN IMMEDIATE`` (the writer lock is taken up front, so two processes never deadlock on a
read-to-write upgrade) which also makes SAVEPOINT work under the pysqlite driver.

SQLite has one writer at a time. Inside a process, writers queue on the engine's pool of ONE
connection (a FIFO wait) instead of racing for the file lock, which SQLite resolves by
sleeping in its busy handler (milliseconds each time). Reads go through :func:`reader`, which
uses a separate small pool of DEFERRED connections that WAL lets run beside the writer. So:
never open a second connection of the same engine while holding a write transaction.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from aigc_hub.store import sqlite_inline

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_READERS = 4

# Reader engines of SQLite engines, disposed together with their writer engine.
_readers: weakref.WeakKeyDictionary[sa.Engine, AsyncEngine] = weakref.WeakKeyDictionary()


def normalize_url(url: str) -> str:
    """Pick the async driver for a database URL: aiosqlite or psycopg."""
    parsed = make_url(url)
    if parsed.drivername in ("sqlite", "sqlite+aiosqlite"):
        return parsed.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if parsed.drivername in (
        "postgresql",
        "postgres",
        "postgresql+psycopg",
        "postgresql+psycopg_async",
    ):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def is_sqlite(url_or_engine: str | AsyncEngine) -> bool:
    """True for a SQLite URL or engine."""
    if isinstance(url_or_engine, str):
        return make_url(url_or_engine).get_backend_name() == "sqlite"
    return url_or_engine.dialect.name == "sqlite"


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url``; creates the SQLite file's folder when needed."""
    url = normalize_url(url)
    if is_sqlite(url):
        return _sqlite_engine(url, **kwargs)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(url, **kwargs)


def _sqlite_engine(url: str, **kwargs: Any) -> AsyncEngine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(os.path.dirname(os.path.abspath(database))).mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    if database and database != ":memory:":
        # statements run inline on the loop's thread: see store/sqlite_inline.py
        kwargs.setdefault(
            "async_creator", sqlite_inline.creator(database, SQLITE_BUSY_TIMEOUT_MS / 1000)
        )
    kwargs.setdefault("pool_size", 1)
    kwargs.setdefault("max_overflow", 0)
    kwargs.setdefault("pool_timeout", 120)
    # Reset on return: a COMMIT that fails (a deferred constraint) leaves SQLite's
    # transaction open, and the next user of the one writer connection would find it begun.
    # Statements run inline (no thread hop), so the reset costs microseconds.
    kwargs.setdefault("pool_reset_on_return", "rollback")
    engine = create_async_engine(url, **kwargs)
    _configure_sqlite(engine)
    reads = create_async_engine(
        url,
        connect_args=kwargs["connect_args"],
        pool_size=SQLITE_READERS,
        max_overflow=0,
        pool_timeout=120,
        pool_reset_on_return=None,
        **({"async_creator": kwargs["async_creator"]} if "async_creator" in kwargs else {}),
    )
    _configure_sqlite(reads)
    _readers[engine.sync_engine] = reads

    @event.listens_for(engine.sync_engine, "engine_disposed")
    def _on_dispose(_engine: sa.Engine) -> None:
        reads.sync_engine.dispose()

    return engine


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, emit BEGIN (needed for SAVEPOINT and IMMEDIATE).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")


@contextlib.asynccontextmanager
async def reader(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads: on SQLite a DEFERRED one beside the writer (never its lock)."""
    async with _readers.get(engine.sync_engine, engine).connect() as conn:
        conn = await conn.execution_options(sqlite_begin="DEFERRED")
        yield conn
