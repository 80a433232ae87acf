"""The provider adapter contract (seed 004 §3.2.6).

An adapter owns one provider's *protocol*: request shapes, status names, error codes,
callback bodies, output download. It never decides which provider runs a task (the
scheduler does), what a task's state is (the state handler does) or what anything costs the
tenant (the ledger does). Everything it returns is the normalized :class:`ProviderResult`.

Submit is the one call that must not be blindly repeated: it carries a stable
``request_key`` so a timed-out submit can be found again by :meth:`ProviderAdapter.query`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from aigc_hub.core import errors


class NormalizedStatus(enum.StrEnum):
    """A provider job's status in our words, whatever the provider calls it."""

    ACCEPTED = "ACCEPTED"  # queued at the provider, not started
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    #: The provider confirms it holds no job for the request key: the submit was not taken.
    NOT_FOUND = "NOT_FOUND"
    #: We could not learn the outcome (a submit that timed out, a dropped connection).
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = {NormalizedStatus.SUCCEEDED, NormalizedStatus.FAILED, NormalizedStatus.CANCELED}


class RetryClass(enum.StrEnum):
    """What the caller may do after a call, decided by :meth:`ProviderAdapter.classify_error`."""

    NONE = "none"  # the call succeeded
    RETRYABLE = "retryable"  # transient (5xx, reset, query timeout): try again with backoff
    RATE_LIMITED = "rate_limited"  # 429: wait at least ``retry_after_s``
    PERMANENT = "permanent"  # invalid input, policy refusal, auth: retrying cannot help
    UNKNOWN_OUTCOME = "unknown_outcome"  # a submit may or may not have been taken


@dataclass(frozen=True)
class OutputAsset:
    """A result file at the provider: a temporary URL, never stored in business rows."""

    url: str
    content_type: str | None = None
    expires_at_ms: int | None = None
    size_bytes: int | None = None


@dataclass(frozen=True)
class ProviderResult:
    """The normalized answer of every adapter call (seed 004 §3.2.6)."""

    provider_job_id: str | None
    normalized_status: NormalizedStatus
    progress: float | None = None  # 0..1
    retry_class: RetryClass = RetryClass.NONE
    provider_error_code: str | None = None
    output_assets: tuple[OutputAsset, ...] = ()
    estimated_cost: int | None = None  # credits
    actual_cost: int | None = None  # credits
    raw_response_ref: str | None = None
    raw_status: str | None = None
    #: The provider's own clock for this observation, when it tells one (orders observations).
    observed_at_ms: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """What a task asks of a provider, already validated and normalized by the task service."""

    task_id: str
    request_key: str  # stable across retries of the same attempt's submit
    mode: str  # "text_to_video" | "image_to_video"
    model: str
    prompt: str
    duration_s: int
    width: int
    height: int
    reference_urls: tuple[str, ...] = ()
    callback_url: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedInput:
    """A provider-specific request body built from a :class:`GenerationRequest`."""

    request: GenerationRequest
    body: Mapping[str, Any]


@dataclass(frozen=True)
class ModelCapability:
    """One model a provider offers, and the limits it accepts."""

    model: str
    modes: frozenset[str]
    max_duration_s: int
    resolutions: frozenset[tuple[int, int]]
    credits_per_second: int
    callbacks: bool = True  # does the provider send webhooks for this model?


class CapabilityError(errors.InvalidInput):
    """The request asks for something the provider cannot do; names the offending field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(field_name, f"{field_name}: {message}")


class ProviderError(errors.HubError):
    """A provider call failed; ``retry_class`` says what may be done next."""

    def __init__(
        self,
        message: str,
        *,
        retry_class: RetryClass,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_class = retry_class
        self.code = code
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class FetchedFile:
    """A result file downloaded to local disk, with what was measured while streaming it."""

    path: Path
    size_bytes: int
    sha256: str
    content_type: str | None


@runtime_checkable
class ProviderAdapter(Protocol):
    """One AI video provider. Methods that talk to it are async; the rest are pure."""

    name: str

    def capabilities(self) -> list[ModelCapability]:
        """The models this provider serves."""
        ...

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise :class:`CapabilityError` naming the field the provider cannot serve."""
        ...

    def estimate_cost(self, request: GenerationRequest) -> int:
        """Credits this request is expected to cost (reserved at submit)."""
        ...

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """Build the provider's request body (upload or sign reference inputs if needed)."""
        ...

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Create the provider job, idempotently under ``request.request_key`` where possible."""
        ...

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """The job's current status; by request key when the job id is unknown (reconcile)."""
        ...

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Ask the provider to stop the job; the answer may still be RUNNING."""
        ...

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """Normalize a webhook body whose signature the gateway has already verified."""
        ...

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """Map any exception of a call (``during`` = "submit", "query"…) to a ProviderError."""
        ...

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Stream a result file to ``dest`` from the provider's own configured host only.

        Refuses any other host or scheme (SSRF), redirects off that host and bodies over
        ``max_bytes``; an expired URL raises ProviderError (RETRYABLE: query again for a
        fresh one)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
