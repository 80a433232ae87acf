"""Prometheus metrics of the backbone, all named ``aigc_hub_*`` (documented in docs/metrics.md).

Metric objects are module-level on the default registry, as prometheus-client expects: one
set per process. Counters are declared without ``_total``; the exposition adds it.
Label values must stay few (group, topic, partition, class names): never ids or keys.

Who sets what: the relay (publish*), the consumer runtime (consumed, handler, retries, dead
letters, inbox, parked keys, commit batch), the stream runtime (stream*), the scanner runner
(lease*, scanner*), the lag monitor (consumer lag and age), the outbox scanner (outbox backlog
and age) and the admission gate. Nothing sets the pending dead letters gauge yet.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.metrics import MetricWrapperBase

# No ``*_created`` series: they double every counter and histogram for a reset time that
# Prometheus already infers, and the exposition stays exactly what docs/metrics.md lists.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Handler runs of AI jobs last seconds to minutes (seed 003: 3-30 s long tail), so the
# buckets reach 5 minutes; 30 s is a bucket bound because the P99 alert compares with it.
_DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300,
)  # fmt: skip


M = TypeVar("M", bound=MetricWrapperBase)


class Children(Generic[M]):
    """A metric's labelled children, each looked up once: ``labels()`` takes a lock on every
    call, too much for a per-event path. ``children("g1", "applied").inc()``."""

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._found: dict[tuple[str, ...], M] = {}

    def __call__(self, *labels: str) -> M:
        """The child of ``labels`` (made on first use)."""
        child = self._found.get(labels)
        if child is None:
            child = self._found[labels] = self.metric.labels(*labels)
        return child


# -- publish (outbox relay) ----------------------------------------------------------------

PUBLISHED = Counter(
    "aigc_hub_published_records", "Records the outbox relay published to the broker.", ["topic"]
)
PUBLISH_ERRORS = Counter(
    "aigc_hub_publish_errors",
    "Records in relay batches whose publish raised (the relay retries them).",
    ["topic", "error_class"],
)
PUBLISH_SECONDS = Histogram(
    "aigc_hub_publish_batch_duration_seconds",
    "Time to publish one relay batch to the broker, failed batches included.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# -- consume (consumer runtime) ------------------------------------------------------------

CONSUMED = Counter(
    "aigc_hub_consumed_records",
    "Records a consumer group finished (applied, duplicate, parked or dead-lettered).",
    ["group", "topic", "outcome"],
)
HANDLER_SECONDS = Histogram(
    "aigc_hub_handler_duration_seconds",
    "Handler run time including its commit.",
    ["group"],
    buckets=_DURATION_BUCKETS,
)
HANDLER_ERRORS = Counter(
    "aigc_hub_handler_errors", "Handler runs that raised, by error class.", ["group", "error_class"]
)
RETRIES = Counter(
    "aigc_hub_retries",
    "Retries scheduled; kind is in_process or delayed (parked for redelivery).",
    ["group", "kind"],
)
DEAD_LETTERS = Counter(
    "aigc_hub_dead_letters",
    "Records sent to the dead-letter queue; topic is the record's original topic.",
    ["group", "topic", "error_class"],
)
DEAD_LETTERS_PENDING = Gauge(
    "aigc_hub_dead_letters_pending",
    "Dead letters neither replayed nor dismissed, by consumer group and original topic.",
    ["group", "topic"],
)
INBOX_DUPLICATES = Counter(
    "aigc_hub_inbox_duplicates",
    "Deliveries dropped because the inbox already had their mark.",
    ["group"],
)
PARKED_KEYS = Gauge("aigc_hub_parked_keys", "Keys parked for delayed redelivery.", ["group"])
CONSUMER_PAUSED = Gauge(
    "aigc_hub_consumer_paused",
    "1 while a consumer group takes no records because its pause check says so (backpressure).",
    ["group"],
)
COMMIT_BATCH = Histogram(
    "aigc_hub_commit_batch_size",
    "Events per group commit.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
GROUPED_CALLS = Histogram(
    "aigc_hub_grouped_calls_size",
    "Service calls per grouped transaction.",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)

# -- stream groups (the telemetry road's runtime) ------------------------------------------

STREAM_RECORDS = Counter(
    "aigc_hub_stream_records",
    "Records handed to a stream group's handler; a batch handed again counts again.",
    ["group"],
)
BATCH_SIZE = Histogram(
    "aigc_hub_handler_batch_size",
    "Records per call of a batch consumer group's handler (retries alone not counted).",
    ["group"],
    buckets=(1, 2, 4, 8, 16, 32, 50, 64, 100, 128, 256),
)
BATCH_WAITING = Gauge(
    "aigc_hub_handler_batch_waiting",
    "Records of a batch consumer group waiting for a batch (grows while every call is busy).",
    ["group"],
)
STREAM_BATCHES = Counter(
    "aigc_hub_stream_batches",
    "Batches of records handed to a stream group's handler (empty ticks not counted).",
    ["group"],
)
STREAM_BATCH_SECONDS = Histogram(
    "aigc_hub_stream_batch_duration_seconds",
    "A stream handler's run time per call, failed calls and empty ticks included.",
    ["group"],
    buckets=_DURATION_BUCKETS,
)
STREAM_FAILURES = Counter(
    "aigc_hub_stream_failures",
    "Stream handler calls that raised, by error class (the batch is handed again).",
    ["group", "error_class"],
)

# -- backlogs (outbox scanner, lag monitor) ------------------------------------------------

OUTBOX_UNPUBLISHED = Gauge(
    "aigc_hub_outbox_unpublished", "Outbox rows committed but not yet published."
)
OUTBOX_OLDEST_AGE = Gauge(
    "aigc_hub_outbox_oldest_unpublished_age_seconds",
    "Age of the oldest unpublished outbox row; 0 when the outbox is empty.",
)
CONSUMER_LAG = Gauge(
    "aigc_hub_consumer_lag_records",
    "Records between a group's committed offset and the partition's end.",
    ["group", "topic", "partition"],
)
CONSUMER_LAG_AGE = Gauge(
    "aigc_hub_consumer_oldest_unconsumed_age_seconds",
    "Age of the oldest record a group has not committed yet; 0 when caught up.",
    ["group", "topic", "partition"],
)

# -- leases, scanners, admission -----------------------------------------------------------

LEASE_ACQUISITIONS = Counter(
    "aigc_hub_lease_acquisitions",
    "Times this process became the holder of a lease (renewals not counted).",
    ["lease"],
)
LEASE_LOSSES = Counter(
    "aigc_hub_lease_losses", "Times this process held a lease and then lost it.", ["lease"]
)
SCANNER_RUNS = Counter("aigc_hub_scanner_runs", "Scanner passes run by the leader.", ["scanner"])
SCANNER_REPAIRS = Counter(
    "aigc_hub_scanner_repairs", "Repairs a scanner made, by result.", ["scanner", "result"]
)
ADMISSION_OPEN = Gauge(
    "aigc_hub_admission_gate_open", "Admission gate of a pipeline: 1 open, 0 closed.", ["pipeline"]
)

ALL: tuple[MetricWrapperBase, ...] = (
    PUBLISHED,
    PUBLISH_ERRORS,
    PUBLISH_SECONDS,
    CONSUMED,
    HANDLER_SECONDS,
    HANDLER_ERRORS,
    RETRIES,
    DEAD_LETTERS,
    DEAD_LETTERS_PENDING,
    INBOX_DUPLICATES,
    PARKED_KEYS,
    CONSUMER_PAUSED,
    COMMIT_BATCH,
    GROUPED_CALLS,
    STREAM_RECORDS,
    BATCH_SIZE,
    BATCH_WAITING,
    STREAM_BATCHES,
    STREAM_BATCH_SECONDS,
    STREAM_FAILURES,
    OUTBOX_UNPUBLISHED,
    OUTBOX_OLDEST_AGE,
    CONSUMER_LAG,
    CONSUMER_LAG_AGE,
    LEASE_ACQUISITIONS,
    LEASE_LOSSES,
    SCANNER_RUNS,
    SCANNER_REPAIRS,
    ADMISSION_OPEN,
)


def all_metric_names() -> list[str]:
    """Every metric as exposed: counters with ``_total``, gauges and histograms by base name."""
    names: list[str] = []
    for metric in ALL:
        for family in metric.describe():
            names.append(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


@contextlib.contextmanager
def publishing(topics: Iterable[str]) -> Iterator[None]:
    """Time one relay batch of records on ``topics`` (one entry per record) and count it.

    On success each topic's records count as published; if the body raises, they count as
    publish errors under the exception's class and the exception propagates unchanged.
    """
    per_topic = Tally(topics)
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        for topic, n in per_topic.items():
            PUBLISH_ERRORS.labels(topic, type(exc).__name__).inc(n)
        raise
    else:
        for topic, n in per_topic.items():
            PUBLISHED.labels(topic).inc(n)
    finally:
        PUBLISH_SECONDS.observe(time.perf_counter() - started)
