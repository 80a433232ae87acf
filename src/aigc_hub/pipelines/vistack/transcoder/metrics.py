"""The transcoder's Prometheus metrics (docs/metrics.md lists them)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

CALLS = Counter(
    "aigc_hub_vistack_transcoder_calls",
    "ProcessVideo calls the transcoder answered, by outcome: published, refused (the media), "
    "not_found (no source), invalid (the request), exhausted (full), cancelled (the caller "
    "went away), error.",
    ["outcome"],
)
SECONDS = Histogram(
    "aigc_hub_vistack_transcoder_seconds",
    "Wall seconds of one ProcessVideo call, waiting for a slot included.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
ALL: tuple[MetricWrapperBase, ...] = (CALLS, SECONDS)
