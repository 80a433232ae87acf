"""Creating route under load: ``POST /v1/generation-tasks`` with an Idempotency-Key.

Each request is the real creating route: validation, cost estimate, credit reservation, and
task + ledger + task event + outbox rows and the answer stored under its Idempotency-Key, all
in one transaction (earlier versions claimed the key and stored the answer in two more). The
API runs as its own process (``bench/apiserver.py``: ``create_app`` on a hub from settings,
the per-tenant limit raised; the limiter still runs on every request) and is
**API-only**: no relay, consumers or scanners run during the measurement, as for a process
started with ``aigc-hub api``. The load generator runs in this process on httpx keep-alive
connections; every request has its own Idempotency-Key.

Phases, each on a fresh API process (same database) and bounded in count and time:

* warm-up: 3 s of requests from 8 clients, not counted;
* latency: open loop at ``--rate`` requests/s for ``--seconds``; request i is due at
  start + i/rate, ``--connections`` senders take the next due request, and its latency counts
  from the due time, so queueing behind a slow request is not hidden (no coordinated
  omission);
* saturation: closed loop, ``--concurrency`` clients back to back for ``--seconds``.

    python bench/submit.py                       # embedded defaults: SQLite (+ embedded log)
    python bench/submit.py --database-url postgresql://postgres@127.0.0.1:5432/test
                                                 # a scratch database on that server, dropped after
    python bench/submit.py --workers 2           # ``aigc-hub api --workers 2`` (CPU: all workers)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loopback

from aigc_hub.store import migrate

BODY = {
    "mode": "text_to_video",
    "model": "local-v1",
    "prompt": "a paper boat on a rainy street, 一只纸船",
    "duration_s": 2,
    "resolution": "320x180",
    "priority": 50,
}


@dataclass
class Phase:
    """What one phase saw: latencies of 201 answers and everything else by status."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    elapsed_s: float = 0.0
    api_cpu_s: float = 0.0
    bench_cpu_s: float = 0.0

    def record(self, status: str, latency_ms: float) -> None:
        if status == "201":
            self.latencies_ms.append(latency_ms)
        else:
            self.errors[status] += 1

    def report(self, extra: str = "") -> None:
        ok = sorted(self.latencies_ms)
        p = {q: loopback.percentile(ok, q) for q in (50, 90, 99)}
        rate = len(ok) / self.elapsed_s if self.elapsed_s else 0.0
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())) or "none"
        print(
            f"{self.name:<11} {len(ok):6d} created, {rate:7.0f}/s  p50 {p[50]:6.1f}  "
            f"p90 {p[90]:6.1f}  p99 {p[99]:6.1f}  max {ok[-1] if ok else 0:7.1f} ms  "
            f"errors: {errors}{extra}"
        )
        busy = self.elapsed_s or 1.0
        print(
            f"{'':<11} CPU: API process {self.api_cpu_s / busy:4.0%} of a core, "
            f"load generator {self.bench_cpu_s / busy:4.0%}; {loopback.machine_load()}"
        )


@dataclass
class Target:
    """Where requests go and who sends them (tenants in turn)."""

    client: httpx.AsyncClient
    keys: Sequence[str]
    run: str

    async def create(self, phase: Phase, i: int, started: float) -> None:
        """One creating POST; its latency counts from ``started`` (a perf_counter time)."""
        headers = {
            "Authorization": f"Bearer {self.keys[i % len(self.keys)]}",
            "Idempotency-Key": f"{self.run}-{phase.name}-{i}",
        }
        try:
            response = await self.client.post("/v1/generation-tasks", json=BODY, headers=headers)
            status = str(response.status_code)
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        phase.record(status, (time.perf_counter() - started) * 1000)


@contextlib.contextmanager
def measured(phase: Phase, api_pid: int) -> Iterator[None]:
    """Time the block and the CPU the API (with its workers) and this process spent in it."""
    api0, bench0 = loopback.tree_cpu_seconds(api_pid), time.process_time()
    t0 = time.perf_counter()
    yield
    phase.elapsed_s = time.perf_counter() - t0
    phase.api_cpu_s = loopback.tree_cpu_seconds(api_pid) - api0
    phase.bench_cpu_s = time.process_time() - bench0


async def open_loop(
    target: Target, phase: Phase, rate: float, seconds: float, connections: int
) -> None:
    """Request i is due at start + i/rate; ``connections`` senders take the next due request
    (as wrk2 does). A sender busy past a due time sends at once, and the latency still counts
    from the due time, so queueing is measured, not omitted. Requests not started 30 s after
    the schedule ends are counted as ``unsent``."""
    total = int(rate * seconds)
    start = time.perf_counter() + 0.01
    give_up = start + seconds + 30
    due = iter(range(total))

    async def sender() -> None:
        for i in due:
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif time.perf_counter() > give_up:
                phase.errors["unsent"] += 1
                continue
            await target.create(phase, i, scheduled)

    await asyncio.gather(*(sender() for _ in range(connections)))


async def closed_loop(target: Target, phase: Phase, clients: int, seconds: float) -> None:
    """``clients`` senders back to back until ``seconds`` have passed."""
    deadline = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def sender() -> None:
        while time.perf_counter() < deadline:
            await target.create(phase, next(counter), time.perf_counter())

    await asyncio.gather(*(sender() for _ in range(clients)))


async def run_phase(
    args: argparse.Namespace, api: loopback.Process, port: int, keys: list[str], name: str
) -> None:
    """Warm the API up, then measure one phase (``latency`` or ``saturation``)."""
    limits = httpx.Limits(max_connections=args.connections, max_keepalive_connections=None)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=10.0, trust_env=False
    ) as client:
        target = Target(client, keys, secrets.token_hex(4))
        warm = Phase("warm-up")
        await closed_loop(target, warm, 8, min(args.seconds, 3.0))
        phase = Phase(name)
        with measured(phase, api.pid):
            if name == "latency":
                await open_loop(target, phase, args.rate, args.seconds, args.connections)
            else:
                await closed_loop(target, phase, args.concurrency, args.seconds)
        how = (
            f"open loop at {args.rate:g}/s for {args.seconds:g} s"
            if name == "latency"
            else f"{args.concurrency} clients back to back for {args.seconds:g} s"
        )
        phase.report(f"  ({how}; after {len(warm.latencies_ms)} warm-up requests)")


def profile_path(args: argparse.Namespace, phase: str) -> Path | None:
    """Where the API's pyinstrument report of ``phase`` goes (None: not profiled)."""
    report: Path | None = args.profile_api
    return report.with_name(f"{report.stem}-{phase}{report.suffix}") if report else None


def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="aigc-bench-submit-"))
    with loopback.scratch_database(args.database_url, workdir) as url:
        migrate.upgrade(url)
        env = loopback.subprocess_env(
            {
                "AIGC_HUB_DATA_DIR": str(workdir),
                "AIGC_HUB_DATABASE_URL": url,
                "AIGC_HUB_PIPELINES": "generation",
                "AIGC_HUB_LOG_LEVEL": "WARNING",
                "AIGC_HUB_GEN_RUN_LOCAL_PROVIDER": "false",
            }
        )
        tenants = [loopback.create_tenant(f"bench-{i}", env) for i in range(args.tenants)]
        asyncio.run(loopback.grant(url, [t for t, _ in tenants], 10**12))
        store = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
        print(
            f"POST /v1/generation-tasks on {store}; API-only process (no relay, consumers or "
            f"scanners running); {args.tenants} tenants, per-tenant limit raised to "
            f"{loopback.RAISED_RATE_LIMIT:g}/s; {args.connections} keep-alive connections"
        )
        print(f"before: {loopback.machine_load()}")
        # A fresh API process per phase (same database): an overloaded latency phase leaves
        # abandoned requests behind that would slow the next phase down.
        for name in ("latency", "saturation"):
            port = loopback.free_port()
            command, api_env = loopback.api_server(port, dispatch=False), env
            if args.workers > 1:
                command, raised = loopback.api_workers(port, args.workers)
                api_env = env | raised
            log = workdir / f"api-{name}.log"
            command = loopback.profiled(command, profile_path(args, name))
            with loopback.child(command, api_env, log) as api:
                loopback.wait_healthy(api, f"http://127.0.0.1:{port}/healthz", "the API")
                asyncio.run(run_phase(args, api, port, [k for _, k in tenants], name))
            if args.profile_api:
                print(f"{'':<11} API profile written to {profile_path(args, name)}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--database-url",
        default=None,
        help="default: SQLite under a temp dir; a postgresql:// URL gets a scratch database",
    )
    ap.add_argument("--rate", type=float, default=500.0, help="requests/s of the latency phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--concurrency", type=int, default=32, help="clients in the saturation phase")
    ap.add_argument("--connections", type=int, default=64, help="keep-alive connections (max)")
    ap.add_argument("--tenants", type=int, default=4, help="tenants the requests rotate over")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="serve with `aigc-hub api --workers N` instead of bench/apiserver.py (N > 1)",
    )
    ap.add_argument(
        "--profile-api",
        type=Path,
        default=None,
        help="run the API under pyinstrument (pip install pyinstrument) and write its "
        "text report here",
    )
    return ap.parse_args()


if __name__ == "__main__":
    main(parse())
