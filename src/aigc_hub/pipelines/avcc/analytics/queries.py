"""The read side both engines share: each query of ``sql.py`` run through an engine's
``_rows`` (blocking, in a worker thread) and shaped into the typed answers of ``base.py``.

The two engines differ in what an empty aggregate gives (DuckDB NULL, ClickHouse 0); the
shaping here reads both as zero, so the answers are equal on both.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping, Sequence
from decimal import Decimal
from itertools import groupby

from aigc_hub.core.clock import Clock

from . import sql
from .base import NO_END, NO_START, CodeSeries, CodeStats, InsertRate, Totals

Row = Sequence[object]
_CENTS = Decimal("0.01")


class QueriedStore(abc.ABC):
    """The queries of an analytics store; an engine supplies :meth:`_rows`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    @abc.abstractmethod
    def _rows(self, query: str, parameters: Mapping[str, int | str]) -> list[Row]:
        """Run one query of ``sql.py`` (blocking) and return its rows."""

    async def _query(self, query: str, **parameters: int | str) -> list[Row]:
        return await asyncio.to_thread(self._rows, query, parameters)

    async def stored_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the next offset not yet stored."""
        rows = await self._query(sql.STORED_OFFSETS, topic=topic)
        return {_int(p): _int(n) for p, n in rows}

    async def totals(self, since_ms: int | None = None, until_ms: int | None = None) -> Totals:
        """Events, plays, completes, purchases and revenue with ``since <= ts < until``."""
        since = NO_START if since_ms is None else since_ms
        until = NO_END if until_ms is None else until_ms
        [(events, plays, completes, purchases, revenue)] = await self._query(
            sql.TOTALS, since=since, until=until
        )
        return Totals(_int(events), _int(plays), _int(completes), _int(purchases), _cny(revenue))

    async def plays_per_code(self, since_ms: int, bucket_s: int, limit: int) -> list[CodeSeries]:
        """Plays per ``bucket_s`` bucket since ``since_ms`` of the ``limit`` most played codes,
        codes in their text order."""
        rows = await self._query(
            sql.PLAYS_PER_CODE, since=since_ms, bucket_ms=bucket_s * 1000, limit=limit
        )
        return [
            CodeSeries(str(code), tuple((_int(b), _int(n)) for _code, b, n in points))
            for code, points in groupby(rows, key=lambda row: row[0])
        ]

    async def top_codes(self, since_ms: int, limit: int) -> list[CodeStats]:
        """The ``limit`` most played codes since ``since_ms`` (ties by code), with revenue."""
        rows = await self._query(sql.CODE_STATS, since=since_ms, limit=limit)
        return [
            CodeStats(str(code), _int(plays), _int(completes), _int(purchases), _cny(revenue))
            for code, plays, completes, purchases, revenue in rows
        ]

    async def insert_rate(self, window_s: int) -> InsertRate:
        """Rows per second stored over the last ``window_s`` seconds, and the last write."""
        since = self.clock.now_ms() - window_s * 1000
        [(rows, batches, last_at)] = await self._query(sql.INSERT_RATE, since=since)
        last = _int(last_at)
        return InsertRate(window_s, _int(rows) / window_s, _int(batches), last or None)


def _int(value: object) -> int:
    """An aggregate as an int; NULL (DuckDB's empty sum or max) is 0, like ClickHouse's."""
    if value is None:
        return 0
    assert isinstance(value, int | Decimal), value
    return int(value)


def _cny(value: object) -> Decimal:
    """A revenue sum to the cent; NULL (DuckDB's empty sum) is 0.00."""
    if value is None:
        return Decimal("0.00")
    assert isinstance(value, Decimal), value
    return value.quantize(_CENTS)
