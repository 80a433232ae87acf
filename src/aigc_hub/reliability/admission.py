"""The admission gate: refuse new work for a pipeline whose consumers cannot keep up.

Back-pressure goes upstream (seed 004 §3.9.4): instead of queueing work it cannot serve, the
API answers 429/503 with ``Retry-After`` for that pipeline while the lag monitor says one of
its (group, topic) pairs is over its threshold, or while one of the pipeline's own checks
refuses (an AI service it depends on answered "overloaded"). The retry-after estimate is
the lag over the threshold divided by the observed drain rate, clamped to [1, 300] seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aigc_hub.observability import metrics
from aigc_hub.pipeline import AdmissionCheck
from aigc_hub.reliability.lag import LagMonitor

MIN_RETRY_S = 1
MAX_RETRY_S = 300
UNKNOWN_RETRY_S = 30


@dataclass(frozen=True)
class Admission:
    """The gate's answer: admit, or come back after ``retry_after_s`` seconds."""

    admitted: bool
    retry_after_s: int = 0
    reason: str = ""
    #: True when the refusal is because the broker cannot be reached (the API answers 503).
    broker_unreachable: bool = False


class AdmissionGate:
    """Answers ``admit(pipeline)`` from the lag monitor's latest sample."""

    def __init__(self, monitor: LagMonitor) -> None:
        self.monitor = monitor
        self._checks: dict[str, list[AdmissionCheck]] = {}

    def add_check(self, pipeline: str, check: AdmissionCheck) -> None:
        """Ask ``check`` too before admitting work for ``pipeline`` (its own overload)."""
        self._checks.setdefault(pipeline, []).append(check)

    def admit(self, pipeline: str) -> Admission:
        """Admit, or a retry-after for the pipeline's own refusal or its worst breach."""
        for check in self._checks.get(pipeline, ()):
            refused = check()
            if refused is not None:
                metrics.ADMISSION_OPEN.labels(pipeline).set(0)
                wait, reason = refused
                return Admission(False, max(MIN_RETRY_S, min(MAX_RETRY_S, wait)), reason)
        if not self.monitor.broker_reachable:
            metrics.ADMISSION_OPEN.labels(pipeline).set(0)
            return Admission(
                False,
                UNKNOWN_RETRY_S,
                "the message broker cannot be reached",
                broker_unreachable=True,
            )
        breaches = self.monitor.overloaded_pipelines().get(pipeline, [])
        metrics.ADMISSION_OPEN.labels(pipeline).set(0 if breaches else 1)
        if not breaches:
            return Admission(True)
        worst = max(breaches, key=lambda b: b.lag)
        threshold = self.monitor.thresholds.get(worst.topic)
        excess = worst.lag - (threshold.max_lag or 0) // 2 if threshold else worst.lag
        rate = self.monitor.drain_per_s(worst.group, worst.topic)
        wait = math.ceil(max(excess, 1) / rate) if rate > 0 else UNKNOWN_RETRY_S
        wait = max(MIN_RETRY_S, min(MAX_RETRY_S, wait))
        reason = (
            f"{pipeline}: group {worst.group} is {worst.lag} records behind on {worst.topic}"
            f" (oldest {worst.oldest_age_s:.0f} s)"
        )
        return Admission(False, wait, reason)
