"""Schema migrations: one Alembic chain for the backbone and every pipeline, run from code.

The chain lives in the package (``aigc_hub/store/migrations``), so an installed wheel can
migrate a database without an ``alembic.ini`` on disk. Alembic runs on sync drivers
(pysqlite, psycopg); the application itself uses the async engines of ``store.engine``.

Pipelines declare their tables on ``store.tables.metadata`` and add revisions to the same
``migrations/versions`` folder, each revising the current head, so the chain stays linear::

    alembic.command.revision(alembic_config(), message="generation tasks", rev_id="0002")
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import make_url

from aigc_hub.core import errors
from aigc_hub.store import engine as store_engine
from aigc_hub.store import tables

#: The Alembic script folder shipped inside the package.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def target_metadata() -> sa.MetaData:
    """``tables.metadata`` with every pipeline's tables on it (imports ``pipelines.*.models``).

    What autogenerate and the schema test compare against; the backbone names no pipeline.
    """
    try:
        pipelines = importlib.import_module("aigc_hub.pipelines")
    except ModuleNotFoundError as exc:
        if exc.name != "aigc_hub.pipelines":
            raise
        return tables.metadata
    for info in pkgutil.iter_modules(pipelines.__path__, prefix="aigc_hub.pipelines."):
        if info.ispkg and importlib.util.find_spec(f"{info.name}.models") is not None:
            importlib.import_module(f"{info.name}.models")
    return tables.metadata


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic config for the packaged chain, bound to ``connection`` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def sync_url(url: str) -> sa.URL:
    """The sync-driver form of a database URL: pysqlite or psycopg (raises on others)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return parsed.set(drivername="sqlite")
    if parsed.get_backend_name() in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    raise errors.ConfigurationError(
        f"unsupported database {parsed.drivername!r}: use sqlite:/// or postgresql://"
    )


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to ``revision``; each migration commits on its own, reruns are no-ops."""
    with _connect(url, create=True) as conn:
        command.upgrade(alembic_config(conn), revision)


def current_revision(url: str) -> str | None:
    """The revision the database is at; ``None`` when it was never migrated (or is missing)."""
    if _sqlite_file_missing(url):
        return None
    with _connect(url, create=False) as conn:
        # A read: on SQLite, do not take the writer lock.
        reader = conn.execution_options(sqlite_begin="DEFERRED")
        return MigrationContext.configure(reader).get_current_revision()


def head_revision() -> str:
    """The newest revision of the packaged chain (raises if the chain has several heads)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise errors.ConfigurationError("the migration chain is empty")
    return head


def is_current(url: str) -> bool:
    """True when the database is migrated up to the head revision."""
    return current_revision(url) == head_revision()


def _sqlite_file_missing(url: str) -> bool:
    parsed = sync_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database
    return bool(database) and database != ":memory:" and not os.path.exists(str(database))


@contextmanager
def _connect(url: str, *, create: bool) -> Iterator[sa.Connection]:
    engine = _sync_engine(url, create=create)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _sync_engine(url: str, *, create: bool) -> sa.Engine:
    parsed = sync_url(url)
    if parsed.get_backend_name() != "sqlite":
        try:
            return sa.create_engine(parsed, poolclass=sa.pool.NullPool)
        except ImportError as exc:
            raise errors.ConfigurationError(
                f"PostgreSQL needs psycopg: pip install 'aigc-hub[postgres]' ({exc})"
            ) from exc
    database = parsed.database
    if create and database and database != ":memory:":
        Path(os.path.dirname(os.path.abspath(database))).mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        parsed,
        poolclass=sa.pool.NullPool,
        connect_args={"timeout": store_engine.SQLITE_BUSY_TIMEOUT_MS / 1000},
    )

    # As in store.engine: SQLAlchemy emits BEGIN IMMEDIATE itself, so DDL is transactional
    # and two processes migrating the same file serialize instead of failing half-way.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine
