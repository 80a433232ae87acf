"""The lag monitor: each consumer group's lag and oldest-unconsumed age, against thresholds.

It samples the broker (embedded log or Kafka, through ``Broker.lag``), exports gauges,
compares every (group, topic) with its topic's threshold, logs and optionally POSTs an alert
on every change of state, and tells the admission gate which pipelines are overloaded.
Defaults come from the seeds: seed 000 §9.3.4 (``topic.avcc.apply.created``: lag > 1,000 or
older than 60 s; ``topic.playback.event``: lag > 50,000) and seed 003 §10.2 (lag > 5,000 on the
document topics). A breach clears when lag falls below half the threshold (hysteresis, as in
seed 003 §7.1), so the gate does not flap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aigc_hub.core.clock import Clock
from aigc_hub.messaging.base import Broker, PartitionLag
from aigc_hub.messaging.catalog import TopicCatalog
from aigc_hub.observability import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Threshold:
    """A topic is overloaded when lag exceeds ``max_lag`` or the oldest age ``max_age_s``."""

    max_lag: int | None = None
    max_age_s: float | None = None


DEFAULT_THRESHOLDS: Mapping[str, Threshold] = {
    "topic.avcc.apply.created": Threshold(max_lag=1_000, max_age_s=60.0),
    "topic.playback.event": Threshold(max_lag=50_000),
    "documents-uploaded": Threshold(max_lag=5_000),
    "embeddings-generated": Threshold(max_lag=5_000),
    # Seed 003 §7: backpressure on above 10,000 (off below half).
    "ai-analysis-requests": Threshold(max_lag=10_000),
    "ai-analysis-completed": Threshold(max_lag=5_000),
}


@dataclass(frozen=True)
class TopicLag:
    """A group's lag on one topic, summed over partitions."""

    group: str
    topic: str
    lag: int
    oldest_age_s: float
    breached: bool


@dataclass
class _Trend:
    lag: int
    at_ms: int
    drain_per_s: float = 0.0


@dataclass
class LagMonitor:
    """Samples lag for the watched groups and keeps the overload state per pipeline."""

    broker: Broker
    clock: Clock
    groups: Mapping[str, Sequence[str]]
    catalog: TopicCatalog
    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    webhook_url: str | None = None
    interval_s: float = 10.0
    overloaded: dict[str, TopicLag] = field(default_factory=dict)
    #: False after a sample could not reach the broker; the gate then refuses all new work.
    broker_reachable: bool = True
    _trends: dict[tuple[str, str], _Trend] = field(default_factory=dict)

    async def sample(self) -> list[TopicLag]:
        """Read lag for every watched group and topic; update gauges, state and alerts."""
        now = self.clock.now_ms()
        out: list[TopicLag] = []
        for group, topics in self.groups.items():
            try:
                rows = await self.broker.lag(group, list(topics))
            except Exception:
                self.broker_reachable = False
                raise
            self.broker_reachable = True
            for topic in topics:
                out.append(self._evaluate(group, topic, [r for r in rows if r.topic == topic], now))
        return out

    def _evaluate(self, group: str, topic: str, rows: list[PartitionLag], now: int) -> TopicLag:
        lag = sum(r.lag for r in rows)
        oldest = [r.oldest_unconsumed_ms for r in rows if r.oldest_unconsumed_ms is not None]
        age = max(0.0, (now - min(oldest)) / 1000) if oldest and lag else 0.0
        for r in rows:
            metrics.CONSUMER_LAG.labels(group, topic, str(r.partition)).set(r.lag)
            part_age = 0.0
            if r.lag and r.oldest_unconsumed_ms is not None:
                part_age = max(0.0, (now - r.oldest_unconsumed_ms) / 1000)
            metrics.CONSUMER_LAG_AGE.labels(group, topic, str(r.partition)).set(part_age)
        self._trend(group, topic, lag, now)
        key = f"{group}/{topic}"
        was = key in self.overloaded
        breached = self._breached(topic, lag, age, was)
        result = TopicLag(group, topic, lag, age, breached)
        if breached:
            self.overloaded[key] = result
        else:
            self.overloaded.pop(key, None)
        if breached != was:
            self._alert(result)
        return result

    def _breached(self, topic: str, lag: int, age: float, was: bool) -> bool:
        t = self.thresholds.get(topic)
        if t is None:
            return False
        factor = 0.5 if was else 1.0  # once over, stay over until clearly below
        over_lag = t.max_lag is not None and lag > t.max_lag * factor
        over_age = t.max_age_s is not None and age > t.max_age_s * factor
        return over_lag or over_age

    def _trend(self, group: str, topic: str, lag: int, now: int) -> None:
        prev = self._trends.get((group, topic))
        if prev is not None and now > prev.at_ms:
            rate = (prev.lag - lag) / ((now - prev.at_ms) / 1000)
            drain = max(0.0, rate)
            prev.drain_per_s = (
                drain if prev.drain_per_s == 0 else 0.5 * prev.drain_per_s + 0.5 * drain
            )
            prev.lag, prev.at_ms = lag, now
        else:
            self._trends[(group, topic)] = _Trend(lag, now)

    def drain_per_s(self, group: str, topic: str) -> float:
        """Smoothed records/s the group has been working the topic's lag down."""
        trend = self._trends.get((group, topic))
        return trend.drain_per_s if trend else 0.0

    def overloaded_pipelines(self) -> dict[str, list[TopicLag]]:
        """Pipelines with at least one breached (group, topic) on the reliable road, and the
        breaches.

        A telemetry topic's breach is alerted but closes no gate: that road takes what it is
        sent and the log holds it until the slow consumer catches up (seed 000 §9.3.4 asks
        for an alert on playback lag, not for refusing plays, nor applications beside them).
        """
        out: dict[str, list[TopicLag]] = {}
        for item in self.overloaded.values():
            spec = self.catalog.get(item.topic) if item.topic in self.catalog else None
            if spec is not None and spec.profile == "telemetry":
                continue
            out.setdefault(spec.pipeline if spec else "?", []).append(item)
        return out

    def _alert(self, item: TopicLag) -> None:
        state = "firing" if item.breached else "resolved"
        payload = {
            "alert": "ConsumerLagHigh",
            "state": state,
            "group": item.group,
            "topic": item.topic,
            "lag": item.lag,
            "oldest_age_s": round(item.oldest_age_s, 1),
            "threshold": vars(self.thresholds.get(item.topic, Threshold())),
        }
        (log.warning if item.breached else log.info)("lag alert %s", json.dumps(payload))
        if self.webhook_url:
            task = asyncio.get_running_loop().create_task(self._post(payload))
            task.add_done_callback(lambda t: t.exception())

    async def _post(self, payload: dict[str, object]) -> None:
        assert self.webhook_url is not None
        data = json.dumps(payload).encode()
        request = urllib.request.Request(
            self.webhook_url, data=data, headers={"content-type": "application/json"}
        )
        try:
            await asyncio.to_thread(urllib.request.urlopen, request, timeout=5)
        except OSError as exc:
            log.warning("lag alert webhook failed: %s", exc)

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.sample()
            except Exception:
                log.exception("lag sample failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)


def parse_thresholds(text: str) -> dict[str, Threshold]:
    """Parse ``'topic=lag[/age_s],…'`` (e.g. ``transcode=500/120,comment=/30``)."""
    out: dict[str, Threshold] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        topic, sep, spec = item.partition("=")
        lag_text, _, age_text = spec.partition("/")
        try:
            threshold = Threshold(
                max_lag=int(lag_text) if lag_text.strip() else None,
                max_age_s=float(age_text) if age_text.strip() else None,
            )
        except ValueError:
            raise ValueError(f"bad lag threshold {item!r}: use topic=lag[/age_s]") from None
        if (
            not sep
            or not topic.strip()
            or (threshold.max_lag is None and threshold.max_age_s is None)
        ):
            raise ValueError(f"bad lag threshold {item!r}: use topic=lag[/age_s]")
        out[topic.strip()] = threshold
    return out
