"""What the fake provider is told to do (:class:`JobScript`) and what it holds and records
(:class:`FakeJob`, :class:`Call`)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from aigc_hub.pipelines.generation.adapters.base import NormalizedStatus
from aigc_hub.testing.media import fake_video

N = NormalizedStatus


class Submit(enum.StrEnum):
    """What one submit call does."""

    ACCEPT = "accept"  # job created, queued (ACCEPTED)
    RUN = "run"  # job created and already RUNNING
    FINISH = "finish"  # job created and already SUCCEEDED
    #: Job created, but the answer never reaches the hub (UNKNOWN_OUTCOME).
    TIMEOUT_AFTER_ACCEPT = "timeout_after_accept"
    #: The request never reached the provider (UNKNOWN_OUTCOME; a lookup finds nothing).
    TIMEOUT_BEFORE_ACCEPT = "timeout_before_accept"
    #: Job created, the answer names a status the adapter does not know (UNKNOWN).
    UNRECOGNIZED = "unrecognized"
    REJECT = "reject"  # PERMANENT, no job (invalid input, policy refusal)
    RATE_LIMITED = "rate_limited"  # 429, no job
    UNAVAILABLE = "unavailable"  # 5xx, no job (RETRYABLE)


class Cancel(enum.StrEnum):
    """What a cancel call does to a job still running."""

    STOP = "stop"  # the job ends CANCELED
    IGNORE = "ignore"  # the job keeps running (the answer is its current status)
    FINISH = "finish"  # it finished before the cancel took effect (SUCCEEDED)


@dataclass(frozen=True)
class Step:
    """A job status a query moves the job to (progress 0..1; error code when FAILED)."""

    status: NormalizedStatus
    progress: float | None = None
    error_code: str | None = None


@dataclass(frozen=True)
class JobScript:
    """How the provider treats the requests of one prompt (or one request key).

    ``submit`` answers are used one per submit call, the last one repeating. Every query of
    a job that is not finished moves it to the next of ``steps`` first, then answers.
    """

    submit: Sequence[Submit] = (Submit.ACCEPT,)
    steps: Sequence[Step] = (Step(N.RUNNING, 0.5), Step(N.SUCCEEDED, 1.0))
    cancel: Cancel = Cancel.STOP
    output: bytes = field(default_factory=fake_video)
    #: Fetches refused as an expired URL (RETRYABLE) before one succeeds.
    expired_fetches: int = 0
    #: What the provider reports it charged when the job succeeds (None: says nothing).
    actual_cost: int | None = None


@dataclass
class FakeJob:
    """A job held by the fake provider."""

    id: str
    request_key: str
    prompt: str
    script: JobScript
    status: NormalizedStatus
    progress: float | None = None
    error_code: str | None = None
    #: The provider's own clock: grows with every change (orders observations).
    version: int = 0
    steps_taken: int = 0
    fetches: int = 0


@dataclass(frozen=True)
class Call:
    """One call the hub made: ``method`` with the request key or job id it named."""

    method: str
    request_key: str | None = None
    job_id: str | None = None
