"""The analytics store in DuckDB, embedded in the process (the default).

One process writes a DuckDB file (DuckDB's own rule: a file opened read-write is locked by
its process), so the hub opens it once per process and each worker thread gets its own
cursor of that one connection (a DuckDB connection is not for two threads at once).

**Effectively once.** A batch's rows, the offsets it reached (``sink_offsets``) and its note
(``sink_batches``) are one transaction. Inside it, under the write lock, the insert keeps only
rows at or past the stored offset of their partition, so a batch stored again (after a crash
before the broker's commit, or a rebalance) adds nothing, whatever its writer skipped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information

from aigc_hub.core.clock import Clock

from . import sql
from .base import SinkBatch
from .queries import QueriedStore, Row


class DuckDBAnalytics(QueriedStore):
    """Playback analytics in one DuckDB file (or in memory for ``:memory:``)."""

    engine = "duckdb"

    def __init__(self, path: str, clock: Clock) -> None:
        super().__init__(clock)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._connection = duckdb.connect(path)
        for statement in sql.DUCKDB_TABLES:
            self._connection.execute(statement)
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._guard = threading.Lock()
        # One writer at a time: two transactions moving the same partition's offset would
        # conflict (DuckDB's optimistic concurrency aborts the second).
        self._write_lock = threading.Lock()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor of the one connection (made on its first use)."""
        cursor: duckdb.DuckDBPyConnection | None = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._guard:
                cursor = self._connection.cursor()
                self._cursors.append(cursor)
            self._local.cursor = cursor
        return cursor

    def _rows(self, query: str, parameters: Mapping[str, int | str]) -> list[Row]:
        rows: list[Row] = []
        rows.extend(self._cursor().execute(sql.bind_duckdb(query), dict(parameters)).fetchall())
        return rows

    async def write(self, batch: SinkBatch) -> None:
        """Store rows, offsets and the batch's note in one transaction (in a worker thread)."""
        await asyncio.to_thread(self._write, batch)

    def _write(self, batch: SinkBatch) -> None:
        cursor = self._cursor()
        with self._write_lock:
            started = time.perf_counter()
            cursor.begin()
            try:
                stored = 0
                if batch.rows.num_rows:
                    cursor.register("batch_rows", batch.rows)
                    try:
                        cursor.execute(sql.DUCKDB_INSERT_EVENTS, {"topic": batch.topic})
                        stored = _count(cursor.fetchone())
                    finally:
                        cursor.unregister("batch_rows")
                cursor.register("batch_offsets", _offsets(batch.reached))
                try:
                    cursor.execute(sql.DUCKDB_UPSERT_OFFSETS, {"topic": batch.topic})
                finally:
                    cursor.unregister("batch_offsets")
                write_ms = round((time.perf_counter() - started) * 1000)
                cursor.execute(
                    sql.DUCKDB_INSERT_BATCH,
                    {"at": self.clock.now_ms(), "rows": stored, "ms": write_ms},
                )
                cursor.commit()
            except BaseException:
                cursor.rollback()
                raise

    async def close(self) -> None:
        """Close every thread's cursor, then the connection (which releases the file)."""
        with self._guard:
            for cursor in self._cursors:
                cursor.close()
            self._cursors.clear()
        self._connection.close()


def _offsets(reached: dict[int, int]) -> pa.Table:
    """The offsets a batch reached as a two-column table, partition order."""
    partitions = sorted(reached)
    return pa.table(
        {
            "source_partition": pa.array(partitions, pa.uint16()),
            "next_offset": pa.array([reached[p] for p in partitions], pa.uint64()),
        }
    )


def _count(row: tuple[object, ...] | None) -> int:
    """The row count an INSERT answers."""
    assert row is not None and isinstance(row[0], int), row
    return row[0]
