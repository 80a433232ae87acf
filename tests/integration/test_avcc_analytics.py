"""avcc's playback analytics on real engines: DuckDB (a file) and ClickHouse's engine (chDB,
through clickhouse-connect's ``chdb://`` backend: the same client code as a server), fed by
the sink with a real dead-letter store on a migrated SQLite database."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import SystemClock
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.messaging.base import Record
from aigc_hub.pipelines.avcc import playback_rows
from aigc_hub.pipelines.avcc.analytics import AnalyticsStore, SinkBatch, open_analytics
from aigc_hub.pipelines.avcc.analytics.clickhouse import ClickHouseAnalytics
from aigc_hub.pipelines.avcc.events import PLAYBACK_TOPIC
from aigc_hub.pipelines.avcc.handlers import sink
from aigc_hub.reliability.dlq import DeadLetterFilter, DeadLetterStore
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter
from aigc_hub.store import engine as store_engine
from tests.support.avcc import avcc_stack
from tests.support.hubs import make_broker
from tests.support.playback import CODES, START_MS, playback_value, record, seeded_events

ENGINES = ("duckdb", "chdb")


def _url(kind: str, tmp_path: Path) -> str:
    return (
        f"duckdb://{tmp_path / 'playback.duckdb'}"
        if kind == "duckdb"
        else f"chdb://{tmp_path / 'ch'}"
    )


@pytest.fixture
async def hub_db(sqlite_url: str) -> AsyncIterator[AsyncEngine]:
    engine = store_engine.create_engine(sqlite_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def dead_letters(hub_db: AsyncEngine) -> DeadLetterStore:
    return DeadLetterStore(hub_db, OutboxWriter(EventRoutes()), SystemClock())


@pytest.fixture(params=ENGINES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnalyticsStore]:
    """Each engine in turn (chDB allows one engine path per process: closed after each test)."""
    opened = await open_analytics(_url(request.param, tmp_path), tmp_path)
    yield opened
    await opened.close()


def _batches(records: list[Record], size: int) -> list[list[Record]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


async def test_duckdb_and_chdb_give_the_same_totals_and_series_for_the_same_batches(
    tmp_path: Path, dead_letters: DeadLetterStore
) -> None:
    events = seeded_events(3_000, seed=7)
    records = [r for r, _kind, _revenue in events]
    kinds = Counter(kind for _r, kind, _revenue in events)
    revenue = sum((rev for _r, _kind, rev in events), Decimal("0.00"))
    answers = []
    for kind in ENGINES:
        store = await open_analytics(_url(kind, tmp_path / kind), tmp_path)
        try:
            handler = sink.PlaybackSink(store, dead_letters)
            for batch in _batches(records, 700):
                await handler(batch)
            answers.append(
                (
                    await store.totals(),
                    await store.totals(since_ms=START_MS + 100_000, until_ms=START_MS + 400_000),
                    await store.plays_per_code(START_MS, bucket_s=60, limit=3),
                    await store.top_codes(START_MS, limit=10),
                    await store.stored_offsets(PLAYBACK_TOPIC),
                )
            )
        finally:
            await store.close()
    duck, ch = answers
    assert duck == ch
    totals, window, series, top, offsets = duck
    assert (totals.events, totals.plays, totals.completes, totals.purchases) == (
        3_000,
        kinds["play"],
        kinds["complete"],
        kinds["purchase"],
    )
    assert totals.revenue == revenue  # to the cent, though the float sum is not
    # 250 ms apart: events 400..1599 are in [100 s, 400 s).
    assert window.events == 1_200
    assert len(series) == 3 and sum(n for s in series for _b, n in s.points) <= kinds["play"]
    assert [s.avcc_code for s in series] == sorted(c.avcc_code for c in top[:3])
    assert all(b % 60_000 == 0 for s in series for b, _n in s.points)
    assert sum(c.revenue for c in top) == revenue
    assert offsets == {p: 1 + max(r.offset for r in records if r.partition == p) for p in range(4)}


async def test_a_batch_delivered_twice_is_stored_once(
    store: AnalyticsStore, dead_letters: DeadLetterStore
) -> None:
    records = [r for r, _k, _rev in seeded_events(500, seed=3)]
    handler = sink.PlaybackSink(store, dead_letters)
    await handler(records[:300])
    await handler(records[:300])  # the same batch again: nothing more
    await handler(records[100:])  # overlapping, longer: only its new records
    assert (await store.totals()).events == 500


async def test_a_new_sink_skips_what_an_earlier_process_stored(
    tmp_path: Path, dead_letters: DeadLetterStore
) -> None:
    """The stored offsets outlive the process: reopened, the store still refuses the batch."""
    url = f"duckdb://{tmp_path / 'p.duckdb'}"
    records = [r for r, _k, _rev in seeded_events(200, seed=5)]
    first = await open_analytics(url, tmp_path)
    await sink.PlaybackSink(first, dead_letters)(records)
    await first.close()
    again = await open_analytics(url, tmp_path)
    try:
        await sink.PlaybackSink(again, dead_letters)(records)
        assert (await again.totals()).events == 200
    finally:
        await again.close()


async def test_chdb_offsets_survive_a_crash_between_the_rows_and_the_offsets_table(
    tmp_path: Path,
) -> None:
    """ClickHouse has no transaction over two tables: rows then offsets. Crash in between
    (here: the offsets table emptied) and the rows' own projection still says how far they
    got, so the redelivered batch is not stored twice."""
    store = await open_analytics(f"chdb://{tmp_path / 'ch'}", tmp_path)
    assert isinstance(store, ClickHouseAnalytics)
    try:
        records = [r for r, _k, _rev in seeded_events(400, seed=11)]
        decoded = playback_rows.decode(records)
        await store.write(
            SinkBatch(PLAYBACK_TOPIC, decoded.table, decoded.reached, decoded.positions)
        )
        store._client.command("TRUNCATE TABLE sink_offsets")
        assert await store.stored_offsets(PLAYBACK_TOPIC) == decoded.reached
        # And the same insert repeated (a retried call that had landed) is dropped by the
        # server's deduplication window.
        await store.write(
            SinkBatch(PLAYBACK_TOPIC, decoded.table, decoded.reached, decoded.positions)
        )
        assert (await store.totals()).events == 400
    finally:
        await store.close()


async def test_bad_records_are_counted_dead_lettered_with_their_reason_and_not_stored(
    store: AnalyticsStore, dead_letters: DeadLetterStore
) -> None:
    good = playback_value(event_type="purchase", revenue=Decimal("0.10"))
    records = [
        record(0, 0, good),
        record(0, 1, b"{oops"),
        record(0, 2, good.replace(b'"event_type"', b'"event_kind"')),
        record(1, 0, good.replace(b"0.1", b"0.125")),
        record(1, 1, good),
    ]
    before = {
        r: sink.REJECTED.labels(r)._value.get()
        for r in ("undecodable", "missing_field", "bad_field")
    }
    handler = sink.PlaybackSink(store, dead_letters)
    await handler(records)
    await handler(records)  # redelivered: no second letter, no second row

    totals = await store.totals()
    assert (totals.events, totals.purchases, totals.revenue) == (2, 2, Decimal("0.20"))
    after = {r: sink.REJECTED.labels(r)._value.get() - n for r, n in before.items()}
    assert after == {"undecodable": 1, "missing_field": 1, "bad_field": 1}
    letters = await dead_letters.list(DeadLetterFilter(consumer=sink.GROUP))
    assert sorted((d.partition, d.offset) for d in letters) == [(0, 1), (0, 2), (1, 0)]
    by_offset = {(d.partition, d.offset): d for d in letters}
    assert by_offset[(0, 1)].error_message.startswith("undecodable: ")
    assert by_offset[(0, 2)].error_message == "missing_field: event_type"
    assert by_offset[(1, 0)].error_message == "bad_field: revenue_cny=0.125"
    assert all(d.error_class == sink.REJECTED_CLASS and d.topic == PLAYBACK_TOPIC for d in letters)
    assert by_offset[(0, 1)].value == b"{oops"
    assert await store.stored_offsets(PLAYBACK_TOPIC) == {0: 3, 1: 2}


async def test_revenue_sums_are_exact_to_the_cent(
    store: AnalyticsStore, dead_letters: DeadLetterStore
) -> None:
    # 0.10 + 0.20 is 0.30000000000000004 in floats; 10,000 purchases of 0.01 add to 100.00.
    amounts = [Decimal("0.10"), Decimal("0.20")] + [Decimal("0.01")] * 10_000 + [Decimal("9999.99")]
    records = [
        record(0, i, playback_value(event_type="purchase", revenue=a, code=CODES[i % 2]))
        for i, a in enumerate(amounts)
    ]
    await sink.PlaybackSink(store, dead_letters)(records)
    assert (await store.totals()).revenue == Decimal("10100.29")
    per_code = {c.avcc_code: c.revenue for c in await store.top_codes(START_MS, limit=5)}
    assert sum(per_code.values()) == Decimal("10100.29")


async def test_an_empty_batch_is_a_tick_that_writes_nothing(
    store: AnalyticsStore, dead_letters: DeadLetterStore
) -> None:
    await sink.PlaybackSink(store, dead_letters)([])
    rate = await store.insert_rate(60)
    assert (rate.batches, rate.last_write_ms) == (0, None)
    assert (await store.totals()).events == 0


async def test_insert_rate_counts_the_rows_stored_lately(
    store: AnalyticsStore, dead_letters: DeadLetterStore
) -> None:
    records = [r for r, _k, _rev in seeded_events(600, seed=2)]
    handler = sink.PlaybackSink(store, dead_letters)
    for batch in _batches(records, 200):
        await handler(batch)
    rate = await store.insert_rate(60)
    assert rate.batches == 3
    assert rate.rows_per_s == pytest.approx(600 / 60)
    assert rate.last_write_ms is not None


@pytest.mark.parametrize("url", ["mysql://host/db", "duckdb:///", "ftp://x"])
async def test_an_analytics_url_of_no_engine_is_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        await open_analytics(url, tmp_path)


async def test_the_default_store_is_duckdb_in_the_data_dir(tmp_path: Path) -> None:
    store = await open_analytics("", tmp_path)
    try:
        assert store.engine == "duckdb"
        assert (tmp_path / "avcc" / "playback.duckdb").exists()
    finally:
        await store.close()


async def test_the_hubs_sink_opens_the_default_store_once_and_the_hub_closes_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    """``make_sink`` on a started hub's avcc: the store opens on the first batch (DuckDB in
    the data dir), rejects reach the hub's own DLQ, and closing the hub closes the store."""
    broker = make_broker("embedded", tmp_path / "log")
    records = [r for r, _k, _rev in seeded_events(50, seed=9)] + [record(9, 0, b"nope")]
    async with avcc_stack(sqlite_url, broker, tmp_path, groups=[], scan=False) as stack:
        handle = sink.make_sink(stack.avcc)
        await handle([])
        assert not (tmp_path / "avcc" / "playback.duckdb").exists()  # a tick opens nothing
        await handle(records)
        store = await stack.avcc.analytics()
        assert store is await stack.avcc.analytics()
        assert (await store.totals()).events == 50
        [letter] = await stack.hub.dlq.list(DeadLetterFilter(consumer=sink.GROUP))
        assert (letter.partition, letter.offset) == (9, 0)
    with pytest.raises(Exception, match="closed"):
        await store.totals()
