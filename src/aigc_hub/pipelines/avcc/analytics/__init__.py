"""avcc's playback analytics store (seed 000 §9.2.4's clickhouse-sink): where the playback
sink stores events and the console reads totals and series.

- ``base``        the ``AnalyticsStore`` protocol, the batch it writes, the answers it gives
- ``sql``         every statement, DuckDB's and ClickHouse's side by side; one query text
- ``queries``     the read side both engines share
- ``duckdb``      DuckDB embedded (default): one transaction per batch
- ``clickhouse``  ClickHouse (or chDB) through clickhouse-connect: one part per batch
- ``opening``     ``open_analytics(url, data_dir)``
"""

from __future__ import annotations

from .base import AnalyticsStore, CodeSeries, CodeStats, InsertRate, SinkBatch, Totals
from .opening import open_analytics

__all__ = [
    "AnalyticsStore",
    "CodeSeries",
    "CodeStats",
    "InsertRate",
    "SinkBatch",
    "Totals",
    "open_analytics",
]
