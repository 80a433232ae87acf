"""Every statement the analytics store runs, DuckDB's and ClickHouse's side by side.

The tables differ per dialect (types, engines, keys); the queries are ONE text for both. They
name parameters ``:name``, and each engine's adapter turns that into its own binding
(DuckDB ``$name``, ClickHouse ``{name:Int64}``) in :func:`bind_duckdb` / :func:`bind_clickhouse`.
So the text keeps to what both dialects share: ``count(*)``, ``sum(CASE …)`` (not DuckDB's
``count_if`` nor ClickHouse's ``countIf``), ``%`` for time buckets, and ``ts`` as epoch
milliseconds in a 64-bit integer (the seed's ``timestamp``, exact; no date type whose
functions differ between the two).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# -- DuckDB tables ---------------------------------------------------------------------------
# No primary key on the events: an index would cost every insert, and the offsets table is
# what keeps a batch from being stored twice.
DUCKDB_TABLES = (
    """CREATE TABLE IF NOT EXISTS playback_events (
        event_id VARCHAR NOT NULL,
        ts BIGINT NOT NULL,
        avcc_code VARCHAR NOT NULL,
        platform_node VARCHAR NOT NULL,
        user_hash VARCHAR NOT NULL,
        event_type VARCHAR NOT NULL,
        duration_sec UINTEGER NOT NULL,
        revenue_cny DECIMAL(9, 2) NOT NULL,
        source_partition USMALLINT NOT NULL,
        source_offset UBIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sink_offsets (
        topic VARCHAR NOT NULL,
        source_partition USMALLINT NOT NULL,
        next_offset UBIGINT NOT NULL,
        PRIMARY KEY (topic, source_partition)
    )""",
    """CREATE TABLE IF NOT EXISTS sink_batches (
        written_at BIGINT NOT NULL,
        row_count UINTEGER NOT NULL,
        write_ms UINTEGER NOT NULL
    )""",
)
#: The batch's rows (an Arrow table registered as ``batch_rows``) at or past the stored offset
#: of their partition: a batch stored again adds nothing.
DUCKDB_INSERT_EVENTS = """
INSERT INTO playback_events
SELECT b.event_id, b.ts, b.avcc_code, b.platform_node, b.user_hash, b.event_type,
       b.duration_sec, b.revenue_cny, b.source_partition, b.source_offset
FROM batch_rows AS b
LEFT JOIN sink_offsets AS o ON o.topic = $topic AND o.source_partition = b.source_partition
WHERE b.source_offset >= coalesce(o.next_offset, 0)
"""
#: The batch's offsets (an Arrow table registered as ``batch_offsets``), in one statement
#: (24 single-row upserts cost ~20× more); offsets never move backwards.
DUCKDB_UPSERT_OFFSETS = """
INSERT INTO sink_offsets
SELECT $topic, source_partition, next_offset FROM batch_offsets
ON CONFLICT (topic, source_partition) DO UPDATE
SET next_offset = greatest(sink_offsets.next_offset, excluded.next_offset)
"""
DUCKDB_INSERT_BATCH = "INSERT INTO sink_batches VALUES ($at, $rows, $ms)"

# -- ClickHouse tables -----------------------------------------------------------------------
# Ordered by code then time: the console's and a user's queries are per code over a time
# range. LowCardinality for the few platform nodes and the three event types (dictionary
# encoded); not for avcc_code, of which there are as many as coded works. No PARTITION BY:
# an INSERT then makes ONE part, written whole or not at all, and the aggregate projection
# inside that part records the offsets its rows reached, atomically with them.
# non_replicated_deduplication_window keeps the hashes of the last inserts, so an insert
# repeated with the same insert_deduplication_token is dropped by the server.
CLICKHOUSE_TABLES = (
    """CREATE TABLE IF NOT EXISTS playback_events (
        event_id String,
        ts Int64,
        avcc_code String,
        platform_node LowCardinality(String),
        user_hash String,
        event_type LowCardinality(String),
        duration_sec UInt32,
        revenue_cny Decimal(9, 2),
        source_partition UInt16,
        source_offset UInt64,
        PROJECTION reached_offsets
            (SELECT source_partition, max(source_offset) GROUP BY source_partition)
    ) ENGINE = MergeTree
    ORDER BY (avcc_code, ts)
    SETTINGS non_replicated_deduplication_window = 1000""",
    # The latest row of a partition wins at merge time; reads take max() so they are right
    # before any merge.
    """CREATE TABLE IF NOT EXISTS sink_offsets (
        topic String,
        source_partition UInt16,
        next_offset UInt64
    ) ENGINE = ReplacingMergeTree(next_offset)
    ORDER BY (topic, source_partition)""",
    """CREATE TABLE IF NOT EXISTS sink_batches (
        written_at Int64,
        row_count UInt32,
        write_ms UInt32
    ) ENGINE = MergeTree
    ORDER BY written_at""",
)
#: The offsets the stored rows themselves reached (answered from the projection, not a scan).
CLICKHOUSE_ROWS_REACHED = (
    "SELECT source_partition, max(source_offset) + 1 FROM playback_events GROUP BY source_partition"
)

# -- queries: the same text on both ----------------------------------------------------------
STORED_OFFSETS = (
    "SELECT source_partition, max(next_offset) FROM sink_offsets "
    "WHERE topic = :topic GROUP BY source_partition"
)
TOTALS = """
SELECT count(*) AS events,
       sum(CASE WHEN event_type = 'play' THEN 1 ELSE 0 END) AS plays,
       sum(CASE WHEN event_type = 'complete' THEN 1 ELSE 0 END) AS completes,
       sum(CASE WHEN event_type = 'purchase' THEN 1 ELSE 0 END) AS purchases,
       sum(revenue_cny) AS revenue
FROM playback_events
WHERE ts >= :since AND ts < :until
"""
#: Plays per time bucket of the codes with the most plays since ``:since`` (ties by code).
PLAYS_PER_CODE = """
WITH top_codes AS (
    SELECT avcc_code FROM playback_events
    WHERE ts >= :since AND event_type = 'play'
    GROUP BY avcc_code
    ORDER BY count(*) DESC, avcc_code
    LIMIT :limit
)
SELECT avcc_code, ts - ts % :bucket_ms AS bucket, count(*) AS plays
FROM playback_events
WHERE ts >= :since AND event_type = 'play' AND avcc_code IN (SELECT avcc_code FROM top_codes)
GROUP BY avcc_code, bucket
ORDER BY avcc_code, bucket
"""
#: Per code since ``:since``: plays, completes, purchases and revenue, most played first.
CODE_STATS = """
SELECT avcc_code,
       sum(CASE WHEN event_type = 'play' THEN 1 ELSE 0 END) AS plays,
       sum(CASE WHEN event_type = 'complete' THEN 1 ELSE 0 END) AS completes,
       sum(CASE WHEN event_type = 'purchase' THEN 1 ELSE 0 END) AS purchases,
       sum(revenue_cny) AS revenue
FROM playback_events
WHERE ts >= :since
GROUP BY avcc_code
ORDER BY plays DESC, avcc_code
LIMIT :limit
"""
#: Rows and batches stored since ``:since``, and the time of the last write ever.
INSERT_RATE = """
SELECT sum(CASE WHEN written_at >= :since THEN row_count ELSE 0 END) AS row_count,
       sum(CASE WHEN written_at >= :since THEN 1 ELSE 0 END) AS batches,
       max(written_at) AS last_at
FROM sink_batches
"""

_PARAMETER = re.compile(r":([a-z_]+)\b")


def bind_duckdb(query: str) -> str:
    """``query`` with DuckDB's named parameters (``$name``)."""
    return _PARAMETER.sub(r"$\1", query)


def bind_clickhouse(query: str, parameters: Mapping[str, int | str]) -> str:
    """``query`` with ClickHouse's typed server-side parameters (``{name:Int64}``): values
    travel apart from the text, never spliced into it."""

    def typed(match: re.Match[str]) -> str:
        name = match.group(1)
        kind = "String" if isinstance(parameters[name], str) else "Int64"
        return f"{{{name}:{kind}}}"

    return _PARAMETER.sub(typed, query)
