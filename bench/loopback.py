"""Shared pieces of the HTTP benchmarks: processes on loopback, scratch databases, tenants,
percentiles and the machine load. Nothing here listens beyond 127.0.0.1."""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from aigc_hub.bootstrap import Hub
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation import services
from aigc_hub.store import engine as store_engine

BENCH = Path(__file__).resolve().parent
SRC = BENCH.parent / "src"

#: The hub's default per-tenant budget is 20 requests/s; load tests raise it (the limiter
#: still runs on every request).
RAISED_RATE_LIMIT = 100_000.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def machine_load() -> str:
    """The 1/5/15-minute load averages and core count, printed beside every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of its live descendants (``aigc-hub api --workers``)."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += tree_cpu_seconds(int(child))
    return total


def percentile(sorted_ms: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0–100) of an ascending list; 0 when empty."""
    if not sorted_ms:
        return 0.0
    rank = min(len(sorted_ms) - 1, max(0, math.ceil(q / 100 * len(sorted_ms)) - 1))
    return sorted_ms[rank]


def subprocess_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This environment with the package on PYTHONPATH and ``extra`` on top."""
    path = os.pathsep.join(p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


@contextlib.contextmanager
def scratch_database(url: str | None, workdir: Path) -> Iterator[str]:
    """A fresh SQLite file under ``workdir`` when ``url`` is None; for a PostgreSQL URL, a
    scratch database ``aigc_hub_bench_<random>`` on that server, dropped afterwards."""
    if url is None:
        yield f"sqlite:///{workdir / 'hub.db'}"
        return
    if not url.startswith("postgresql"):
        yield url
        return
    name = f"aigc_hub_bench_{secrets.token_hex(4)}"
    server = sa.make_url(url)
    admin = sa.create_engine(
        server.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class Process:
    """A child process and its log file."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self, what: str) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{what} exited with {self.proc.returncode}:\n{tail}")


@contextlib.contextmanager
def child(
    args: Sequence[str], env: Mapping[str, str], log_path: Path, grace_s: float = 120.0
) -> Iterator[Process]:
    """Run ``args`` with output to ``log_path`` for the block; always stopped after it with
    SIGTERM, then SIGKILL after ``grace_s`` (a profiler writes its report on the way out)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(args), env=dict(env), stdout=log, stderr=subprocess.STDOUT)
        try:
            yield Process(proc, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def wait_healthy(process: Process, url: str, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``url`` (bounded) until it answers 200; fail early if the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        process.check_alive(what)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer {url} within {timeout_s:g} s")


def api_server(port: int, *, dispatch: bool) -> list[str]:
    """The command line of ``bench/apiserver.py`` (API with the raised per-tenant limit)."""
    args = [sys.executable, str(BENCH / "apiserver.py"), "--port", str(port)]
    args += ["--rate-limit", str(RAISED_RATE_LIMIT)]
    return args + (["--dispatch"] if dispatch else [])


def api_workers(port: int, workers: int) -> tuple[list[str], dict[str, str]]:
    """``aigc-hub api --workers N`` and the environment raising its per-tenant limit (the
    workers read their settings from the environment)."""
    args = [sys.executable, "-m", "aigc_hub", "api", "--port", str(port)]
    raised = str(RAISED_RATE_LIMIT)
    env = {"AIGC_HUB_API_RATE_PER_S": raised, "AIGC_HUB_API_BURST": raised}
    return [*args, "--workers", str(workers)], env


def profiled(command: list[str], report: Path | None) -> list[str]:
    """``command`` (a Python script) under pyinstrument writing a text report to ``report``;
    unchanged when ``report`` is None."""
    if report is None:
        return command
    return [sys.executable, "-m", "pyinstrument", "-o", str(report), "-r", "text", *command[1:]]


def create_tenant(name: str, env: Mapping[str, str]) -> tuple[str, str]:
    """``aigc-hub tenants create NAME`` in a subprocess; returns (tenant id, API key)."""
    out = subprocess.run(
        [sys.executable, "-m", "aigc_hub", "tenants", "create", name],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    tenant = re.search(r"tenant id:\s*(\S+)", out)
    key = re.search(r"api key:\s*(\S+)", out)
    if tenant is None or key is None:
        raise RuntimeError(f"unexpected output of tenants create: {out!r}")
    return tenant.group(1), key.group(1)


async def grant(database_url: str, tenant_ids: Sequence[str], amount: int) -> None:
    """Top up each tenant through ``services.grant_credits`` (no CLI grants credits)."""
    engine = store_engine.create_engine(database_url)
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()))
    try:
        for tenant_id in tenant_ids:
            await services.grant_credits(
                hub, tenant_id=tenant_id, amount=amount, grant_id=f"bench-{tenant_id}"
            )
    finally:
        await hub.close()
