"""Prometheus metrics of the backbone, all named ``aigc_hub_*`` (documented in docs/metrics.md).

Metric objects are module-level, as prometheus-client expects: one set per process.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PUBLISHED = Counter(
    "aigc_hub_published_records", "Records the outbox relay published to the broker.", ["topic"]
)
CONSUMED = Counter(
    "aigc_hub_consumed_records",
    "Records a consumer group finished (applied, duplicate, parked or dead-lettered).",
    ["group", "topic", "outcome"],
)
HANDLER_SECONDS = Histogram(
    "aigc_hub_handler_duration_seconds",
    "Handler run time including its commit.",
    ["group"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
HANDLER_ERRORS = Counter(
    "aigc_hub_handler_errors", "Handler runs that raised, by error class.", ["group", "error_class"]
)
RETRIES = Counter(
    "aigc_hub_retries", "Retries scheduled, in process or as delayed redelivery.", ["group", "kind"]
)
DEAD_LETTERS = Counter(
    "aigc_hub_dead_letters",
    "Records sent to the dead-letter queue.",
    ["group", "topic", "error_class"],
)
INBOX_DUPLICATES = Counter(
    "aigc_hub_inbox_duplicates",
    "Deliveries dropped because the inbox already had their mark.",
    ["group"],
)
PARKED_KEYS = Gauge("aigc_hub_parked_keys", "Keys parked for delayed redelivery.", ["group"])
COMMIT_BATCH = Histogram(
    "aigc_hub_commit_batch_size",
    "Events per group commit.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
