"""Round trip: service call (fact + outbox row in one transaction) → relay → broker → handler.

Prints enqueue throughput, end-to-end drain throughput, enqueue→effect latency at a fixed
rate, and peak RSS. Every phase is bounded in count and time; only loopback/local files.

    python bench/roundtrip.py                      # embedded defaults: SQLite + embedded log
    python bench/roundtrip.py --database-url postgresql://postgres@127.0.0.1/test
    python bench/roundtrip.py --profile scale      # Kafka (Tansu, or --kafka) + PostgreSQL,
                                                   # then the hand-written confluent-kafka baseline
                                                   # (batched; --baseline per-message|none)
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.embedded import EmbeddedBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next
from aigc_hub.store import engine as store_engine

TOPIC = "bench.tasks"
EVENT = "bench.task.enqueued"

bench_metadata = sa.MetaData()
tasks = sa.Table(
    "bench_tasks",
    bench_metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)
effects = sa.Table(
    "bench_effects",
    bench_metadata,
    sa.Column("task_id", sa.String(36), primary_key=True),
    sa.Column("applied_at", sa.BigInteger, nullable=False),
)


class TaskEnqueued(pydantic.BaseModel):
    """The bench task: about 300 bytes of payload."""

    task_id: str
    body: str
    sent_ns: int


def make_pipeline(partitions: int) -> Pipeline:
    """One topic, one handler doing one idempotent insert."""
    p = Pipeline("bench")
    p.topic(TopicSpec(TOPIC, partitions, 86_400_000, pipeline="bench"))
    p.event(EVENT, 1, topic=TOPIC)(TaskEnqueued)

    @p.handler("bench-workers", [TOPIC])
    async def apply_task(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        payload = ctx.payload_as(TaskEnqueued)
        ctx.insert(
            effects, ignore_conflict=True, task_id=payload.task_id, applied_at=time.time_ns()
        )
        return []

    return p


class LatencyProbe:
    """Middleware recording enqueue→effect-committed latency (the chain includes the commit)."""

    def __init__(self) -> None:
        self.samples_ms: list[float] = []
        self.recording = False

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        result = await call_next(envelope, ctx)
        if self.recording and ctx.outcome is HandlingOutcome.APPLIED:
            sent = int(envelope.payload["sent_ns"])
            self.samples_ms.append((time.time_ns() - sent) / 1e6)
        return result


async def enqueue_one(hub: Hub, i: int, run: str) -> None:
    """The service call: a fact row and its outbox row in one transaction (shared with the
    calls that arrive while the previous group commits)."""
    task_id = f"{run}-{i:08d}"
    body = ("task " + task_id + " ") * 8
    env = Envelope.new(
        EVENT,
        {"task_id": task_id, "body": body[:220], "sent_ns": time.time_ns()},
        key=task_id,
        source="bench",
    )

    async def work(conn: AsyncConnection) -> None:
        # Parameters at execute time: the INSERT is compiled once, as an application's is.
        await conn.execute(tasks.insert(), {"id": task_id, "body": body})
        await hub.outbox.add(conn, [env])

    # Concurrent calls share a commit (Hub.service_call); each returns once it is durable.
    await hub.service_call(work)


async def count_effects(hub: Hub) -> int:
    async with hub.engine.connect() as conn:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(effects))).scalar_one()
        )


async def main(
    args: argparse.Namespace, broker_factory: Callable[[Path], Broker] | None = None
) -> float:
    """Run the phases; returns the drain throughput (tasks/s)."""
    workdir = Path(tempfile.mkdtemp(prefix="aigc-bench-"))
    url = args.database_url or f"sqlite:///{workdir / 'hub.db'}"
    # Migrate in a child process, as a deployment does (`aigc-hub db upgrade`), so the peak
    # RSS printed is the hub's and not the migration's (which imports installed pipelines).
    migration = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"from aigc_hub.store import migrate; migrate.upgrade({url!r})"
    )
    if await migration.wait() != 0:
        raise SystemExit("error: the migration failed; see its output above")
    engine = store_engine.create_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(bench_metadata.drop_all)
        await conn.run_sync(bench_metadata.create_all)
    probe = LatencyProbe()
    broker = broker_factory(workdir) if broker_factory else EmbeddedBroker(workdir / "log.db")
    config = HubConfig(
        engine=engine, broker=broker, concurrency=args.concurrency, middleware=[probe]
    )
    hub = Hub(config, [make_pipeline(args.partitions)])
    await hub.start()
    n = args.tasks
    print(
        f"profile: {'SQLite' if url.startswith('sqlite') else 'PostgreSQL'} + "
        f"{'Kafka' if broker_factory else 'embedded log'}; "
        f"{n} tasks, concurrency {args.concurrency}, {args.partitions} partitions"
    )

    # 1. enqueue throughput: service calls from a few concurrent callers, consumers stopped
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(args.callers)

    async def call(i: int) -> None:
        async with sem:
            await enqueue_one(hub, i, "drain")

    await asyncio.gather(*(call(i) for i in range(n)))
    enqueue_s = time.perf_counter() - t0
    print(
        f"enqueue:    {n / enqueue_s:9.0f} service calls/s  ({n} in {enqueue_s:.2f} s, "
        f"{args.callers} callers)"
    )

    # 2. drain: relay + consumer from a standing start until every effect is committed
    stop = asyncio.Event()
    t1 = time.perf_counter()
    runner = asyncio.create_task(hub.run(stop))
    deadline = t1 + args.max_seconds
    while await count_effects(hub) < n:
        if time.perf_counter() > deadline:
            print("drain did not finish in time", file=sys.stderr)
            break
        await asyncio.sleep(0.05)
    drain_s = time.perf_counter() - t1
    print(
        f"drain:      {n / drain_s:9.0f} tasks/s end to end  ({n} in {drain_s:.2f} s, "
        f"{hub.committer.commits} group commits)"
    )
    stop.set()
    await runner
    consume_rate = 0.0
    if args.split:
        # The same work again, phase by phase: relay alone, then consumers alone (records
        # already in the broker, as in a hand-written pipeline whose producer ran first).
        await asyncio.gather(*(call(n + i) for i in range(n)))
        t2 = time.perf_counter()
        relayed = sum([await r.drain() for r in hub.relays()])
        relay_s = time.perf_counter() - t2
        rate = relayed / relay_s
        print(f"relay only: {rate:9.0f} events/s published ({relayed} in {relay_s:.2f} s)")
        stop = asyncio.Event()
        t3 = time.perf_counter()
        runner = asyncio.create_task(hub.run(stop, relay=False))
        while await count_effects(hub) < 2 * n and time.perf_counter() - t3 < args.max_seconds:
            await asyncio.sleep(0.05)
        consume_s = time.perf_counter() - t3
        consume_rate = n / consume_s
        print(f"consume only: {consume_rate:7.0f} tasks/s  ({n} in {consume_s:.2f} s)")
        stop.set()
        await runner
    stop = asyncio.Event()
    runner = asyncio.create_task(hub.run(stop))

    # 3. latency at a fixed rate while everything runs
    probe.recording = True
    rate, seconds = args.rate, args.seconds
    start = time.perf_counter()
    sent = 0
    pending: set[asyncio.Task[None]] = set()
    while (elapsed := time.perf_counter() - start) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            t = asyncio.create_task(enqueue_one(hub, sent, "rate"))
            pending.add(t)
            t.add_done_callback(pending.discard)
            sent += 1
        await asyncio.sleep(0.002)
    await asyncio.gather(*pending)
    target = (2 * n if args.split else n) + sent
    deadline = time.perf_counter() + 30
    while await count_effects(hub) < target and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    probe.recording = False
    samples = sorted(probe.samples_ms)
    effects_done = await count_effects(hub)
    if effects_done < target or not samples:  # a figure from a broken run would mislead
        raise SystemExit(
            f"error: the latency phase made {effects_done} of {target} effects and "
            f"{len(samples)} samples; see the log above"
        )
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(
        f"latency:    p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   enqueue→effect at {rate}/s "
        f"for {seconds:g} s ({len(samples)} samples)"
    )
    stop.set()
    await runner
    await hub.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS:   {peak:9.0f} MiB")
    return consume_rate or n / drain_s


def run_scale(args: argparse.Namespace) -> None:
    """Kafka + PostgreSQL: our hub, then the hand-written pipeline, on the same cluster."""
    import contextlib

    import handwritten_kafka

    from aigc_hub.messaging.kafka import KafkaBroker
    from aigc_hub.testing import tansu

    args.database_url = args.database_url or "postgresql://postgres@127.0.0.1:5432/test"
    args.split = True
    with contextlib.ExitStack() as stack:
        if args.kafka:
            endpoint = tansu.KafkaEndpoint(args.kafka, tansu.KAFKA_CONSUMER_SETTINGS, {})
        else:
            endpoint = stack.enter_context(tansu.kafka_for_tests())
        options = endpoint.broker_options(max_buffered=args.kafka_buffer)
        ours = asyncio.run(main(args, lambda _: KafkaBroker(endpoint.bootstrap, **options)))
        if args.baseline == "none":
            return
        base = handwritten_kafka.run(
            endpoint.bootstrap,
            args.database_url,
            n=args.tasks,
            consumer_config=dict(endpoint.consumer_settings),
            max_seconds=args.max_seconds,
            batch=handwritten_kafka.DEFAULT_BATCH if args.baseline == "batched" else None,
        )
        print(
            f"hand-written confluent-kafka + psycopg ({base.describe()}): "
            f"drain {base.drained_per_s:9.0f} tasks/s ({base.n} tasks)"
        )
        print(
            f"ratio:      {ours / base.drained_per_s:9.2f}× the hand-written drain (consume "
            f"only, records already in Kafka, on both sides), with exactly-once effects"
        )


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tasks", type=int, default=20_000, help="tasks for the drain phase")
    ap.add_argument("--rate", type=int, default=500, help="tasks/s for the latency phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    ap.add_argument("--concurrency", type=int, default=4, help="handlers in flight")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--callers", type=int, default=8, help="concurrent service callers")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="give up draining after")
    ap.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    ap.add_argument(
        "--profile",
        choices=["embedded", "scale"],
        default="embedded",
        help="scale: Kafka + PostgreSQL, plus the hand-written baseline",
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="also time relay and consumers apart (always on with --profile scale)",
    )
    ap.add_argument(
        "--kafka-buffer",
        type=int,
        default=10_000,
        help="scale: records a Kafka consumer buffers before pausing its partitions",
    )
    ap.add_argument(
        "--kafka",
        default=None,
        help="scale: bootstrap of an existing cluster "
        "(default: start Tansu from the dev extra on loopback)",
    )
    ap.add_argument(
        "--baseline",
        choices=["batched", "per-message", "none"],
        default="batched",
        help="scale: the hand-written consumer run after ours (bench/handwritten_kafka.py)",
    )
    return ap.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.profile == "scale":
        run_scale(arguments)
    else:
        asyncio.run(main(arguments))
