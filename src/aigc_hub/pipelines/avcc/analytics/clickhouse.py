"""The analytics store in ClickHouse, through clickhouse-connect (the seed's clickhouse-sink).

The same client code serves a ClickHouse server (``clickhouse://``, ``https://``) and, in
tests, ClickHouse's engine in process through chDB's backend of clickhouse-connect
(``chdb://memory``, ``chdb:///dir``). Batches go in as Arrow (``insert_arrow``), columnar.

**Effectively once, without transactions.** ClickHouse has no multi-statement transaction,
so rows and offsets cannot be one; three mechanisms of its own keep a batch stored once:

1. The rows' INSERT is *one part* (the table has no ``PARTITION BY``), written whole or not
   at all, and the table's aggregate projection ``reached_offsets`` (``max(source_offset)``
   per partition) lives inside that part. So the offsets the rows reached are stored
   atomically with them, and :meth:`stored_offsets` reads them back from the projection.
2. The INSERT carries ``insert_deduplication_token`` = the batch's offset ranges, and the
   table keeps a ``non_replicated_deduplication_window``: the same batch inserted again
   (a retried call whose first attempt did land) is dropped by the server.
3. ``sink_offsets`` (a ReplacingMergeTree) records, after the rows, how far each batch got,
   rejected records included (they have no row to carry their offset).

A crash between (1) and (3) loses only the offsets of rejected records past the last stored
row; they are dead-lettered again on redelivery, never stored as rows. The writer must skip
records below :meth:`stored_offsets` (the playback sink does), since ClickHouse cannot filter
an Arrow insert against a table.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aigc_hub.core.clock import Clock
from aigc_hub.core.errors import ConfigurationError

from . import sql
from .base import SinkBatch
from .queries import QueriedStore, Row

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

try:
    import clickhouse_connect
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise ImportError(
        "the ClickHouse analytics store needs clickhouse-connect: "
        "pip install 'aigc-hub[clickhouse]'"
    ) from exc


def connect(url: str) -> Client:
    """A clickhouse-connect client for ``url``: ``clickhouse://`` or ``http://`` (HTTP),
    ``https://`` (TLS), ``chdb://memory`` or ``chdb:///dir`` (chDB in this process)."""
    scheme = url.partition("://")[0]
    if scheme == "chdb":
        return clickhouse_connect.get_client(dsn=url)
    if scheme not in ("clickhouse", "http", "https"):
        raise ConfigurationError(f"not a ClickHouse URL: {scheme}://…")
    # One client is shared by threads: without a session id, concurrent queries do not
    # collide on a server-side session lock.
    return clickhouse_connect.get_client(
        dsn=url, secure=scheme == "https", autogenerate_session_id=False
    )


class ClickHouseAnalytics(QueriedStore):
    """Playback analytics in ClickHouse (or chDB)."""

    engine = "clickhouse"

    def __init__(self, url: str, clock: Clock) -> None:
        super().__init__(clock)
        self.url = url
        self._client = connect(url)
        # chDB runs in this process with one connection handle per client: calls through
        # it take turns. A server's client may run calls side by side.
        self._calls: threading.Lock | None = threading.Lock() if url.startswith("chdb:") else None
        for statement in sql.CLICKHOUSE_TABLES:
            self._client.command(statement)

    def _rows(self, query: str, parameters: Mapping[str, int | str]) -> list[Row]:
        bound = sql.bind_clickhouse(query, parameters)
        if self._calls is None:
            return list(self._client.query(bound, parameters=dict(parameters)).result_rows)
        with self._calls:
            return list(self._client.query(bound, parameters=dict(parameters)).result_rows)

    async def stored_offsets(self, topic: str) -> dict[int, int]:
        """Per partition, the further of what ``sink_offsets`` recorded and what the stored
        rows themselves reached (the projection), so a crash between the two loses nothing.
        The rows are all of one topic (the playback topic)."""
        recorded = await super().stored_offsets(topic)
        reached = await self._query(sql.CLICKHOUSE_ROWS_REACHED)
        for partition, end in reached:
            p, n = int(str(partition)), int(str(end))
            recorded[p] = max(recorded.get(p, 0), n)
        return recorded

    async def write(self, batch: SinkBatch) -> None:
        """Insert the rows (deduplicated by token), then the offsets and the batch's note."""
        await asyncio.to_thread(self._write, batch)

    def _write(self, batch: SinkBatch) -> None:
        if self._calls is None:
            self._write_unlocked(batch)
            return
        with self._calls:
            self._write_unlocked(batch)

    def _write_unlocked(self, batch: SinkBatch) -> None:
        started = time.perf_counter()
        if batch.rows.num_rows:
            token = hashlib.sha256(f"{batch.topic}|{batch.positions}".encode()).hexdigest()
            self._client.insert_arrow(
                "playback_events", batch.rows, settings={"insert_deduplication_token": token}
            )
        write_ms = round((time.perf_counter() - started) * 1000)
        offsets = [[batch.topic, p, n] for p, n in sorted(batch.reached.items())]
        if offsets:
            self._client.insert(
                "sink_offsets", offsets, column_names=["topic", "source_partition", "next_offset"]
            )
        self._client.insert(
            "sink_batches",
            [[self.clock.now_ms(), batch.rows.num_rows, write_ms]],
            column_names=["written_at", "row_count", "write_ms"],
        )

    async def close(self) -> None:
        """Close the client (for chDB: its connection handle)."""
        await asyncio.to_thread(self._client.close)
