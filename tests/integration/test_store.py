"""The store on SQLite and PostgreSQL: migrations, guarded transitions, unit of work, db CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from typer.testing import CliRunner

# The schema registry's tables live beside the backbone's, not in a pipeline's models module:
# import them so the comparison below sees every table the migrations create.
import aigc_hub.schemas.avro_registry.tables  # noqa: F401
from aigc_hub.cli import common
from aigc_hub.cli import db as db_cli
from aigc_hub.core.errors import ConfigurationError, StaleTransition
from aigc_hub.store import migrate
from aigc_hub.store.transitions import transition
from aigc_hub.store.unit_of_work import UnitOfWork

# --- migrations ---------------------------------------------------------------------------


def _schema_diff(conn: sa.Connection) -> list[object]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(context, migrate.target_metadata()))


def _predicate(where: object) -> str:
    return "".join(str(where).replace("(", "").replace(")", "").lower().split())


def _partial_indexes(conn: sa.Connection) -> tuple[dict[str, str], dict[str, str]]:
    """Index name -> WHERE predicate, declared and reflected (compare_metadata skips these)."""
    dialect = conn.dialect.name
    declared: dict[str, str] = {}
    reflected: dict[str, str] = {}
    inspector = sa.inspect(conn)
    for table in migrate.target_metadata().sorted_tables:
        for index in table.indexes:
            where = index.dialect_options[dialect]["where"]
            if where is not None:
                declared[str(index.name)] = _predicate(where)
        for info in inspector.get_indexes(table.name):
            where = info.get("dialect_options", {}).get(f"{dialect}_where")
            if where is not None:
                reflected[str(info["name"])] = _predicate(where)
    return declared, reflected


def _table_names(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


@pytest.fixture
def empty_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A database never migrated, on the same engine as ``db_url``."""
    if make_url(db_url).get_backend_name() == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"aigc_hub_empty_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(migrate.sync_url(db_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield make_url(db_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


async def test_migrations_give_the_schema_of_the_tables(db: AsyncEngine) -> None:
    async with db.connect() as conn:
        assert await conn.run_sync(_schema_diff) == []
        declared, reflected = await conn.run_sync(_partial_indexes)
    assert declared
    assert reflected == declared


def test_upgrade_twice_is_a_no_op(db_url: str) -> None:
    assert migrate.current_revision(db_url) == migrate.head_revision()
    migrate.upgrade(db_url)
    assert migrate.current_revision(db_url) == migrate.head_revision()
    assert migrate.is_current(db_url)


def test_is_current_flips_after_upgrade(empty_url: str) -> None:
    assert migrate.current_revision(empty_url) is None
    assert not migrate.is_current(empty_url)
    migrate.upgrade(empty_url)
    assert migrate.is_current(empty_url)


def test_downgrade_to_base_then_upgrade_again(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    engine = sa.create_engine(migrate.sync_url(empty_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            command.downgrade(migrate.alembic_config(conn), "base")
            conn.commit()
            assert _table_names(conn) <= {"alembic_version"}
    finally:
        engine.dispose()
    assert migrate.current_revision(empty_url) is None
    migrate.upgrade(empty_url)
    assert migrate.is_current(empty_url)


def test_concurrent_upgrades_take_turns(empty_url: str) -> None:
    # Processes, not threads: each has its own Alembic; the database lock is what is tested.
    code = "import sys; from aigc_hub.store import migrate; migrate.upgrade(sys.argv[1])"
    runs = [
        subprocess.Popen([sys.executable, "-c", code, empty_url], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    try:
        errors = [run.communicate(timeout=120)[1] for run in runs]
    finally:
        for run in runs:
            run.kill()
            run.wait()
    assert [run.returncode for run in runs] == [0, 0, 0], errors
    assert migrate.is_current(empty_url)


def test_upgrade_is_safe_from_threads(empty_url: str) -> None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            migrate.upgrade(empty_url)
        except BaseException as exc:
            failures.append(exc)

    # Daemon threads joined with a timeout: a regression fails the test instead of hanging it.
    threads = [threading.Thread(target=run, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert migrate.is_current(empty_url)


def test_missing_sqlite_file_is_not_created_by_reading(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'hub.db'}"
    assert migrate.current_revision(url) is None
    assert not (tmp_path / "absent").exists()


def test_the_chain_is_linear_and_ships_in_the_package() -> None:
    scripts = ScriptDirectory.from_config(migrate.alembic_config())
    assert scripts.get_heads() == [migrate.head_revision()]
    assert all(not isinstance(s.down_revision, tuple) for s in scripts.walk_revisions())
    for name in ("env.py", "script.py.mako"):
        assert (migrate.MIGRATIONS_DIR / name).is_file()


def test_unsupported_database_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unsupported database"):
        migrate.upgrade("mysql://root@localhost/hub")


# --- transitions --------------------------------------------------------------------------

jobs_metadata = sa.MetaData()
jobs = sa.Table(
    "test_jobs",
    jobs_metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("status_version", sa.Integer, nullable=False),
    sa.Column("note", sa.String(100), nullable=True),
)


@pytest.fixture
async def job(db: AsyncEngine) -> str:
    """A row of ``test_jobs`` in QUEUED at version 0; returns its id."""
    job_id = str(uuid.uuid4())
    async with db.begin() as conn:
        await conn.run_sync(jobs_metadata.create_all)
        await conn.execute(jobs.insert().values(id=job_id, status="QUEUED", status_version=0))
    return job_id


async def _row(db: AsyncEngine, job_id: str) -> tuple[str, int, str | None]:
    async with db.connect() as conn:
        row = (await conn.execute(sa.select(jobs).where(jobs.c.id == job_id))).one()
    return row.status, row.status_version, row.note


async def test_transition_bumps_the_version_and_sets_values(db: AsyncEngine, job: str) -> None:
    async with db.begin() as conn:
        version = await transition(
            conn,
            jobs,
            job,
            to="RUNNING",
            allowed_from={"QUEUED"},
            seen_version=0,
            values={"note": "picked"},
        )
    assert version == 1
    assert await _row(db, job) == ("RUNNING", 1, "picked")


async def test_a_wrong_state_is_stale_and_changes_nothing(db: AsyncEngine, job: str) -> None:
    async with db.begin() as conn:
        with pytest.raises(StaleTransition, match=r"test_jobs id=.* -> 'DONE'.*status_version=0"):
            await transition(
                conn,
                jobs,
                job,
                to="DONE",
                allowed_from=("RUNNING",),
                seen_version=0,
                values={"note": "x"},
            )
    assert await _row(db, job) == ("QUEUED", 0, None)


async def test_a_stale_version_is_stale(db: AsyncEngine, job: str) -> None:
    async with db.begin() as conn:
        await transition(conn, jobs, job, to="RUNNING", allowed_from={"QUEUED"}, seen_version=0)
    async with db.begin() as conn:
        with pytest.raises(StaleTransition, match="status_version=0"):
            await transition(conn, jobs, job, to="FAILED", allowed_from={"RUNNING"}, seen_version=0)
    assert await _row(db, job) == ("RUNNING", 1, None)


async def test_a_missing_row_is_stale(db: AsyncEngine, job: str) -> None:
    async with db.begin() as conn:
        with pytest.raises(StaleTransition, match="'nope'"):
            await transition(
                conn, jobs, "nope", to="RUNNING", allowed_from={"QUEUED"}, seen_version=0
            )


async def test_of_two_concurrent_transitions_exactly_one_wins(db: AsyncEngine, job: str) -> None:
    async def attempt(to: str) -> int | StaleTransition:
        async with db.begin() as conn:
            try:
                return await transition(
                    conn, jobs, job, to=to, allowed_from={"QUEUED"}, seen_version=0
                )
            except StaleTransition as exc:
                return exc

    results = await asyncio.gather(attempt("RUNNING"), attempt("CANCELLED"))
    assert sorted(type(r).__name__ for r in results) == ["StaleTransition", "int"]
    winner = "RUNNING" if results[0] == 1 else "CANCELLED"
    assert await _row(db, job) == (winner, 1, None)


async def test_transition_rejects_misuse(db: AsyncEngine, job: str) -> None:
    async with db.begin() as conn:
        with pytest.raises(TypeError):
            await transition(conn, jobs, job, to="RUNNING", allowed_from="QUEUED", seen_version=0)
        with pytest.raises(ValueError, match="empty"):
            await transition(conn, jobs, job, to="RUNNING", allowed_from=(), seen_version=0)
        with pytest.raises(ValueError, match="may not set"):
            await transition(
                conn,
                jobs,
                job,
                to="RUNNING",
                allowed_from={"QUEUED"},
                seen_version=0,
                values={"status": "DONE"},
            )
    assert await _row(db, job) == ("QUEUED", 0, None)


# --- unit of work -------------------------------------------------------------------------


async def _set_note(conn: AsyncConnection, job_id: str, note: str) -> None:
    await conn.execute(jobs.update().where(jobs.c.id == job_id).values(note=note))


async def test_unit_of_work_commits_then_runs_callbacks(db: AsyncEngine, job: str) -> None:
    calls: list[str] = []
    async with UnitOfWork(db) as uow:
        await _set_note(uow.conn, job, "committed")
        uow.on_commit(lambda: calls.append("first"))
        uow.on_commit(lambda: calls.append("second"))
        assert calls == []
    assert calls == ["first", "second"]
    assert await _row(db, job) == ("QUEUED", 0, "committed")


async def test_unit_of_work_rolls_back_on_error_and_runs_no_callback(
    db: AsyncEngine, job: str
) -> None:
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        async with UnitOfWork(db) as uow:
            await _set_note(uow.conn, job, "rolled back")
            uow.on_commit(lambda: calls.append("never"))
            raise RuntimeError("boom")
    assert calls == []
    assert await _row(db, job) == ("QUEUED", 0, None)


async def test_a_failing_callback_keeps_the_commit_and_the_other_callbacks(
    db: AsyncEngine, job: str
) -> None:
    calls: list[str] = []

    def fail() -> None:
        raise LookupError("callback failed")

    with pytest.raises(LookupError, match="callback failed"):
        async with UnitOfWork(db) as uow:
            await _set_note(uow.conn, job, "kept")
            uow.on_commit(fail)
            uow.on_commit(lambda: calls.append("after"))
    assert calls == ["after"]
    assert await _row(db, job) == ("QUEUED", 0, "kept")


async def test_unit_of_work_is_single_use(db: AsyncEngine) -> None:
    uow = UnitOfWork(db)
    with pytest.raises(RuntimeError, match="inside"):
        _ = uow.conn
    async with uow:
        pass
    with pytest.raises(RuntimeError, match="single-use"):
        async with uow:
            pass


# --- db CLI -------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_upgrade_and_current(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli' / 'hub.db'}"
    head = migrate.head_revision()
    before = runner.invoke(db_cli.app, ["current", "--database-url", url])
    assert before.exit_code == 0, before.output
    assert "current: none" in before.stdout
    result = runner.invoke(
        db_cli.app, ["upgrade"], env={"AIGC_HUB_DATABASE_URL": url, "AIGC_HUB_DATA_DIR": None}
    )
    assert result.exit_code == 0, result.output
    assert head in result.stdout
    after = runner.invoke(db_cli.app, ["current", "--database-url", url])
    assert after.stdout.splitlines() == [f"current: {head}", f"head:    {head}"]


def test_cli_defaults_to_a_file_in_the_data_dir(tmp_path: Path) -> None:
    env = {"AIGC_HUB_DATA_DIR": str(tmp_path / "data"), "AIGC_HUB_DATABASE_URL": None}
    result = runner.invoke(db_cli.app, ["upgrade"], env=env)
    assert result.exit_code == 0, result.output
    assert migrate.is_current(f"sqlite:///{tmp_path / 'data' / 'hub.db'}")


@pytest.mark.parametrize(
    ("command_name", "url", "code"),
    [
        (name, url, code)
        for name in ("upgrade", "current")
        for url, code in (
            ("not a url", common.ExitCode.CONFIGURATION),
            ("mysql://root@127.0.0.1/hub", common.ExitCode.CONFIGURATION),
            ("postgresql://postgres@127.0.0.1:1/unreachable", common.ExitCode.UNAVAILABLE),
        )
    ]
    + [("upgrade", "sqlite:////proc/no-such-folder/hub.db", common.ExitCode.CONFIGURATION)],
)
def test_cli_user_errors_exit_with_their_code_and_one_line(
    command_name: str, url: str, code: common.ExitCode
) -> None:
    result = runner.invoke(db_cli.app, [command_name, "--database-url", url])
    assert result.exit_code == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
