"""avcc: application → code latency at a fixed arrival rate, and anchoring throughput per chain.

Part ``latency``: a hub on embedded defaults (a SQLite file, the embedded log broker, local
blobs, ``chain=log``) runs in this process with its API on loopback, as the avcc test stack
builds it (``tests/support/avcc.py``). O-level works (seeded noise PNGs declared as made by a
known AI tool: nothing to remark, so the rubric gives O) arrive open loop: arrival i is due
at start + i/rate, whether or not earlier ones have answered; each uploads its work and
applies, tenants in turn. The figure is each work's ``avcc_records.created_at`` →
``issued_at`` (epoch ms the hub writes), so polling does not enter it, split by the record's
moves (``avcc_record_events.at``). The first ``--warmup`` seconds of arrivals are not counted.
The load generator shares the hub's process and event loop, so the script also prints
due → coded (its own lateness and the upload included).

With ``--workers N`` this process keeps the API, the relay and the scanners, and avcc's
consumer groups run in N ``aigc-hub worker`` OS processes on the same SQLite file, embedded
log, blob folder and log key (``--worker-groups`` splits the groups among them). The arrivals
start once every group's members own all its partitions; the CPU printed then includes the
workers' (from ``/proc/<pid>/stat``), and they are stopped with SIGTERM at the end.

Part ``anchoring``: ``--anchor-works`` statements notarized through the ``Chain`` adapters
directly, on a fresh SQLite file per run: ``LogChain``, and ``EvmChain`` against the py-evm
node process of ``tests/support/evm_node.py``. Two ways, in alternating rounds:

* batched: ``--submitters`` concurrent callers through chain-svc's ``Notary`` (its default
  window and batch size), as ``avcc-chain``'s 64 handler slots call it;
* per work: the same callers, each call ``chain.notarize([one statement])``: one chain
  transaction per work, what one writes without batching.

Every run is bounded in count and time.

    python bench/avcc.py                                  # both parts
    python bench/avcc.py --part latency --rate 20 --seconds 30 --profile avcc-latency.txt
    python bench/avcc.py --part latency --workers 2 \
        --worker-groups 'avcc-review;avcc-code,avcc-chain,avcc-embed'
    python bench/avcc.py --part anchoring --anchor-works 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import math
import os
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.ext.asyncio import AsyncEngine

# This checkout's package, and its root for tests.support (the avcc stack, the EVM node).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.avcc import SETTLED, avcc_stack, noise_png, sha
from tests.support.evm_node import EvmNode, running_node

from aigc_hub.blobs.local import LocalBlobStore, load_or_create_secret
from aigc_hub.core.errors import RetryableError
from aigc_hub.messaging import embedded_schema as log_schema
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.observability.logging import configure_logging
from aigc_hub.pipeline import HandlerSpec
from aigc_hub.pipelines.avcc.adapters.base import Chain, Notarized
from aigc_hub.pipelines.avcc.chains import EvmChain, LogChain
from aigc_hub.pipelines.avcc.evm_tables import evm_anchors, evm_senders
from aigc_hub.pipelines.avcc.models import avcc_record_events, avcc_records
from aigc_hub.pipelines.avcc.notary import Notary
from aigc_hub.pipelines.avcc.settings import AvccSettings
from aigc_hub.pipelines.avcc.statements import Statement, statement_body
from aigc_hub.pipelines.avcc.translog import TransparencyLog
from aigc_hub.pipelines.avcc.translog_tables import avcc_log_heads, avcc_log_leaves
from aigc_hub.store import engine as store_engine
from aigc_hub.store import migrate
from aigc_hub.store.tables import metadata

#: A record's moves on the O path, in order; the split prints the time between neighbours.
MOVES = ("APPLIED", "APPROVED", "ANCHORING", "ANCHORED", "CODED")
#: avcc's consumer groups, in the order a work meets them.
AVCC_GROUPS = ("avcc-review", "avcc-code", "avcc-chain", "avcc-embed")
ROOT = Path(__file__).resolve().parent.parent


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0–100) of an ascending list (bench/py's)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def machine_load() -> str:
    """The 1/5/15-minute load averages and core count, printed beside the figures."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


def summary(ms: Sequence[float]) -> str:
    """p50 / p90 / p99 / max of a list of milliseconds (nearest rank), and its length."""
    ordered = sorted(ms)
    if not ordered:
        return "no samples"
    p = {q: percentile(ordered, q) for q in (50, 90, 99)}
    return (
        f"p50 {p[50]:7.0f}  p90 {p[90]:7.0f}  p99 {p[99]:7.0f}  max {ordered[-1]:7.0f} ms"
        f"  ({len(ordered)})"
    )


# --- part 1: application → code at a fixed arrival rate ---------------------------------------


@dataclass
class Arrivals:
    """What the load generator saw: each created record's due time, and the refusals."""

    due_ms: dict[int, float] = field(default_factory=dict)
    warmup_ids: set[int] = field(default_factory=set)
    late_ms: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


async def upload_and_apply(client: httpx.AsyncClient, png: bytes, key: str) -> httpx.Response:
    """What a tenant does: put the work in the hub's store (a signed upload, then the PUT),
    then apply for its code."""
    work = {
        "filename": "work.png",
        "content_type": "image/png",
        "size_bytes": len(png),
        "content_hash": sha(png),
    }
    signed = await client.post("/v1/avcc/works", json=work)
    if signed.status_code != 201:
        return signed
    upload = signed.json()["upload"]
    put = await client.put(upload["url"], content=png, headers=upload["headers"])
    if put.status_code >= 300:
        return put
    body = {
        "content_url": signed.json()["content_url"],
        "content_hash": sha(png),
        "ai_tool_info": {"model_name": "Stable-Diffusion-XL", "model_version": "v1.0"},
        "priority": 5,
    }
    return await client.post("/v1/avcc/applications", json=body, headers={"Idempotency-Key": key})


async def arrive_open_loop(
    clients: Sequence[httpx.AsyncClient], works: Sequence[bytes], rate: float, warmup: int
) -> Arrivals:
    """Arrival i (upload, then apply) starts at start + i/rate in a task of its own: a slow
    answer never delays the next arrival. Arrivals before ``warmup`` are marked warm-up."""
    seen, run = Arrivals(), secrets.token_hex(4)
    loop = asyncio.get_running_loop()
    start, start_epoch_ms = loop.time() + 0.05, time.time() * 1000 + 50

    async def one(i: int) -> None:
        due_ms = start_epoch_ms + i / rate * 1000
        seen.late_ms.append(time.time() * 1000 - due_ms)
        try:
            answer = await upload_and_apply(clients[i % len(clients)], works[i], f"{run}-{i}")
        except Exception as exc:  # counted and printed; one failed arrival ends nothing
            seen.errors[type(exc).__name__] += 1
            return
        if answer.status_code != 201:
            seen.errors[str(answer.status_code)] += 1
            return
        record_id = int(answer.json()["avcc_record_id"])
        seen.due_ms[record_id] = due_ms
        if i < warmup:
            seen.warmup_ids.add(record_id)

    running: set[asyncio.Task[None]] = set()
    for i in range(len(works)):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        task = asyncio.create_task(one(i))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    return seen


async def wait_settled(engine: AsyncEngine, ids: set[int], max_seconds: float) -> int:
    """Poll (bounded) until every record of ``ids`` is coded, rejected or waits for a human;
    how many are."""
    query = sa.select(sa.func.count()).where(
        avcc_records.c.id.in_(ids), avcc_records.c.status.in_(SETTLED)
    )
    deadline = time.monotonic() + max_seconds
    while True:
        async with engine.connect() as conn:
            done = int((await conn.execute(query)).scalar_one())
        if done >= len(ids) or time.monotonic() > deadline:
            return done
        await asyncio.sleep(0.2)


@dataclass
class Outcome:
    """The measured records as the database holds them."""

    statuses: collections.Counter[str]
    levels: collections.Counter[str]
    coded_ms: list[float]
    coded_ms_by_level: dict[str, list[float]]
    due_to_coded_ms: list[float]
    moves_ms: dict[tuple[str, str], list[float]]
    #: Reviews finished per second, first to last (the review's pace under this load).
    reviews_per_s: float


async def read_outcome(engine: AsyncEngine, seen: Arrivals, ids: set[int]) -> Outcome:
    """created_at → issued_at of every coded record, and the time between its moves."""
    async with engine.connect() as conn:
        records = (
            await conn.execute(
                sa.select(
                    avcc_records.c.id,
                    avcc_records.c.status,
                    avcc_records.c.final_level,
                    avcc_records.c.created_at,
                    avcc_records.c.issued_at,
                ).where(avcc_records.c.id.in_(ids))
            )
        ).all()
        moves = (
            await conn.execute(
                sa.select(
                    avcc_record_events.c.record_id,
                    avcc_record_events.c.to_status,
                    avcc_record_events.c.at,
                ).where(avcc_record_events.c.record_id.in_(ids))
            )
        ).all()
    first_at: dict[int, dict[str, int]] = collections.defaultdict(dict)
    for record_id, to_status, at in moves:
        first_at[int(record_id)].setdefault(str(to_status), int(at))
    coded = [r for r in records if r.issued_at is not None]
    split: dict[tuple[str, str], list[float]] = {}
    for earlier, later in itertools.pairwise(MOVES):
        split[(earlier, later)] = [
            float(at[later] - at[earlier])
            for r in coded
            if earlier in (at := first_at[int(r.id)]) and later in at
        ]
    by_level: dict[str, list[float]] = collections.defaultdict(list)
    for r in coded:
        by_level[str(r.final_level)].append(float(r.issued_at - r.created_at))
    reviewed = sorted(at["APPROVED"] for at in first_at.values() if "APPROVED" in at)
    span_s = (reviewed[-1] - reviewed[0]) / 1000 if len(reviewed) > 1 else 0.0
    return Outcome(
        statuses=collections.Counter(str(r.status) for r in records),
        levels=collections.Counter(str(r.final_level) for r in records),
        coded_ms=[float(r.issued_at - r.created_at) for r in coded],
        coded_ms_by_level=dict(sorted(by_level.items())),
        due_to_coded_ms=[float(r.issued_at) - seen.due_ms[int(r.id)] for r in coded],
        moves_ms=split,
        reviews_per_s=(len(reviewed) - 1) / span_s if span_s else 0.0,
    )


@contextlib.contextmanager
def profiling(report: Path | None) -> Iterator[None]:
    """Sample this process with pyinstrument for the block; a text report to ``report``."""
    if report is None:
        yield
        return
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("--profile needs pyinstrument: pip install -e '.[bench]'") from None
    # The hub and the load generator share one thread: sample it whole, not per coroutine.
    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    try:
        yield
    finally:
        profiler.stop()
        report.write_text(profiler.output_text(unicode=True, show_all=False))


# --- the consumer groups in `aigc-hub worker` processes (--workers) ----------------------------


def worker_layout(workers: int, spec: str) -> list[list[str]]:
    """The groups of each of ``workers`` processes: ``spec`` lists them per process, ';'
    between processes and ',' between groups, repeated in turn when there are more processes
    ("all" = every avcc group in each process, which then share the partitions)."""
    if workers <= 0:
        return []
    kinds = [
        list(AVCC_GROUPS) if part.strip() == "all" else [g.strip() for g in part.split(",")]
        for part in spec.split(";")
    ]
    layout = [kinds[i % len(kinds)] for i in range(workers)]
    unknown = {g for groups in layout for g in groups} - set(AVCC_GROUPS)
    missing = set(AVCC_GROUPS) - {g for groups in layout for g in groups}
    if unknown or missing:
        raise SystemExit(
            f"--worker-groups {spec!r} over {workers} processes: unknown {sorted(unknown)}, "
            f"run by none {sorted(missing)}; the groups are {', '.join(AVCC_GROUPS)}"
        )
    return layout


def worker_env(workdir: Path, db_url: str, duplicate_scope: str) -> dict[str, str]:
    """A worker's settings: the bench hub's database, log, data dir (the C2PA CA), the log's
    key and the blob folder, whose ``signing.key`` both sides read (``make_blobs``)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "AIGC_HUB_BROKER": "embedded",
        "AIGC_HUB_DATABASE_URL": db_url,
        "AIGC_HUB_LOG_PATH": str(workdir / "log.db"),
        "AIGC_HUB_DATA_DIR": str(workdir),
        "AIGC_HUB_BLOB_URL": f"file://{workdir / 'blobs'}",
        "AIGC_HUB_PIPELINES": "avcc",
        "AIGC_HUB_AVCC_LOG_KEY_PATH": str(workdir / "log-key.pem"),
        "AIGC_HUB_AVCC_DUPLICATE_SCOPE": duplicate_scope,
        "AIGC_HUB_LOG_LEVEL": "WARNING",
    }


async def members_owning_all(log_path: Path, spec: HandlerSpec) -> int:
    """Live members of ``spec``'s group if they own every partition of its topics, else 0."""
    t, p, gp = log_schema.topics, log_schema.partitions, log_schema.group_partitions
    tp_ids = sa.select(p.c.id).join(t, t.c.id == p.c.topic_id).where(t.c.name.in_(spec.topics))
    now_ms = int(time.time() * 1000)
    engine = store_engine.create_engine(f"sqlite:///{log_path}")
    try:
        async with engine.connect() as conn:
            total = (
                await conn.execute(sa.select(sa.func.count()).select_from(tp_ids.subquery()))
            ).scalar_one()
            owners = (
                await conn.execute(
                    sa.select(gp.c.owner).where(
                        gp.c.grp == spec.group,
                        gp.c.tp_id.in_(tp_ids),
                        gp.c.owner.is_not(None),
                        gp.c.lease_expires_ms > now_ms,
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    return len({o.owner for o in owners}) if len(owners) == total else 0


def process_cpu(pid: int) -> float:
    """CPU seconds of live process ``pid`` so far, its waited-for children (its tools)
    included: utime + stime + cutime + cstime of /proc/<pid>/stat (psutil's source)."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # after_name[0] is field 3 (state), so fields 14-17 are [11:15]
    return sum(int(f) for f in after_name[11:15]) / os.sysconf("SC_CLK_TCK")


def start_worker(groups: Sequence[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    """``aigc-hub worker --group …`` for ``groups``, its output appended to ``out``."""
    command = [sys.executable, "-m", "aigc_hub", "worker"]
    command += [arg for group in groups for arg in ("--group", group)]
    with out.open("ab") as sink:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=sink, stderr=sink)


@contextlib.asynccontextmanager
async def worker_processes(
    layout: Sequence[Sequence[str]],
    env: dict[str, str],
    specs: Sequence[HandlerSpec],
    workdir: Path,
    join_seconds: float = 60.0,
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """One ``aigc-hub worker`` process per entry of ``layout``, yielded once every group's
    members (one per process that runs it) own all its partitions between them,
    so no rebalance falls inside the measure; SIGTERMed at the end, killed after 30 s."""
    out = workdir / "workers.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs += [start_worker(groups, env, out) for groups in layout]
        log_path, deadline = workdir / "log.db", time.monotonic() + join_seconds
        for spec in (s for s in specs if s.group in AVCC_GROUPS):
            runners = sum(spec.group in groups for groups in layout)
            while await members_owning_all(log_path, spec) < runners:
                exited = [p.args for p in procs if p.poll() is not None]
                if exited or time.monotonic() > deadline:
                    tail = out.read_text(errors="replace")[-3000:]
                    why = f"exited: {exited}" if exited else f"not within {join_seconds:g} s"
                    raise SystemExit(f"{spec.group} did not join ({why}); workers' log:\n{tail}")
                await asyncio.sleep(0.1)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)


async def measure_latency(args: argparse.Namespace, workdir: Path) -> None:
    """Part 1: the hub (and its workers), the open-loop arrivals, the wait, the figures."""
    url = f"sqlite:///{workdir / 'hub.db'}"
    migrate.upgrade(url)
    broker = EmbeddedBroker(workdir / "log.db")
    warmup = int(args.warmup * args.rate)
    total = warmup + int(args.seconds * args.rate)
    works = [noise_png(seed) for seed in range(total)]  # made before the clock starts
    layout = worker_layout(args.workers, args.worker_groups)
    # The store as make_blobs builds it, so that worker processes sign and check with its key.
    blobs = LocalBlobStore(workdir / "blobs", secret=load_or_create_secret(workdir / "blobs"))
    async with (
        avcc_stack(
            url,
            broker,
            workdir,
            blobs=blobs,
            groups=[] if layout else None,
            duplicate_scope=args.duplicate_scope,
        ) as stack,
        worker_processes(
            layout,
            worker_env(workdir, url, args.duplicate_scope),
            stack.hub.handler_specs,
            workdir,
        ) as workers,
    ):
        keys = [await stack.tenant(f"bench-studio-{t}") for t in range(args.tenants)]
        clients = [stack.client(key) for key in keys]
        print(describe_latency(args, layout))
        print(f"  before: {machine_load()}")
        try:
            with profiling(args.profile):
                cpu0, tools0, wall0 = time.process_time(), children_cpu(), time.monotonic()
                workers0 = [process_cpu(w.pid) for w in workers]
                heads0 = await chain_transactions(stack.hub.engine, "log")
                seen = await arrive_open_loop(clients, works, args.rate, warmup)
                ids = set(seen.due_ms) - seen.warmup_ids
                settled = await wait_settled(stack.hub.engine, ids, args.max_wait)
                cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
                tools = children_cpu() - tools0
                in_workers = [
                    process_cpu(w.pid) - c0 for w, c0 in zip(workers, workers0, strict=True)
                ]
                heads = await chain_transactions(stack.hub.engine, "log") - heads0
        finally:
            for client in clients:
                await client.aclose()
        outcome = await read_outcome(stack.hub.engine, seen, ids)
    report_latency(args, seen, ids, settled, outcome)
    spent = [("this process", cpu), ("its tools (ffprobe, ffmpeg)", tools)]
    spent += [(f"worker {'+'.join(g)}", c) for g, c in zip(layout, in_workers, strict=True)]
    per_work_ms = sum(c for _, c in spent) / total * 1000
    print(
        f"  CPU over {wall:.1f} s, share of a core: "
        + ", ".join(f"{name} {c / wall:4.0%}" for name, c in spent)
        + f": {per_work_ms:.0f} ms per application, so {args.rate:g}/s needs "
        f"{per_work_ms * args.rate / 1000:.1f} cores; chain batches (signed heads) {heads} "
        f"for {total} works"
    )
    print(f"  after: {machine_load()}")
    if args.profile:
        print(f"  profile written to {args.profile} (this process only)")


def describe_latency(args: argparse.Namespace, layout: Sequence[Sequence[str]]) -> str:
    """The run's first line: the load, and which process runs what."""
    scope = "every" if args.duplicate_scope == "all" else "the tenant's"
    where = (
        "its API and consumer groups in this process"
        if not layout
        else "its API, relay and scanners in this process, the consumer groups in "
        f"{len(layout)} `aigc-hub worker` processes ("
        + " | ".join(",".join(g.removeprefix("avcc-") for g in groups) for groups in layout)
        + ")"
    )
    return (
        f"latency: {args.rate:g} applications/s open loop for {args.warmup:g} s warm-up + "
        f"{args.seconds:g} s, O-level works (noise PNGs, a known AI tool) from "
        f"{args.tenants} tenants; hub on embedded defaults (SQLite file, embedded log, "
        f"local blobs, chain=log), {where}; near-duplicates searched among {scope} coded works"
    )


def children_cpu() -> float:
    """CPU seconds of this process's finished children: the review's ffprobe and ffmpeg."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def report_latency(
    args: argparse.Namespace, seen: Arrivals, ids: set[int], settled: int, outcome: Outcome
) -> None:
    """Print what the arrivals and the database say."""
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(seen.errors.items())) or "none"
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(outcome.statuses.items()))
    levels = ", ".join(f"{k} {v}" for k, v in sorted(outcome.levels.items()))
    print(
        f"  measured {len(ids)} applications ({len(seen.warmup_ids)} warm-up not counted); "
        f"refused: {errors}; settled {settled} within {args.max_wait:g} s: {statuses}; "
        f"levels: {levels}"
    )
    late = sorted(seen.late_ms)
    print(
        f"  arrivals started late by p99 {percentile(late, 99):.0f} ms, max "
        f"{late[-1] if late else 0:.0f} ms (the generator shares the hub's event loop)"
    )
    print(f"  created → coded   {summary(outcome.coded_ms)}")
    for level, ms in outcome.coded_ms_by_level.items():
        print(f"    level {level}         {summary(ms)}")
    for (earlier, later), ms in outcome.moves_ms.items():
        print(f"    {earlier:>9} → {later:<9} {summary(ms)}")
    print(f"  reviews finished at {outcome.reviews_per_s:.1f}/s (first to last approval)")
    print(f"  due → coded       {summary(outcome.due_to_coded_ms)}  (upload + POST included)")
    p99 = percentile(sorted(outcome.coded_ms), 99)
    verdict = "reached" if outcome.coded_ms and p99 <= 2000 else "NOT reached"
    print(f"  aim p99 ≤ 2,000 ms (created → coded): {verdict}")


# --- part 2: anchoring throughput per chain implementation ------------------------------------


class CountedChain:
    """A ``Chain`` passing every call to ``inner``, remembering each notarize call's size."""

    def __init__(self, inner: Chain) -> None:
        self.inner = inner
        self.name = inner.name
        self.batch_sizes: list[int] = []

    async def notarize(self, statements: Sequence[Statement]) -> list[Notarized]:
        """The inner chain's notarize; the call's size is recorded first."""
        self.batch_sizes.append(len(statements))
        return await self.inner.notarize(statements)

    async def reconcile(self) -> int:
        """The inner chain's reconcile."""
        return await self.inner.reconcile()

    def public_key_pem(self) -> bytes:
        """The inner chain's public key."""
        return self.inner.public_key_pem()

    async def close(self) -> None:
        """Close the inner chain."""
        await self.inner.close()


@dataclass(frozen=True)
class AnchorRun:
    """One run: works notarized, seconds, chain transactions made, sizes of the calls."""

    chain: str
    mode: str
    works: int
    seconds: float
    transactions: int
    batch_sizes: list[int]
    #: Calls that failed with RetryableError (the node did not answer in time) and were redone.
    retried: int

    @property
    def works_per_s(self) -> float:
        return self.works / self.seconds

    @property
    def tx_per_s(self) -> float:
        return self.transactions / self.seconds


def statements(count: int, urgent: bool) -> list[Statement]:
    """``count`` distinct statements, as chain-svc receives them from code-svc."""
    made = []
    for i in range(1, count + 1):
        body = statement_body(
            record_id=i,
            chain_type="copyright_main",
            issuer="156.10005",
            content_hash=f"sha256:{i:064x}",
            report_hash=f"sha256:{i * 7:064x}",
            final_level="O" if urgent else "G",
            overall_score=100.0 if urgent else 80.0,
            model_name="Stable-Diffusion-XL",
            model_version="v1.0",
            reviewed_at_ms=1_750_000_000_000 + i,
        )
        made.append(Statement(i, "copyright_main", urgent, body.encode()))
    return made


async def fresh_engine(path: Path) -> AsyncEngine:
    """A new SQLite file with the log's and the anchors' tables, on the hub's engine."""
    engine = store_engine.create_engine(f"sqlite:///{path}")
    tables = [avcc_log_leaves, avcc_log_heads, evm_anchors, evm_senders]
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: metadata.create_all(sync, tables))
    return engine


async def chain_transactions(engine: AsyncEngine, chain: str) -> int:
    """Signed tree heads (log: the transaction) or EVM anchors the run made."""
    query = (
        sa.select(sa.func.count()).select_from(evm_anchors)
        if chain == "evm"
        else sa.select(sa.func.count()).where(avcc_log_heads.c.tree_size > 0)
    )
    async with engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def anchor_once(
    args: argparse.Namespace, chain_name: str, mode: str, db: Path, node: EvmNode | None
) -> AnchorRun:
    """Notarize ``--anchor-works`` statements (at most ``--anchor-seconds``) one way."""
    engine = await fresh_engine(db)
    log = LogChain(TransparencyLog(engine, Ed25519PrivateKey.generate()))
    inner: Chain = log
    if chain_name == "evm":
        from aigc_hub.pipelines.avcc.adapters.evm import EvmAnchorer

        assert node is not None
        inner = EvmChain(log, EvmAnchorer(engine, node.url, node.private_keys[0]), engine)
    chain = CountedChain(inner)
    settings = AvccSettings()
    notary = Notary(chain, settings.batch_window_ms / 1000, settings.batch_max)

    async def one_per_call(statement: Statement) -> Notarized:
        (place,) = await chain.notarize([statement])
        return place

    notarize: Callable[[Statement], Awaitable[Notarized]] = (
        notary.notarize if mode == "batched" else one_per_call
    )

    todo = iter(statements(args.anchor_works, urgent=args.level == "O"))
    done = retried = 0
    deadline = time.monotonic() + args.anchor_seconds

    async def submitter() -> None:
        nonlocal done, retried
        for statement in todo:
            while time.monotonic() < deadline:
                try:
                    await notarize(statement)
                except RetryableError:  # the node too slow to answer: again, as the hub does
                    retried += 1
                    continue
                done += 1
                break

    try:
        started = time.monotonic()
        await asyncio.gather(*(submitter() for _ in range(args.submitters)))
        seconds = time.monotonic() - started
        made = await chain_transactions(engine, chain_name)
    finally:
        await notary.close()
        await chain.close()
        await engine.dispose()
    return AnchorRun(chain_name, mode, done, seconds, made, chain.batch_sizes, retried)


def print_run(run: AnchorRun, round_no: int) -> None:
    sizes = run.batch_sizes or [0]
    print(
        f"  round {round_no} {run.chain:>3} {run.mode:<8} {run.works:5d} works in "
        f"{run.seconds:6.1f} s: {run.works_per_s:8.1f} works/s, {run.transactions:5d} chain "
        f"transactions ({run.tx_per_s:7.1f}/s); works per notarize call min {min(sizes)} "
        f"median {statistics.median(sizes):g} max {max(sizes)}; retried {run.retried}"
    )


async def measure_anchoring(args: argparse.Namespace, workdir: Path) -> None:
    """Part 2: batched and per-work in alternating rounds on each chain; medians last."""
    print(
        f"anchoring: {args.anchor_works} {args.level}-level statements per run (at most "
        f"{args.anchor_seconds:g} s), {args.submitters} concurrent submitters, a fresh SQLite "
        f"file per run; batched = chain-svc's Notary, per work = one notarize call per "
        f"statement; {args.rounds} alternating rounds"
    )
    print(f"  before: {machine_load()}")
    runs: list[AnchorRun] = []
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_node()) if "evm" in args.chains else None
        for round_no in range(1, args.rounds + 1):
            for chain_name in args.chains:
                for mode in ("batched", "per-work"):
                    db = workdir / f"anchor-{round_no}-{chain_name}-{mode}.db"
                    run = await anchor_once(args, chain_name, mode, db, node)
                    print_run(run, round_no)
                    runs.append(run)
    print("  median over the rounds:")
    for chain_name in args.chains:
        medians = {}
        for mode in ("batched", "per-work"):
            mine = [r for r in runs if r.chain == chain_name and r.mode == mode]
            medians[mode] = statistics.median(r.works_per_s for r in mine)
            tx = statistics.median(r.tx_per_s for r in mine)
            print(
                f"    {chain_name:>3} {mode:<8} {medians[mode]:8.1f} works/s  {tx:7.1f} chain tx/s"
            )
        ratio = medians["batched"] / medians["per-work"]
        print(f"    {chain_name:>3} batched / per work: {ratio:.1f}×")
    print(f"  after: {machine_load()}")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--part", choices=["latency", "anchoring", "both"], default="both")
    ap.add_argument("--rate", type=float, default=20.0, help="applications/s (latency)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured arrivals, seconds")
    ap.add_argument("--warmup", type=float, default=5.0, help="arrivals not counted, seconds")
    ap.add_argument("--tenants", type=int, default=4, help="tenants the arrivals rotate over")
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="latency: run avcc's consumer groups in this many `aigc-hub worker` processes "
        "instead of this one (0: everything in this process)",
    )
    ap.add_argument(
        "--worker-groups",
        default="all",
        help="with --workers: each process's groups, ';' between processes, ',' between groups, "
        "repeated in turn (e.g. 'avcc-review;avcc-code,avcc-chain,avcc-embed'); 'all' = every "
        "avcc group in each process",
    )
    ap.add_argument(
        "--duplicate-scope",
        choices=["all", "tenant"],
        default="all",
        help="AIGC_HUB_AVCC_DUPLICATE_SCOPE (default all, the hub's): with tenant and many "
        "--tenants each work is compared with few others, so noise works stay O",
    )
    ap.add_argument(
        "--max-wait", type=float, default=120.0, help="after the arrivals, wait this long at most"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="latency: sample the process with pyinstrument, text report here",
    )
    ap.add_argument("--anchor-works", type=int, default=2000, help="statements per run")
    ap.add_argument("--anchor-seconds", type=float, default=60.0, help="a run stops after")
    ap.add_argument("--submitters", type=int, default=64, help="concurrent notarize callers")
    ap.add_argument("--rounds", type=int, default=2, help="batched / per-work pairs per chain")
    ap.add_argument(
        "--chains",
        type=lambda s: s.split(","),
        default=["log", "evm"],
        help="comma-separated: log,evm",
    )
    ap.add_argument(
        "--level",
        choices=["O", "G"],
        default="O",
        help="anchoring: O statements leave at once, G ones wait for the batch window",
    )
    args = ap.parse_args()
    if not set(args.chains) <= {"log", "evm"}:
        ap.error("--chains takes log, evm or both")
    return args


async def main(args: argparse.Namespace) -> None:
    # The hub logs every review at INFO; the figures are what this script prints.
    configure_logging("WARNING", json=False)
    workdir = Path(tempfile.mkdtemp(prefix="aigc-bench-avcc-"))
    if args.part in ("latency", "both"):
        (workdir / "latency").mkdir()
        await measure_latency(args, workdir / "latency")
    if args.part in ("anchoring", "both"):
        await measure_anchoring(args, workdir)
    print(f"files under {workdir}")


if __name__ == "__main__":
    asyncio.run(main(parse()))
