"""Baseline: the round trip of bench/roundtrip.py done with Dramatiq on its Redis broker.

Same work per task as bench/baseline_huey.py: a service call commits a fact row in the
application's own SQLite file, then enqueues a ~300-byte message; a worker does one idempotent
insert into the same file. Same phases (enqueue with workers stopped, drain from a standing
start, peak RSS) and the same printed lines, so one parser reads both. The worker runs in this
process (``dramatiq.Worker`` with thread workers), as Huey's consumer does in its baseline.

Redis is 127.0.0.1:6379, database 11 by default. Every key of a run lives under a namespace of
its own, deleted before exit, so other users of that Redis are left alone. Every phase is
bounded in count and time.

    python bench/baseline_dramatiq.py                  # 20,000 tasks, 8 worker threads
    python bench/baseline_dramatiq.py --workers 16 --redis-url redis://127.0.0.1:6379/11
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dramatiq
import sqlite_app
from dramatiq.brokers.redis import RedisBroker
from sqlite_app import FactsDb

QUEUE = "bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
SHUTDOWN_TIMEOUT_MS = 10_000

ApplyTask = dramatiq.Actor[[str, str, int], None]


def register_actor(broker: RedisBroker, facts: FactsDb) -> ApplyTask:
    """The handler as a Dramatiq actor on ``broker`` (library defaults: retries, time limit)."""

    @dramatiq.actor(broker=broker, queue_name=QUEUE)
    def apply_task(task_id: str, body: str, sent_ns: int) -> None:
        """The handler: one idempotent insert."""
        sqlite_app.apply_effect(facts, task_id)

    return apply_task


def enqueue_one(facts: FactsDb, apply_task: ApplyTask, i: int, run: str) -> None:
    """The service call, written the natural Dramatiq way.

    As with Huey, the enqueue is NOT atomic with the fact write: the fact commits in SQLite,
    then the message goes to Redis, so a crash in between loses the task. Redis acknowledges
    from memory; whether the message survives a Redis crash depends on its AOF setting,
    printed on the profile line.
    """
    task_id, body = sqlite_app.task_fields(i, run)
    sqlite_app.write_fact(facts, task_id, body)
    apply_task.send(task_id, body[:220], time.time_ns())


@contextmanager
def running_worker(broker: RedisBroker, threads: int) -> Iterator[None]:
    """Dramatiq's worker with ``threads`` worker threads in this process; stopped on exit."""
    worker = dramatiq.Worker(broker, worker_threads=threads)
    worker.start()
    try:
        yield
    finally:
        worker.stop(timeout=SHUTDOWN_TIMEOUT_MS)  # joins its threads, bounded


def delete_namespace(broker: RedisBroker) -> None:
    """Delete every key of this run (queues, messages, acks, heartbeats)."""
    client: Any = broker.client
    keys = list(client.scan_iter(match=f"{broker.namespace}:*", count=1000))
    if keys:
        client.delete(*keys)


def describe_redis(broker: RedisBroker) -> str:
    """Redis's version and whether it logs writes to disk (AOF), for the profile line."""
    client: Any = broker.client
    server, persistence = client.info("server"), client.info("persistence")
    return f"Redis {server['redis_version']}, aof_enabled={persistence['aof_enabled']}"


def main(args: argparse.Namespace) -> int:
    namespace = f"aigc-bench-dramatiq-{uuid.uuid4().hex[:8]}"
    broker = RedisBroker(url=args.redis_url, namespace=namespace)
    try:
        with tempfile.TemporaryDirectory(prefix="aigc-bench-dramatiq-") as tmp:
            return run(args, broker, Path(tmp))
    finally:
        delete_namespace(broker)
        broker.close()


def run(args: argparse.Namespace, broker: RedisBroker, workdir: Path) -> int:
    """Both phases on a fresh SQLite file in ``workdir`` and a fresh namespace in Redis."""
    n, sync = args.tasks, args.synchronous.upper()
    facts = FactsDb(workdir / "facts.db", sync)
    facts.create_schema()
    apply_task = register_actor(broker, facts)
    print(
        f"profile: dramatiq {dramatiq.__version__} RedisBroker ({describe_redis(broker)}) + "
        f"app SQLite file (WAL, synchronous={sync}); {n} tasks, {args.workers} thread workers, "
        f"{args.callers} callers"
    )
    try:
        # 1. enqueue throughput: service calls from a few concurrent callers, workers stopped
        enqueue_s = sqlite_app.call_concurrently(
            n, args.callers, lambda i: enqueue_one(facts, apply_task, i, "drain")
        )
        queued = int(broker.do_qsize(QUEUE))
        sqlite_app.print_enqueue(n, enqueue_s, args.callers, queued)

        # 2. drain: workers from a standing start until every effect is committed
        t1 = time.perf_counter()
        with running_worker(broker, args.workers):
            done = sqlite_app.wait_for_effects(facts, n, t1, args.max_seconds)
            drain_s = time.perf_counter() - t1
        sqlite_app.print_drain(n, done, drain_s, args.workers)
    finally:
        facts.close()
    sqlite_app.print_peak_rss()
    return 0 if done >= n else 1


def parse() -> argparse.Namespace:
    ap = sqlite_app.baseline_arguments(
        __doc__ or "",
        # Dramatiq's own default (`dramatiq --threads`): its consumer prefetches twice the
        # worker threads and backs off while that many are in flight, so fewer drain slower.
        workers=8,
        workers_help="Dramatiq worker threads",
        synchronous_help="SQLite synchronous level for the application file (our engine: NORMAL)",
    )
    ap.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help=f"default: {DEFAULT_REDIS_URL}")
    return ap.parse_args()


if __name__ == "__main__":
    sys.exit(main(parse()))
