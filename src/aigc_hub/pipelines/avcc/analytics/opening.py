"""``open_analytics``: the analytics store a URL names (``AIGC_HUB_AVCC_ANALYTICS_URL``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.errors import ConfigurationError

from .base import AnalyticsStore

#: The store on embedded defaults, under the hub's data dir.
DEFAULT_FILE = Path("avcc") / "playback.duckdb"
CLICKHOUSE_SCHEMES = ("clickhouse", "http", "https", "chdb")


async def open_analytics(url: str, data_dir: Path, *, clock: Clock | None = None) -> AnalyticsStore:
    """Open (and create the tables of) the store ``url`` names: empty = DuckDB at
    ``<data_dir>/avcc/playback.duckdb``; ``duckdb:///path`` (``duckdb:///:memory:``);
    ``clickhouse://user:pw@host:8123/db``, ``https://…``; ``chdb://memory``, ``chdb:///dir``.
    Opening blocks (files, a connection), so it runs in a worker thread."""
    clock = clock or SystemClock()
    scheme, sep, rest = url.partition("://")
    if not url or scheme == "duckdb":
        # ``duckdb:///abs/path`` → ``/abs/path``; ``duckdb:///:memory:`` → ``:memory:``.
        path = str(data_dir / DEFAULT_FILE) if not url else rest
        path = ":memory:" if path == "/:memory:" else path
        if not path.strip("/"):
            raise ConfigurationError(f"analytics URL {url!r} names no file")
        from .duckdb import DuckDBAnalytics

        return await asyncio.to_thread(DuckDBAnalytics, path, clock)
    if sep and scheme in CLICKHOUSE_SCHEMES:
        # Imported here: clickhouse-connect is an extra, needed only by a hub that uses it.
        from .clickhouse import ClickHouseAnalytics

        return await asyncio.to_thread(ClickHouseAnalytics, url, clock)
    raise ConfigurationError(
        f"analytics URL {url!r}: use duckdb:///path, clickhouse://…, https://… or chdb://…"
    )
