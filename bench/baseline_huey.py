"""Baseline: the round trip of bench/roundtrip.py done with Huey on SQLite (``SqliteHuey``).

Same work per task: a service call writes a fact row and enqueues a ~300-byte task; a worker
does one idempotent insert. Prints enqueue throughput, end-to-end drain throughput and peak
RSS in roundtrip.py's format, so the benchmark doc can quote a ratio measured on one machine.
The consumer runs in-process (thread workers); every phase is bounded; only local files.

    python bench/baseline_huey.py                  # 20,000 tasks, 4 thread workers
    python bench/baseline_huey.py --workers 8
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import huey
import sqlite_app
from huey import SqliteHuey
from sqlite_app import BUSY_TIMEOUT_S, FactsDb


def make_huey(path: Path, synchronous: str) -> SqliteHuey:
    """A SqliteHuey with library defaults (WAL, results on), durability set like our engine."""
    h = SqliteHuey("bench", filename=str(path), timeout=BUSY_TIMEOUT_S)
    # SqliteHuey's `fsync` option only picks FULL or OFF; set the same level as our engine on
    # its connection (Huey shares one locked connection per process across thread workers).
    h.storage.conn.execute(f"PRAGMA synchronous={synchronous}")
    return h


def register_task(h: SqliteHuey, facts: FactsDb) -> Callable[..., Any]:
    @h.task()
    def apply_task(task_id: str, body: str, sent_ns: int) -> None:
        """The handler: one idempotent insert."""
        sqlite_app.apply_effect(facts, task_id)

    return apply_task


def enqueue_one(facts: FactsDb, apply_task: Callable[..., Any], i: int, run: str) -> None:
    """The service call, written the natural Huey way.

    Unlike our outbox, Huey's enqueue is NOT atomic with the fact write: the fact commits in
    the application's database, then the task is written to Huey's own storage in a separate
    transaction, so a crash in between loses the task (or, enqueued first, runs it on a fact
    that never committed).
    """
    task_id, body = sqlite_app.task_fields(i, run)
    sqlite_app.write_fact(facts, task_id, body)
    apply_task(task_id, body[:220], time.time_ns())


@contextmanager
def running_consumer(h: SqliteHuey, workers: int, shutdown_timeout: float) -> Iterator[None]:
    """Huey's consumer with thread workers in this process; stopped (bounded) on exit."""
    consumer = h.create_consumer(
        workers=workers, worker_type="thread", shutdown_timeout=shutdown_timeout
    )
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    consumer.start()  # starts the scheduler and worker threads; returns at once
    # start() installs handlers meant for consumer.run()'s loop, which we do not run: restore
    # ours so Ctrl-C still interrupts the polling below.
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    try:
        yield
    finally:
        consumer.stop(graceful=True)  # joins workers, at most shutdown_timeout seconds


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="aigc-bench-huey-") as tmp:
        return run(args, Path(tmp))


def run(args: argparse.Namespace, workdir: Path) -> int:
    """Both phases on fresh files in ``workdir`` (removed afterwards by main)."""
    n, sync = args.tasks, args.synchronous.upper()
    facts = FactsDb(workdir / "facts.db", sync)
    facts.create_schema()
    h = make_huey(workdir / "huey.db", sync)
    apply_task = register_task(h, facts)
    print(
        f"profile: huey {huey.__version__} SqliteHuey (WAL, synchronous={sync}) + app SQLite "
        f"file; {n} tasks, {args.workers} thread workers, {args.callers} callers"
    )
    try:
        # 1. enqueue throughput: service calls from a few concurrent callers, consumer stopped
        enqueue_s = sqlite_app.call_concurrently(
            n, args.callers, lambda i: enqueue_one(facts, apply_task, i, "drain")
        )
        sqlite_app.print_enqueue(n, enqueue_s, args.callers, h.pending_count())

        # 2. drain: consumer from a standing start until every effect is committed
        t1 = time.perf_counter()
        with running_consumer(h, args.workers, shutdown_timeout=10.0):
            done = sqlite_app.wait_for_effects(facts, n, t1, args.max_seconds)
            drain_s = time.perf_counter() - t1
        sqlite_app.print_drain(n, done, drain_s, args.workers)
    finally:
        h.storage.close()
        facts.close()
    sqlite_app.print_peak_rss()
    return 0 if done >= n else 1


def parse() -> argparse.Namespace:
    ap = sqlite_app.baseline_arguments(
        __doc__ or "",
        workers=4,
        workers_help="Huey thread workers",
        synchronous_help="SQLite synchronous level for both files (our engine uses NORMAL)",
    )
    return ap.parse_args()


if __name__ == "__main__":
    sys.exit(main(parse()))
