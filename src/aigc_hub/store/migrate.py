"""Schema migrations: one Alembic chain for the backbone and every pipeline, run from code.

The chain lives in the package (``aigc_hub/store/migrations``), so an installed wheel can
migrate a database without an ``alembic.ini`` on disk. Alembic runs on sync drivers
(pysqlite, psycopg); the application itself uses the async engines of ``store.engine``.

Pipelines declare their tables on ``store.tables.metadata`` in the module ``Pipeline.models``
names; :func:`target_metadata` imports those of every installed pipeline. Who owns which
revisions:

* the hub's own (backbone and built-in pipelines) are the linear chain in
  ``migrations/versions``, each revising the one before it (generation's tables from 0004);
* any other pipeline ships its revisions in its own folder (``Pipeline.migrations``): a branch
  labelled with the pipeline's name, whose first revision revises a backbone revision, with
  ids prefixed by the pipeline's name. Every installed pipeline's folder is searched, and
  ``upgrade`` brings every branch to its head, so the database's revision is then the sorted,
  comma-joined heads (a single id while only the hub's chain exists).

To write a hub revision, against a database migrated to head::

    with sa.create_engine(sync_url(url)).connect() as conn:
        command.revision(alembic_config(conn), "generation tasks", autogenerate=True,
                         rev_id="0002")

then read and edit the file: it is frozen once merged.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic import util as alembic_util
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import make_url

from aigc_hub import plugins
from aigc_hub.core import errors
from aigc_hub.pipeline import PipelineBase
from aigc_hub.store import engine as store_engine
from aigc_hub.store import tables

#: The Alembic script folder shipped inside the package.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: Alembic's ``context`` and ``op`` are process-wide proxies: one run at a time per process.
_RUN_LOCK = threading.Lock()
#: PostgreSQL advisory lock held while migrating, so concurrent upgrades queue up.
PG_LOCK_KEY = 0x61_69_67_63_68_75_62  # "aigchub"
#: Seconds to wait for PostgreSQL to accept a connection.
PG_CONNECT_TIMEOUT_S = 10


def target_metadata() -> sa.MetaData:
    """``tables.metadata`` with every installed pipeline's tables on it (imports each
    pipeline's ``models`` module). What autogenerate and the schema test compare against."""
    for pipeline in _installed():
        if pipeline.models:
            importlib.import_module(pipeline.models)
    return tables.metadata


def _installed() -> list[PipelineBase]:
    """Every installed pipeline (entry points), whatever ``AIGC_HUB_PIPELINES`` selects: a
    database keeps a pipeline's tables and revisions when a process does not run it."""
    return plugins.load(None)


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic config for the packaged chain, bound to ``connection`` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    # New revisions come out ruff-formatted (a dev-time step: needs ruff installed).
    config.set_section_option("post_write_hooks", "hooks", "ruff_format")
    config.set_section_option("post_write_hooks", "ruff_format.type", "module")
    config.set_section_option("post_write_hooks", "ruff_format.module", "ruff")
    config.set_section_option(
        "post_write_hooks", "ruff_format.options", "format REVISION_SCRIPT_FILENAME"
    )
    # The hub's chain, then each installed pipeline's branch (see the module docstring).
    folders = [MIGRATIONS_DIR / "versions"] + [
        p.migrations for p in _installed() if p.migrations is not None
    ]
    config.set_main_option("version_locations", os.pathsep.join(str(f) for f in folders))
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


def upgrade(url: str, revision: str = "heads") -> None:
    """Apply migrations up to ``revision`` (default: every branch's head); a rerun is a no-op.

    Safe to call from several threads or processes at once: runs on one database take turns
    and a later run finds the work done. A failed migration rolls back (SQLite: the whole
    run; PostgreSQL: that revision, the ones before it stay applied).
    """
    with _RUN_LOCK, _connect(url, create=True) as conn, _exclusive(conn):
        command.upgrade(alembic_config(conn), revision)


def current_revision(url: str) -> str | None:
    """The revision the database is at (several branches: their heads, sorted, comma-joined);
    ``None`` when it was never migrated (or is missing)."""
    if _sqlite_file_missing(url):
        return None
    with _connect(url, create=False) as conn:
        # A read: on SQLite, do not take the writer lock.
        reader = conn.execution_options(sqlite_begin="DEFERRED")
        heads = MigrationContext.configure(reader).get_current_heads()
    return ",".join(sorted(heads)) or None


def head_revision() -> str:
    """The newest revision of the hub's chain and of each installed pipeline's branch, sorted
    and comma-joined (one id while only the hub's chain exists)."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if not heads:
        raise errors.ConfigurationError("the migration chain is empty")
    return ",".join(sorted(heads))


def is_known_revision(revision: str) -> bool:
    """True when every id of ``revision`` is in the installed chain (False: a newer aigc-hub,
    or a pipeline no longer installed, migrated it)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    try:
        return all(scripts.get_revision(part) is not None for part in revision.split(","))
    except alembic_util.CommandError:
        return False


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


@contextmanager
def _exclusive(conn: sa.Connection) -> Iterator[None]:
    """Hold the database's migration lock; Alembic reads the current revision under it."""
    if conn.dialect.name == "sqlite":
        # One BEGIN IMMEDIATE around the whole run: the writer lock is the migration lock.
        with conn.begin():
            yield
        return
    # PostgreSQL: a session-level lock, so Alembic can still commit per revision; it is
    # released when the connection closes (NullPool) at the end of the run.
    conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": PG_LOCK_KEY})
    conn.commit()
    yield


def _sync_engine(url: str, *, create: bool) -> sa.Engine:
    parsed = sync_url(url)
    if parsed.get_backend_name() != "sqlite":
        try:
            # libpq waits forever on an address that drops packets: fail in bounded time.
            return sa.create_engine(
                parsed,
                poolclass=sa.pool.NullPool,
                connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
            )
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
        # WAL is a property of the file: set it when the file is created, so a later
        # switch (which needs an exclusive lock) never competes with another process.
        dbapi_conn.execute("PRAGMA journal_mode=WAL")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine
