"""avcc's own Prometheus metrics (docs/metrics.md lists them with the backbone's).

Module-level on the default registry, like the backbone's (``observability/metrics.py``):
one set per process, exposed by the same exporter. Labels stay few: kinds, never codes.
"""

from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.metrics import MetricWrapperBase

from aigc_hub.observability.metrics import Children

PLAYBACK_ANOMALIES = Counter(
    "aigc_hub_avcc_playback_anomalies",
    "Anomalies the playback detector found (each kind, subject and window once per process).",
    ["kind"],
)
PLAYBACK_DROPPED = Counter(
    "aigc_hub_avcc_playback_dropped_events",
    "Playback events the detector did not count: reason late (its window had closed) or "
    "malformed (not the seed's envelope).",
    ["reason"],
)

#: The values of ``reason``.
DROP_REASONS = ("late", "malformed")

#: The labelled children, looked up once (``Children``).
anomalies_of = Children(PLAYBACK_ANOMALIES)
dropped_of = Children(PLAYBACK_DROPPED)

ALL: tuple[MetricWrapperBase, ...] = (PLAYBACK_ANOMALIES, PLAYBACK_DROPPED)
