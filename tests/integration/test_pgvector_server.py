"""The test fixture's PostgreSQL 16 with pgvector (``tests/support/pgvector.py``): it listens
on no network interface, runs unprivileged, and leaves no process behind, even when the
process that started it is killed."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import textwrap
from pathlib import Path

import psutil
import psycopg
import pytest

from tests.support import pgvector as pgvector_support
from tests.support.pgvector import PgvectorServer, PgvectorUnavailable

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]


async def exited(pid: int) -> None:
    """Until process ``pid`` (not a child of ours) has exited: its pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, done.set_result, None)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def running(process: psutil.Process) -> bool:
    """Still running (a zombie, exited but not yet reaped by its new parent, is not)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_session_server_listens_on_its_socket_only(pgvector_server: PgvectorServer) -> None:
    with psycopg.connect(pgvector_server.url()) as conn:
        (listen,) = conn.execute("SHOW listen_addresses").fetchone() or ("?",)
        (extension,) = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone() or ("",)
        (version,) = conn.execute("SHOW server_version_num").fetchone() or ("0",)
    assert listen == ""
    assert extension.startswith("0.8.") and version.startswith("16")
    server = psutil.Process(pgvector_server.pid)
    assert not [c for c in server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert server.uids().real != 0


async def test_a_killed_parent_takes_its_server_down(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        from tests.support.pgvector import PgvectorServer
        server = PgvectorServer()
        server.start()
        print(server.pid, server.workdir, flush=True)
        sys.stdin.read()  # until killed
    """)
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert parent.stdout is not None
    line = await asyncio.wait_for(parent.stdout.readline(), timeout=60)
    pid_text, workdir = line.decode().split()
    postmaster = psutil.Process(int(pid_text))
    children = postmaster.children()
    assert children  # checkpointer, background writer…

    parent.kill()
    await parent.wait()

    # the kernel signals the postmaster (SIGINT: a fast shutdown, which ends its children
    # before the postmaster itself exits)
    await asyncio.wait_for(exited(postmaster.pid), timeout=30)
    assert not [p for p in children if running(p)]
    shutil.rmtree(workdir, ignore_errors=True)


def test_stop_ends_every_process_and_removes_the_folder() -> None:
    server = PgvectorServer()
    server.start()
    assert server.workdir is not None and server.pid is not None
    workdir, postmaster = server.workdir, psutil.Process(server.pid)
    processes = [postmaster, *postmaster.children()]

    server.stop()

    assert not [p for p in processes if running(p)]
    assert not workdir.exists()


def test_a_server_that_cannot_start_says_why_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(pgvector_support._SETTINGS, "shared_buffers", "lots")
    server = PgvectorServer(start_timeout=30)

    with pytest.raises(PgvectorUnavailable, match=r"(?s)postgres exited.*shared_buffers"):
        server.start()

    assert server.workdir is not None and not server.workdir.exists()


def test_a_failure_after_the_server_started_stops_it_and_says_why() -> None:
    server = PgvectorServer()
    server._template = "template1"  # exists already: creating it fails once the server runs

    with pytest.raises(PgvectorUnavailable, match="DuplicateDatabase"):
        server.start()

    assert server.pid is not None and not psutil.pid_exists(server.pid)
    assert server.workdir is not None and not server.workdir.exists()
