"""The analytics store's seam: what the playback sink writes and what the console reads.

Two engines implement :class:`AnalyticsStore`: DuckDB embedded in the process (``duckdb.py``)
and ClickHouse through clickhouse-connect (``clickhouse.py``), running the same queries
(``sql.py``). Every method is async; the engines run their blocking client calls in a worker
thread (``asyncio.to_thread``), so the event loop never waits on a query.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pyarrow loads with the sink, not with every process that runs avcc
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information

#: ``ts`` bounds standing for "no bound" (epoch ms; one query text with or without them).
NO_START = -(2**62)
NO_END = 2**62


@dataclass(frozen=True)
class SinkBatch:
    """Rows to store (``playback_rows.SCHEMA``) and, per partition of ``topic``, the next
    offset to read once they are stored. ``positions`` names the records the batch covers
    (the same for the same records): ClickHouse's deduplication token."""

    topic: str
    rows: pa.Table
    reached: dict[int, int]
    positions: str


@dataclass(frozen=True)
class Totals:
    """Counts of stored events by type, and their revenue to the cent."""

    events: int
    plays: int
    completes: int
    purchases: int
    revenue: Decimal


@dataclass(frozen=True)
class CodeSeries:
    """Plays of one code per time bucket: ``(bucket start in epoch ms, plays)``, oldest first
    (buckets without plays are absent)."""

    avcc_code: str
    points: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class CodeStats:
    """One code's plays, completes, purchases and revenue over a period."""

    avcc_code: str
    plays: int
    completes: int
    purchases: int
    revenue: Decimal


@dataclass(frozen=True)
class InsertRate:
    """What the sink stored lately: rows per second over the window, batches in it, and when
    it last wrote (epoch ms; None when it never did)."""

    window_s: int
    rows_per_s: float
    batches: int
    last_write_ms: int | None


class AnalyticsStore(Protocol):
    """Playback events stored in batches, each with the offsets it reached, and read back.

    ``write`` is effectively once per record: a batch stored again (after a crash or a
    rebalance) adds nothing, provided its writer first skipped records below
    ``stored_offsets`` (each engine's docstring says how it keeps the two together).
    """

    engine: str

    async def stored_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the next offset not yet stored (absent: none stored)."""
        ...

    async def write(self, batch: SinkBatch) -> None:
        """Store the batch's rows and its offsets together, and note the batch (rate)."""
        ...

    async def totals(self, since_ms: int | None = None, until_ms: int | None = None) -> Totals:
        """Events, plays, completes, purchases and revenue with ``since <= ts < until``."""
        ...

    async def plays_per_code(self, since_ms: int, bucket_s: int, limit: int) -> list[CodeSeries]:
        """Plays per ``bucket_s`` bucket since ``since_ms`` of the ``limit`` most played codes."""
        ...

    async def top_codes(self, since_ms: int, limit: int) -> list[CodeStats]:
        """The ``limit`` most played codes since ``since_ms`` with their revenue."""
        ...

    async def insert_rate(self, window_s: int) -> InsertRate:
        """Rows per second stored over the last ``window_s`` seconds, and the last write."""
        ...

    async def close(self) -> None:
        """Release the connection (a closed store answers no more calls)."""
        ...
