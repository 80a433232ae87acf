"""vistack's own Prometheus metrics (docs/metrics.md lists them with the backbone's).

Module-level on the default registry, like the backbone's: one set per process, exposed by
the same exporter. Labels stay few: outcomes, never ids.
"""

from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.metrics import MetricWrapperBase

TRANSCODES = Counter(
    "aigc_hub_vistack_transcodes",
    "Transcode attempts the workers finished, by outcome: published, retry (the transcoder "
    "was unavailable: the retry ZSET has it), refused (the media cannot be transcoded), "
    "fenced (a newer lease took the video over: this worker's result was refused), skipped "
    "(done already, or another worker holds the lease).",
    ["outcome"],
)
GAVE_UP = Counter(
    "aigc_hub_vistack_transcode_gave_up",
    "Videos whose transcode went to the DLQ after the last attempt (each one alerted).",
)
RETRIES_DISPATCHED = Counter(
    "aigc_hub_vistack_retries_dispatched",
    "Transcode messages the retry dispatcher re-published from the ZSET.",
)
WATCHDOG_REQUEUED = Counter(
    "aigc_hub_vistack_watchdog_requeued",
    "Videos the watchdog put back in the retry ZSET, by why: processing (no lease for too "
    "long) or pending (waited too long).",
    ["reason"],
)

ALL: tuple[MetricWrapperBase, ...] = (TRANSCODES, GAVE_UP, RETRIES_DISPATCHED, WATCHDOG_REQUEUED)
