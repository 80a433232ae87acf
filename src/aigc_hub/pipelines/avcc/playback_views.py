"""What an operator sees of playback: the sink's lag beside its insert rate, the stored totals,
plays per code over time, and the anomalies the detector found. One read for the console's
playback page and the admin API (``GET /v1/avcc/admin/playback``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from aigc_hub.store.engine import reader

from . import events
from .analytics.base import CodeSeries, CodeStats, InsertRate, Totals
from .handlers import sink
from .settlement_tables import avcc_playback_anomalies as anomalies
from .state import Avcc

#: The sink's consumer group (the seed's clickhouse-sink).
SINK_GROUP = sink.GROUP


@dataclass(frozen=True)
class Anomaly:
    """One anomaly as recorded by the detector."""

    id: int
    kind: str
    subject: str
    window_start: int
    window_end: int
    observed: float
    expected: float
    score: float
    detail: dict[str, object]
    detected_at: int


@dataclass(frozen=True)
class SinkState:
    """The analytics sink's lag on ``topic.playback.event`` and what it stored lately."""

    lag: int | None
    rate: InsertRate | None


@dataclass
class PlaybackView:
    """The playback page: ``store_note`` says why the stored figures are missing, if they are."""

    since_ms: int
    bucket_s: int
    sink: SinkState
    totals: Totals | None = None
    series: list[CodeSeries] = field(default_factory=list)
    top: list[CodeStats] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)
    store_note: str = ""


async def recent_anomalies(avcc: Avcc, limit: int = 50, kind: str | None = None) -> list[Anomaly]:
    """The latest anomalies, newest first (optionally of one kind)."""
    query = sa.select(anomalies).order_by(anomalies.c.detected_at.desc(), anomalies.c.id.desc())
    if kind is not None:
        query = query.where(anomalies.c.kind == kind)
    async with reader(avcc.hub.engine) as conn:
        rows = (await conn.execute(query.limit(limit))).all()
    return [
        Anomaly(
            r.id,
            r.kind,
            r.subject,
            r.window_start,
            r.window_end,
            r.observed,
            r.expected,
            r.score,
            dict(r.detail or {}),
            r.detected_at,
        )
        for r in rows
    ]


async def sink_lag(avcc: Avcc) -> int | None:
    """Records of ``topic.playback.event`` the sink has not stored (None: broker unreachable)."""
    try:
        parts = await avcc.hub.broker.lag(SINK_GROUP, [events.PLAYBACK_TOPIC])
    except (OSError, TimeoutError, ConnectionError):
        return None
    return sum(p.lag for p in parts)


async def playback_view(
    avcc: Avcc, *, window_s: int = 900, bucket_s: int = 10, codes: int = 5
) -> PlaybackView:
    """The page's figures over the last ``window_s`` seconds."""
    since = avcc.hub.clock.now_ms() - window_s * 1000
    lag = await sink_lag(avcc)
    store = await avcc.analytics_for_reading()
    found = await recent_anomalies(avcc)
    if store is None:
        note = (
            "The analytics store is a DuckDB file, which one process opens: this one has not "
            "(its sink runs in another process, or has stored nothing yet). Point "
            "AIGC_HUB_AVCC_ANALYTICS_URL at ClickHouse to read it from every process."
        )
        return PlaybackView(since, bucket_s, SinkState(lag, None), anomalies=found, store_note=note)
    return PlaybackView(
        since,
        bucket_s,
        SinkState(lag, await store.insert_rate(60)),
        totals=await store.totals(),
        series=await store.plays_per_code(since, bucket_s, codes),
        top=await store.top_codes(since, codes),
        anomalies=found,
    )
