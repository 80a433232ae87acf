"""Generation control plane end to end: N tasks through the hub against the ``local`` provider
with zero render time.

Processes, all on loopback: ``aigc-hub provider serve --render-mode instant`` (one pre-rendered
clip per size, so the provider adds no render time), and the hub as ``aigc-hub up`` runs it
(``bench/apiserver.py --dispatch``: API + relay + every generation consumer group + scanners
+ lag monitor in one process; the per-tenant limit and the slot limits raised so neither
throttles). This process submits the tasks over HTTP from several tenants, waits (bounded)
until every task is terminal, then reads the database:

* tasks/s through the whole control plane: first task created → last task terminal;
* submit latency (the HTTP POST, seen by the client) p50/p99;
* the scheduler's added latency, QUEUED → SUBMITTED (``task_events`` times), p50/p99;
* how many tasks SUCCEEDED and how the others ended.

    python bench/generation.py                    # embedded: SQLite + embedded log
    python bench/generation.py --profile scale    # PostgreSQL + Kafka (Tansu) + Redis
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loopback

from aigc_hub.pipelines.generation.models import generation_tasks, task_events
from aigc_hub.reliability import webhooks
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate

BODY = {
    "mode": "text_to_video",
    "model": "local-v1",
    "prompt": "a paper boat on a rainy street",
    "duration_s": 1,
    "resolution": "320x180",
}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")
#: Slots high enough that every task finds one free (the limits are not what is measured).
FREE_SLOTS = "100000"
#: Signs the provider's webhooks; the hub verifies them with it.
SECRET = webhooks.generate_secret()


@dataclass
class Submitted:
    """The client's view of the submissions."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    retried_429: int = 0


@dataclass
class Backends:
    """Where the hub keeps its state for one profile, as ``AIGC_HUB_*`` variables."""

    name: str
    database_url: str
    env: dict[str, str]


@contextlib.contextmanager
def backends(args: argparse.Namespace, workdir: Path) -> Iterator[Backends]:
    """Embedded: a SQLite file and the embedded log. Scale: a scratch PostgreSQL database,
    Kafka (a fresh Tansu, or ``--kafka``) and Redis (``--redis-url``)."""
    if args.profile == "embedded":
        with loopback.scratch_database(args.database_url, workdir) as url:
            store = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
            yield Backends(f"{store} + embedded log + in-process cache", url, {})
        return
    from aigc_hub.testing import tansu

    with contextlib.ExitStack() as stack:
        url = stack.enter_context(loopback.scratch_database(args.database_url, workdir))
        if args.kafka:
            endpoint = tansu.KafkaEndpoint(args.kafka, tansu.KAFKA_CONSUMER_SETTINGS, {})
        else:
            endpoint = stack.enter_context(tansu.kafka_for_tests())
        # Slot leases and limiter buckets of another run must not count in this one.
        asyncio.run(_clear_redis(args.redis_url))
        stack.callback(lambda: asyncio.run(_clear_redis(args.redis_url)))
        env = {
            "AIGC_HUB_BROKER": "kafka",
            "AIGC_HUB_KAFKA_BOOTSTRAP": endpoint.bootstrap,
            "AIGC_HUB_KAFKA_CONSUMER_CONFIG": _pairs(endpoint.consumer_settings),
            "AIGC_HUB_KAFKA_PRODUCER_CONFIG": _pairs(endpoint.producer_settings),
            "AIGC_HUB_REDIS_URL": args.redis_url,
        }
        yield Backends("PostgreSQL + Kafka (Tansu) + Redis", url, env)


async def _clear_redis(url: str) -> None:
    from aigc_hub.cache.redis import RedisCache

    cache = RedisCache.from_url(url)
    try:
        await cache.clear()
    finally:
        await cache.close()


def _pairs(settings: Mapping[str, Any]) -> str:
    """librdkafka settings as ``AIGC_HUB_KAFKA_*_CONFIG`` wants them: ``key=value,…``."""
    return ",".join(f"{k}={v}" for k, v in settings.items())


async def submit_all(args: argparse.Namespace, port: int, keys: list[str]) -> Submitted:
    """POST ``--tasks`` tasks from ``--concurrency`` senders, tenants in turn; a 429 (the
    admission gate or the limiter) is retried after its Retry-After, at most 20 times."""
    seen = Submitted()
    todo = iter(range(args.tasks))
    run = secrets.token_hex(4)

    async def sender(client: httpx.AsyncClient) -> None:
        for i in todo:
            headers = {
                "Authorization": f"Bearer {keys[i % len(keys)]}",
                "Idempotency-Key": f"{run}-{i}",
            }
            for _ in range(20):
                started = time.perf_counter()
                response = await client.post("/v1/generation-tasks", json=BODY, headers=headers)
                if response.status_code != 429:
                    break
                seen.retried_429 += 1
                await asyncio.sleep(min(5.0, float(response.headers.get("retry-after", "1"))))
            seen.statuses[str(response.status_code)] += 1
            seen.latencies_ms.append((time.perf_counter() - started) * 1000)

    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=30.0, trust_env=False
    ) as client:
        await asyncio.gather(*(sender(client) for _ in range(args.concurrency)))
    return seen


async def probe_idle(args: argparse.Namespace, port: int, key: str, url: str) -> list[str]:
    """After the burst: ``--probe`` tasks one at a time, each once the previous is terminal,
    so their QUEUED → SUBMITTED is the scheduler's own latency on an idle hub."""
    run, ids = secrets.token_hex(4), []
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        timeout=30.0,
        trust_env=False,
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        for i in range(args.probe):
            headers = {"Idempotency-Key": f"probe-{run}-{i}"}
            response = await client.post("/v1/generation-tasks", json=BODY, headers=headers)
            response.raise_for_status()
            ids.append(response.json()["task_id"])
            await wait_terminal(url, args.tasks + i + 1, 30.0)
    return ids


async def wait_terminal(url: str, expected: int, max_seconds: float) -> int:
    """Poll (bounded) until ``expected`` tasks are terminal; returns how many are."""
    engine = store_engine.create_engine(url)
    count = sa.select(sa.func.count()).where(generation_tasks.c.status.in_(TERMINAL))
    deadline = time.monotonic() + max_seconds
    try:
        while True:
            async with engine.connect() as conn:
                done = int((await conn.execute(count)).scalar_one())
            if done >= expected or time.monotonic() > deadline:
                return done
            await asyncio.sleep(0.25)
    finally:
        await engine.dispose()


async def read_outcome(url: str, probe_ids: list[str]) -> dict[str, object]:
    """Throughput, end states and QUEUED → SUBMITTED latencies, from the database."""
    engine = store_engine.create_engine(url)
    try:
        async with engine.connect() as conn:
            tasks = (
                await conn.execute(
                    sa.select(
                        generation_tasks.c.id,
                        generation_tasks.c.status,
                        generation_tasks.c.created_at,
                        generation_tasks.c.terminal_at,
                    )
                )
            ).all()
            events = (
                await conn.execute(
                    sa.select(
                        task_events.c.task_id, task_events.c.to_status, task_events.c.at
                    ).order_by(task_events.c.id)
                )
            ).all()
    finally:
        await engine.dispose()
    probes = set(probe_ids)
    first_queued: dict[str, int] = {}
    burst_ms: list[float] = []
    idle_ms: list[float] = []
    stays: dict[str, list[float]] = collections.defaultdict(list)
    last: dict[str, tuple[str, int]] = {}
    for task_id, to_status, at in events:
        if task_id in last and task_id not in probes:  # time spent in the previous status
            previous, since = last[task_id]
            stays[previous].append(float(int(at) - since))
        last[task_id] = (to_status, int(at))
        if to_status == "QUEUED":
            first_queued.setdefault(task_id, int(at))
        elif to_status == "SUBMITTED" and task_id in first_queued:  # the first, after QUEUED
            waited = float(int(at) - first_queued.pop(task_id))
            (idle_ms if task_id in probes else burst_ms).append(waited)
    burst = [t for t in tasks if t.id not in probes]
    ends = [int(t.terminal_at) for t in burst if t.terminal_at is not None]
    start = min((int(t.created_at) for t in burst), default=0)
    return {
        "statuses": collections.Counter(t.status for t in burst),
        "span_s": (max(ends) - start) / 1000 if ends else 0.0,
        "queued_to_submitted_ms": sorted(burst_ms),
        "idle_queued_to_submitted_ms": sorted(idle_ms),
        "stays_ms": {k: sorted(v) for k, v in stays.items()},
    }


def hub_env(
    backend: Backends, workdir: Path, provider_port: int, api_port: int, args: argparse.Namespace
) -> dict[str, str]:
    """The hub's environment: generation on the instant provider, slots and logs quiet, and
    the media stage as the arguments say."""
    return loopback.subprocess_env(
        {
            "AIGC_HUB_DATA_DIR": str(workdir),
            "AIGC_HUB_DATABASE_URL": backend.database_url,
            "AIGC_HUB_PIPELINES": "generation",
            "AIGC_HUB_LOG_LEVEL": "WARNING",
            "AIGC_HUB_GEN_PROVIDERS": "local",
            "AIGC_HUB_GEN_LOCAL_PROVIDER_URL": f"http://127.0.0.1:{provider_port}",
            "AIGC_HUB_GEN_LOCAL_WEBHOOK_SECRETS": SECRET,
            "AIGC_HUB_GEN_RUN_LOCAL_PROVIDER": "false",
            "AIGC_HUB_GEN_CALLBACK_BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIGC_HUB_GEN_SLOTS_PLATFORM": FREE_SLOTS,
            "AIGC_HUB_GEN_SLOTS_TENANT": FREE_SLOTS,
            "AIGC_HUB_GEN_SLOTS_PROVIDER": FREE_SLOTS,
            "AIGC_HUB_GEN_SLOTS_MODEL": FREE_SLOTS,
            "AIGC_HUB_GEN_MEDIA_PROFILES": args.media_profiles,
            "AIGC_HUB_GEN_OUTPUT_REVIEW": "true" if args.output_review else "false",
            **backend.env,
        }
    )


def provider_command(port: int, data_dir: Path) -> list[str]:
    """``aigc-hub provider serve`` with zero render time and the most concurrent jobs."""
    args = [sys.executable, "-m", "aigc_hub", "provider", "serve", "--render-mode", "instant"]
    args += ["--port", str(port), "--data-dir", str(data_dir), "--webhook-secret", SECRET]
    return [*args, "--max-concurrent", "64"]


def report(
    args: argparse.Namespace, seen: Submitted, outcome: dict[str, object], cpu: dict[str, float]
) -> None:
    """Print the figures with the machine load."""
    submit = sorted(seen.latencies_ms)
    statuses: collections.Counter[str] = outcome["statuses"]  # type: ignore[assignment]
    scheduled: list[float] = outcome["queued_to_submitted_ms"]  # type: ignore[assignment]
    span = float(outcome["span_s"])  # type: ignore[arg-type]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(seen.statuses.items()))
    print(f"submitted:  {answers} (429 retried {seen.retried_429} times)")
    print(
        f"submit:     p50 {loopback.percentile(submit, 50):6.1f} ms  "
        f"p99 {loopback.percentile(submit, 99):6.1f} ms  ({args.concurrency} concurrent senders)"
    )
    print(
        f"throughput: {statuses['SUCCEEDED'] / span if span else 0:6.1f} tasks/s "
        f"(first created → last terminal {span:.1f} s)"
    )
    print(
        f"scheduler:  QUEUED → SUBMITTED p50 {loopback.percentile(scheduled, 50):6.1f} ms  "
        f"p99 {loopback.percentile(scheduled, 99):6.1f} ms  ({len(scheduled)} tasks)"
    )
    idle: list[float] = outcome["idle_queued_to_submitted_ms"]  # type: ignore[assignment]
    print(
        f"idle hub:   QUEUED → SUBMITTED p50 {loopback.percentile(idle, 50):6.1f} ms  "
        f"max {idle[-1] if idle else 0:6.1f} ms  ({len(idle)} tasks one at a time, after)"
    )
    ends = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
    print(f"end states: {ends}")
    stays: dict[str, list[float]] = outcome["stays_ms"]  # type: ignore[assignment]
    for status, ms in sorted(stays.items(), key=lambda kv: -sum(kv[1])):
        print(
            f"  in {status:<16} p50 {loopback.percentile(ms, 50):8.1f} ms  "
            f"p99 {loopback.percentile(ms, 99):8.1f} ms  ({len(ms)} stays, burst tasks)"
        )
    busy = max(span, 1e-9)
    print(
        f"CPU:        hub process {cpu['hub'] / busy:4.0%} of a core, provider "
        f"{cpu['provider'] / busy:4.0%} (over the burst's {span:.1f} s)"
    )
    print(f"after:      {loopback.machine_load()}")


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the provider and of the hub's API."""

    provider: int
    api: int


def run_stack(
    args: argparse.Namespace, backend: Backends, env: dict[str, str], ports: Ports, keys: list[str]
) -> tuple[Submitted, dict[str, object], dict[str, float]]:
    """Start the provider and the hub, submit the burst, wait, probe the idle hub, read the
    database; both processes are stopped on the way out. Returns what was seen, the
    outcome and the CPU seconds each process used during the burst."""
    workdir = Path(env["AIGC_HUB_DATA_DIR"])
    provider_cmd = provider_command(ports.provider, workdir / "provider")
    hub_cmd = loopback.profiled(loopback.api_server(ports.api, dispatch=True), args.profile_hub)
    with (
        loopback.child(provider_cmd, env, workdir / "provider.log") as provider,
        loopback.child(hub_cmd, env, workdir / "hub.log") as hub,
    ):
        loopback.wait_healthy(provider, f"http://127.0.0.1:{ports.provider}/healthz", "provider")
        loopback.wait_healthy(hub, f"http://127.0.0.1:{ports.api}/healthz", "the hub")
        pids = {"hub": hub.pid, "provider": provider.pid}
        cpu0 = {name: loopback.cpu_seconds(pid) for name, pid in pids.items()}
        seen = asyncio.run(submit_all(args, ports.api, keys))
        done = asyncio.run(wait_terminal(backend.database_url, args.tasks, args.max_seconds))
        cpu = {name: loopback.cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        probe_ids: list[str] = []
        if done < args.tasks:
            print(f"only {done} of {args.tasks} tasks terminal after {args.max_seconds:g} s")
        else:
            probe_ids = asyncio.run(probe_idle(args, ports.api, keys[0], backend.database_url))
        return seen, asyncio.run(read_outcome(backend.database_url, probe_ids)), cpu


def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="aigc-bench-generation-"))
    with backends(args, workdir) as backend:
        migrate.upgrade(backend.database_url)
        ports = Ports(loopback.free_port(), loopback.free_port())
        env = hub_env(backend, workdir, ports.provider, ports.api, args)
        tenants = [loopback.create_tenant(f"gen-{i}", env) for i in range(args.tenants)]
        asyncio.run(loopback.grant(backend.database_url, [t for t, _ in tenants], 10**12))
        print(
            f"profile {args.profile}: {backend.name}; {args.tasks} tasks from {args.tenants} "
            f"tenants; hub = API + relay + all consumer groups + scanners in one process; "
            f"provider = instant render, separate process; media variants "
            f"{args.media_profiles or 'none'}, output review "
            f"{'on' if args.output_review else 'off'}"
        )
        print(f"before:     {loopback.machine_load()}")
        seen, outcome, cpu = run_stack(args, backend, env, ports, [k for _, k in tenants])
        report(args, seen, outcome, cpu)
        print(f"logs under {workdir}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile",
        choices=["embedded", "scale"],
        default="embedded",
        help="embedded: SQLite + embedded log; scale: PostgreSQL + Kafka (Tansu) + Redis",
    )
    ap.add_argument("--tasks", type=int, default=1000, help="tasks in the burst")
    ap.add_argument("--tenants", type=int, default=4, help="tenants the tasks rotate over")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent submitters")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="give up waiting after")
    ap.add_argument(
        "--database-url",
        default=None,
        help="embedded: default SQLite under a temp dir; scale: the PostgreSQL server "
        "(default postgresql://postgres@127.0.0.1:5432/test) that gets a scratch database",
    )
    ap.add_argument("--probe", type=int, default=20, help="tasks one at a time, after")
    ap.add_argument(
        "--media-profiles",
        default="poster",
        help="variants each output gets before SUCCEEDED (the hub's default is the whole set: "
        "proxy,hls,poster,thumbnails,waveform, measured by bench/media.py); default poster, "
        "the cheapest, so the figures are the control plane's",
    )
    ap.add_argument(
        "--output-review",
        action="store_true",
        help="also review frames of every output (off by default, like --media-profiles)",
    )
    ap.add_argument(
        "--profile-hub",
        type=Path,
        default=None,
        help="run the hub under pyinstrument (pip install pyinstrument), text report here",
    )
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="scale: Redis")
    ap.add_argument("--kafka", default=None, help="scale: bootstrap (default: a fresh Tansu)")
    args = ap.parse_args()
    if args.profile == "scale" and args.database_url is None:
        args.database_url = "postgresql://postgres@127.0.0.1:5432/test"
    return args


if __name__ == "__main__":
    main(parse())
