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
import resource
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import huey
from huey import SqliteHuey

BUSY_TIMEOUT_S = 30.0  # as aigc_hub.store.engine.SQLITE_BUSY_TIMEOUT_MS
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bench_tasks (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_effects"
    " (task_id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)",
)


class FactsDb:
    """The application's own SQLite file (facts and effects): one connection per thread."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # Autocommit mode: transactions are begun explicitly, as our engine does.
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            # Same settings as aigc_hub.store.engine for SQLite.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def count_effects(self) -> int:
        return int(self.conn().execute("SELECT count(*) FROM bench_effects").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


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
        facts.conn().execute(
            "INSERT OR IGNORE INTO bench_effects (task_id, applied_at) VALUES (?, ?)",
            (task_id, time.time_ns()),
        )

    return apply_task


def enqueue_one(facts: FactsDb, apply_task: Callable[..., Any], i: int, run: str) -> None:
    """The service call, written the natural Huey way.

    Unlike our outbox, Huey's enqueue is NOT atomic with the fact write: the fact commits in
    the application's database, then the task is written to Huey's own storage in a separate
    transaction, so a crash in between loses the task (or, enqueued first, runs it on a fact
    that never committed).
    """
    task_id = f"{run}-{i:08d}"
    body = ("task " + task_id + " ") * 8
    conn = facts.conn()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO bench_tasks (id, body) VALUES (?, ?)", (task_id, body))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
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
    for ddl in SCHEMA:
        facts.conn().execute(ddl)
    h = make_huey(workdir / "huey.db", sync)
    apply_task = register_task(h, facts)
    print(
        f"profile: huey {huey.__version__} SqliteHuey (WAL, synchronous={sync}) + app SQLite "
        f"file; {n} tasks, {args.workers} thread workers, {args.callers} callers"
    )
    status = 0
    try:
        # 1. enqueue throughput: service calls from a few concurrent callers, consumer stopped
        t0 = time.perf_counter()
        if args.callers == 1:
            for i in range(n):
                enqueue_one(facts, apply_task, i, "drain")
        else:
            with ThreadPoolExecutor(args.callers, thread_name_prefix="caller") as pool:
                for f in [
                    pool.submit(enqueue_one, facts, apply_task, i, "drain") for i in range(n)
                ]:
                    f.result()
        enqueue_s = time.perf_counter() - t0
        print(
            f"enqueue:    {n / enqueue_s:9.0f} service calls/s  ({n} in {enqueue_s:.2f} s, "
            f"{args.callers} callers, {h.pending_count()} queued)"
        )

        # 2. drain: consumer from a standing start until every effect is committed
        t1 = time.perf_counter()
        deadline = t1 + args.max_seconds
        with running_consumer(h, args.workers, shutdown_timeout=10.0):
            while (done := facts.count_effects()) < n:
                if time.perf_counter() > deadline:
                    print(f"drain did not finish in time ({done}/{n})", file=sys.stderr)
                    status = 1
                    break
                time.sleep(0.05)
            drain_s = time.perf_counter() - t1
        print(
            f"drain:      {n / drain_s:9.0f} tasks/s end to end  ({done} in {drain_s:.2f} s, "
            f"{args.workers} thread workers)"
        )
    finally:
        h.storage.close()
        facts.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS:   {peak:9.0f} MiB")
    return status


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tasks", type=int, default=20_000, help="tasks for the drain phase")
    ap.add_argument("--workers", type=int, default=4, help="Huey thread workers")
    ap.add_argument("--callers", type=int, default=8, help="concurrent service callers (threads)")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="give up draining after")
    ap.add_argument(
        "--synchronous",
        choices=["normal", "full"],
        default="normal",
        help="SQLite synchronous level for both files (our engine uses NORMAL)",
    )
    return ap.parse_args()


if __name__ == "__main__":
    sys.exit(main(parse()))
