"""The real ``aigc-hub`` in a subprocess, as a new user meets it: a database that is missing,
not migrated, unreachable or named by a bad URL gives one ``error:`` line with the fix and
the documented exit code, never a traceback; long-running commands exit instead of looping.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from aigc_hub import tenancy
from aigc_hub.cli.common import ExitCode
from aigc_hub.pipelines.generation.models import credit_ledger
from aigc_hub.store import engine as store_engine
from tests.support.provider import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
#: Every command here must answer well within this; a command that loops fails the test.
PROMPT_S = 30.0

UPGRADE_FIX = "run `aigc-hub db upgrade`"
URL_FIX = "AIGC_HUB_DATABASE_URL"
SERVER_FIX = "start PostgreSQL"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no AIGC_HUB_* of the caller's, data under ``tmp_path/var``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIGC_HUB_")}
    env.update(
        {
            "AIGC_HUB_DATA_DIR": str(tmp_path / "var"),
            "AIGC_HUB_PIPELINES": "generation",
            "AIGC_HUB_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            "NO_COLOR": "1",
        }
    )
    env.update(extra)
    return env


def aigc_hub(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``aigc-hub ARGS`` in ``tmp_path``; a command still running after PROMPT_S fails."""
    return subprocess.run(
        [sys.executable, "-m", "aigc_hub", *args],
        cwd=tmp_path,
        env=_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=PROMPT_S,
        check=False,
    )


def assert_one_error_line(
    result: subprocess.CompletedProcess[str], code: ExitCode, *fixes: str
) -> str:
    """Exit ``code``; stderr is exactly one ``error:`` line naming every one of ``fixes``."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fix in fixes:
        assert fix in lines[0], lines[0]
    return lines[0]


def _unmigrated_sqlite_file(path: Path) -> str:
    """A real SQLite database with a table of its own but none of the hub's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    conn.close()
    return f"sqlite:///{path}"


# Every command that needs the hub's tables; the long-running ones must exit, not loop.
DATABASE_COMMANDS = [
    ["tenants", "create", "acme"],
    ["tenants", "list"],
    ["tenants", "admin-key"],
    ["dlq", "list"],
    ["dlq", "show", "1"],
    ["dlq", "replay", "1"],
    ["dlq", "dismiss", "1"],
    ["gen", "grant", "some-tenant", "5"],
    ["relay"],
    ["scan"],
    ["worker", "--group", "generation-submitter"],
    ["api", "--port", "0"],
]


@pytest.mark.parametrize("command", DATABASE_COMMANDS, ids=" ".join)
def test_an_unmigrated_sqlite_file_names_db_upgrade_and_exits_78(
    tmp_path: Path, command: list[str]
) -> None:
    url = _unmigrated_sqlite_file(tmp_path / "var" / "hub.db")

    result = aigc_hub(tmp_path, *command, AIGC_HUB_DATABASE_URL=url)

    line = assert_one_error_line(result, ExitCode.CONFIGURATION, UPGRADE_FIX)
    assert "not initialised" in line


@pytest.mark.parametrize(
    "command",
    [["tenants", "list"], ["dlq", "list"], ["dlq", "show", "1"], ["scan"], ["relay"]],
    ids=" ".join,
)
def test_a_missing_sqlite_file_is_reported_and_nothing_is_created(
    tmp_path: Path, command: list[str]
) -> None:
    result = aigc_hub(tmp_path, *command)  # the default: <data dir>/hub.db

    assert_one_error_line(result, ExitCode.CONFIGURATION, UPGRADE_FIX)
    assert not (tmp_path / "var").exists(), sorted(p.name for p in (tmp_path / "var").iterdir())


def test_a_database_behind_the_code_names_db_upgrade(tmp_path: Path, sqlite_url: str) -> None:
    with sqlite3.connect(sa.make_url(sqlite_url).database or "") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()

    result = aigc_hub(tmp_path, "tenants", "list", "--database-url", sqlite_url)

    line = assert_one_error_line(result, ExitCode.CONFIGURATION, UPGRADE_FIX)
    assert "revision 0001" in line


BAD_URLS = ["foo://x", "not a url", "postgresql://hub:s3cret@127.0.0.1:notaport/hub"]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize(
    "command",
    [["tenants", "list"], ["gen", "grant", "t", "1"], ["db", "current"]],
    ids=" ".join,
)
def test_a_bad_database_url_option_exits_78_naming_the_setting(
    tmp_path: Path, command: list[str], url: str
) -> None:
    result = aigc_hub(tmp_path, *command, "--database-url", url)

    line = assert_one_error_line(result, ExitCode.CONFIGURATION, URL_FIX, "sqlite:///")
    assert "s3cret" not in line


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("command", [["dlq", "list"], ["relay"], ["up"]], ids=" ".join)
def test_a_bad_database_url_setting_exits_78_naming_the_setting(
    tmp_path: Path, command: list[str], url: str
) -> None:
    result = aigc_hub(tmp_path, *command, AIGC_HUB_DATABASE_URL=url)

    line = assert_one_error_line(result, ExitCode.CONFIGURATION, URL_FIX, "sqlite:///")
    assert "s3cret" not in line


@pytest.mark.parametrize(
    "command",
    [
        ["tenants", "list"],
        ["dlq", "list"],
        ["gen", "grant", "t", "1"],
        ["relay"],
        ["worker", "--group", "generation-submitter"],
        ["up", "--port", "0"],
    ],
    ids=" ".join,
)
def test_an_unreachable_postgresql_exits_5_in_one_line(tmp_path: Path, command: list[str]) -> None:
    closed = f"postgresql://hub:s3cret@127.0.0.1:{free_port()}/hub"  # nobody listens there

    result = aigc_hub(tmp_path, *command, AIGC_HUB_DATABASE_URL=closed)

    line = assert_one_error_line(result, ExitCode.UNAVAILABLE, SERVER_FIX, URL_FIX)
    assert "s3cret" not in line


# --- gen grant ----------------------------------------------------------------------------------


def _tenant(url: str, name: str) -> str:
    async def create() -> str:
        engine = store_engine.create_engine(url)
        try:
            tenant, _key = await tenancy.create_tenant(engine, name)
            return tenant.id
        finally:
            await engine.dispose()

    return asyncio.run(create())


def _grants(url: str) -> list[tuple[str, str, int]]:
    async def select() -> list[tuple[str, str, int]]:
        engine = store_engine.create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    sa.select(
                        credit_ledger.c.tenant_id,
                        credit_ledger.c.business_id,
                        credit_ledger.c.amount,
                    ).order_by(credit_ledger.c.id)
                )
                return [(r.tenant_id, r.business_id, r.amount) for r in rows]
        finally:
            await engine.dispose()

    return asyncio.run(select())


def test_grant_to_an_unknown_tenant_exits_3_and_grants_nothing(tmp_path: Path, db_url: str) -> None:
    result = aigc_hub(tmp_path, "gen", "grant", "no-such-tenant", "5", "--database-url", db_url)

    assert_one_error_line(result, ExitCode.NOT_FOUND, "no-such-tenant", "aigc-hub tenants list")
    assert _grants(db_url) == []


def test_a_grant_id_of_another_tenant_exits_4_and_a_repeat_for_the_same_tenant_adds_nothing(
    tmp_path: Path, db_url: str
) -> None:
    first, second = _tenant(db_url, "first"), _tenant(db_url, "second")
    granted = aigc_hub(
        tmp_path, "gen", "grant", first, "5", "--grant-id", "g1", "--database-url", db_url
    )
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.splitlines() == ["available: 5"]

    taken = aigc_hub(
        tmp_path, "gen", "grant", second, "7", "--grant-id", "g1", "--database-url", db_url
    )
    repeated = aigc_hub(
        tmp_path, "gen", "grant", first, "5", "--grant-id", "g1", "--database-url", db_url
    )

    assert_one_error_line(taken, ExitCode.CONFLICT, "'g1'", first, "choose another --grant-id")
    assert repeated.returncode == 0, repeated.stderr
    assert repeated.stdout.splitlines() == [
        "grant g1 was already applied to this tenant: nothing added",
        "available: 5",
    ]
    assert _grants(db_url) == [(first, "g1", 5)]


# --- up --host/--port -------------------------------------------------------------------------


def test_up_listens_on_the_host_and_port_options(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "up", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        env=_env(tmp_path, AIGC_HUB_PIPELINES=""),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready = wait_until(
            lambda: _ready(f"http://127.0.0.1:{port}/readyz"), timeout_s=60, what="up's API"
        )
        assert ready.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=PROMPT_S)
    assert proc.returncode == 0, out
    assert f"API on http://127.0.0.1:{port}" in out


def _ready(url: str) -> httpx.Response | None:
    try:
        response = httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None
    return response if response.status_code == 200 else None
