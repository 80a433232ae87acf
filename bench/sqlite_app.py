"""The application side shared by the queue baselines (baseline_huey.py, baseline_dramatiq.py).

Both redo bench/roundtrip.py's work with another task queue: a service call commits a fact row
in the application's own SQLite file, then enqueues a ~300-byte task; the task does one
idempotent insert into the same file. The phases' loops and printed lines live here so every
baseline prints the same lines as roundtrip.py and bench/compare.py reads them with one parser.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BUSY_TIMEOUT_S = 30.0  # as aigc_hub.store.engine.SQLITE_BUSY_TIMEOUT_MS
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS bench_tasks (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_effects"
    " (task_id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)",
)
POLL_S = 0.05


class FactsDb:
    """The application's own SQLite file (facts and effects): one connection per thread."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
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

    def create_schema(self) -> None:
        """The facts and effects tables, as roundtrip.py's bench tables."""
        for ddl in SCHEMA:
            self.conn().execute(ddl)

    def count_effects(self) -> int:
        """Effects committed so far, by any thread."""
        return int(self.conn().execute("SELECT count(*) FROM bench_effects").fetchone()[0])

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def task_fields(i: int, run: str) -> tuple[str, str]:
    """The ``i``-th task's id and body, as roundtrip.py builds them."""
    task_id = f"{run}-{i:08d}"
    return task_id, ("task " + task_id + " ") * 8


def write_fact(facts: FactsDb, task_id: str, body: str) -> None:
    """The service call's own transaction: one fact row, committed before any enqueue."""
    conn = facts.conn()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO bench_tasks (id, body) VALUES (?, ?)", (task_id, body))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def apply_effect(facts: FactsDb, task_id: str) -> None:
    """The task's work: one idempotent insert (a replay changes nothing)."""
    facts.conn().execute(
        "INSERT OR IGNORE INTO bench_effects (task_id, applied_at) VALUES (?, ?)",
        (task_id, time.time_ns()),
    )


def call_concurrently(n: int, callers: int, call: Callable[[int], None]) -> float:
    """``call(0)`` … ``call(n - 1)`` from ``callers`` threads; the seconds it took."""
    started = time.perf_counter()
    if callers == 1:
        for i in range(n):
            call(i)
    else:
        with ThreadPoolExecutor(callers, thread_name_prefix="caller") as pool:
            for f in [pool.submit(call, i) for i in range(n)]:
                f.result()
    return time.perf_counter() - started


def wait_for_effects(facts: FactsDb, n: int, started: float, max_seconds: float) -> int:
    """Poll until ``n`` effects are committed or ``max_seconds`` after ``started``; the count."""
    deadline = started + max_seconds
    while (done := facts.count_effects()) < n:
        if time.perf_counter() > deadline:
            print(f"drain did not finish in time ({done}/{n})", file=sys.stderr)
            break
        time.sleep(POLL_S)
    return done


def print_enqueue(n: int, seconds: float, callers: int, queued: int) -> None:
    """The enqueue line, in roundtrip.py's format."""
    print(
        f"enqueue:    {n / seconds:9.0f} service calls/s  ({n} in {seconds:.2f} s, "
        f"{callers} callers, {queued} queued)"
    )


def print_drain(n: int, done: int, seconds: float, workers: int) -> None:
    """The drain line, in roundtrip.py's format."""
    print(
        f"drain:      {n / seconds:9.0f} tasks/s end to end  ({done} in {seconds:.2f} s, "
        f"{workers} thread workers)"
    )


def print_peak_rss() -> None:
    """The process's peak resident set, in roundtrip.py's format."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS:   {peak:9.0f} MiB")


def baseline_arguments(
    description: str, *, workers: int, workers_help: str, synchronous_help: str
) -> argparse.ArgumentParser:
    """The options every SQLite-app baseline takes; a script adds its own after."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tasks", type=int, default=20_000, help="tasks for the drain phase")
    ap.add_argument("--workers", type=int, default=workers, help=workers_help)
    ap.add_argument("--callers", type=int, default=8, help="concurrent service callers (threads)")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="give up draining after")
    ap.add_argument(
        "--synchronous", choices=["normal", "full"], default="normal", help=synchronous_help
    )
    return ap
