"""The adapter for the ``local`` provider (``aigc-hub provider serve``), over httpx.

It maps the provider's job JSON to :class:`~.base.ProviderResult`, its errors to retry
classes, and downloads outputs only from the provider's own origin. The provider keeps one
job per request key, so a submit whose answer was lost is found again by
``GET /v1/jobs?request_key=...`` (an empty list confirms it was never taken).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from aigc_hub.pipelines.generation.adapters import base, fetch, hosted
from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    FetchedFile,
    GenerationRequest,
    ModelCapability,
    NormalizedStatus,
    OutputAsset,
    PreparedInput,
    ProviderError,
    ProviderResult,
    RetryClass,
)

#: The provider's price list: credits per second of video by frame size.
CREDITS_PER_SECOND: Mapping[tuple[int, int], int] = {
    (160, 90): 1,
    (320, 180): 2,
    (640, 360): 4,
    (1280, 720): 8,
}
DEFAULT_MODELS: tuple[ModelCapability, ...] = (
    ModelCapability(
        model="local-v1",
        modes=frozenset({"text_to_video"}),
        max_duration_s=10,
        resolutions=frozenset(CREDITS_PER_SECOND),
        credits_per_second=min(CREDITS_PER_SECOND.values()),
    ),
)
_STATUSES = {
    "queued": NormalizedStatus.ACCEPTED,
    "running": NormalizedStatus.RUNNING,
    "succeeded": NormalizedStatus.SUCCEEDED,
    "failed": NormalizedStatus.FAILED,
    "canceled": NormalizedStatus.CANCELED,
}
#: Job failure codes worth another attempt (the model or machine hiccupped, not the input).
TRANSIENT_JOB_ERRORS = frozenset({"internal_error", "render_failed", "capacity"})


def _ms(stamp: object) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _error_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
        code = body["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


class LocalProviderAdapter:
    """:class:`~.base.ProviderAdapter` for the local provider at ``base_url``."""

    name = "local"

    def __init__(
        self,
        base_url: str,
        *,
        submit_timeout_s: float = 10.0,
        query_timeout_s: float = 5.0,
        http: httpx.AsyncClient | None = None,
        models: Sequence[ModelCapability] = DEFAULT_MODELS,
        output: fetch.OutputFetch | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._output = output or fetch.OutputFetch()
        self._egress = self._output.fetcher()
        self._origin = fetch.origin_of(self.base_url)
        self.submit_timeout_s = submit_timeout_s
        self.query_timeout_s = query_timeout_s
        self._models = {m.model: m for m in models}
        self._owns_http = http is None
        # trust_env=False: a proxy from the environment must not sit between us and it
        self._http = http or httpx.AsyncClient(trust_env=False, follow_redirects=False)

    # -- pure ------------------------------------------------------------------------------

    def capabilities(self) -> list[ModelCapability]:
        """The models this provider serves."""
        return list(self._models.values())

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise CapabilityError naming ``model``, ``mode``, ``duration_s`` or ``resolution``."""
        model = self._models.get(request.model)
        if model is None:
            raise CapabilityError("model", f"unknown model {request.model!r}")
        if request.mode not in model.modes:
            raise CapabilityError("mode", f"{request.model} does not do {request.mode!r}")
        if not 1 <= request.duration_s <= model.max_duration_s:
            raise CapabilityError("duration_s", f"must be 1..{model.max_duration_s} s")
        if (request.width, request.height) not in model.resolutions:
            raise CapabilityError("resolution", f"{request.width}x{request.height} not offered")

    def estimate_cost(self, request: GenerationRequest) -> int:
        """duration × the per-second price of the frame size (what the provider charges)."""
        self.validate_capability(request)
        return request.duration_s * CREDITS_PER_SECOND[(request.width, request.height)]

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """A verified ``job.updated`` webhook as a result; a malformed one is PERMANENT."""
        try:
            event = json.loads(body)
            if event.get("type") != "job.updated" or not isinstance(event.get("data"), dict):
                raise ValueError("not a job.updated event")
            return self._normalize(event["data"], None)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError(
                f"malformed callback: {exc}",
                retry_class=RetryClass.PERMANENT,
                code="malformed_callback",
            ) from None

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """429 → RATE_LIMITED, 5xx and connect errors → RETRYABLE, other 4xx → PERMANENT.

        During ``submit``, an error after the request may have reached the provider (read
        timeout, dropped connection) is UNKNOWN_OUTCOME: reconcile with :meth:`query`.
        The table is the one every adapter shares (:func:`.hosted.classify`).
        """
        return hosted.classify(error, during=during, code_of=_error_code)

    # -- calls -----------------------------------------------------------------------------

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """The ``POST /v1/jobs`` body (text to video: nothing to upload)."""
        self.validate_capability(request)
        body: dict[str, Any] = {
            "request_key": request.request_key,
            "model": request.model,
            "mode": request.mode,
            "prompt": request.prompt,
            "duration_s": request.duration_s,
            "width": request.width,
            "height": request.height,
        }
        if request.callback_url:
            body["callback_url"] = request.callback_url
        return PreparedInput(request=request, body=body)

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Create the job (or get the one already under the request key).

        Raises ProviderError; UNKNOWN_OUTCOME when the answer was lost after sending.
        """
        key = prepared.request.request_key
        result = await self._call(
            "submit",
            "POST",
            "/v1/jobs",
            self.submit_timeout_s,
            json=dict(prepared.body),
            headers={"Idempotency-Key": key},
        )
        return self._result(result, estimated=self.estimate_cost(prepared.request))

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """By job id when known, else (or when the id is unknown) by request key.

        NOT_FOUND means the provider confirms it never took ``request_key``.
        """
        if provider_job_id:
            try:
                job = await self._call(
                    "query", "GET", f"/v1/jobs/{quote(provider_job_id, safe='')}",
                    self.query_timeout_s,
                )  # fmt: skip
                return self._result(job)
            except ProviderError as exc:
                if exc.code != "job_not_found":
                    raise
        found = await self._call(
            "query", "GET", "/v1/jobs", self.query_timeout_s, params={"request_key": request_key}
        )
        jobs = found.get("jobs")
        if not isinstance(jobs, list):
            raise ProviderError("query: no jobs list", retry_class=RetryClass.RETRYABLE)
        if not jobs:
            return ProviderResult(None, NormalizedStatus.NOT_FOUND, raw_status="absent")
        return self._result(min(jobs, key=lambda j: str(j.get("created_at"))))

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Ask the provider to cancel; a job that already finished keeps its final status."""
        job = await self._call(
            "cancel",
            "POST",
            f"/v1/jobs/{quote(provider_job_id, safe='')}/cancel",
            self.query_timeout_s,
        )
        return self._result(job)

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Stream the asset to ``dest`` (via a temporary file), measuring size and sha256.

        Only the provider's own origin is fetched, and it is trusted to be on loopback:
        ``base_url`` is the operator's ``local_provider_url``, nothing a provider answer
        can change. Redirects are followed only within that origin; more than ``max_bytes``
        aborts (PERMANENT); 403/410 is ``output_expired`` (RETRYABLE).
        """
        try:
            return await fetch.fetch_to_file(
                self._egress,
                asset.url,
                dest,
                allowed_origins=[self._origin],
                trusted_origins=[self._origin, *self._output.trusted_origins],
                max_bytes=max_bytes,
                timeout_s=self.query_timeout_s,
                deadline_s=self._output.deadline_s,
                content_type=asset.content_type,
            )
        except Exception as exc:
            raise self.classify_error(exc, during="fetch_output") from exc

    async def close(self) -> None:
        """Close the HTTP client if this adapter made it."""
        if self._owns_http:
            await self._http.aclose()

    # -- internals -------------------------------------------------------------------------

    async def _call(
        self, during: str, method: str, path: str, timeout_s: float, **kwargs: Any
    ) -> dict[str, Any]:
        try:
            response = await self._http.request(
                method, self.base_url + path, timeout=timeout_s, **kwargs
            )
            response.raise_for_status()
            body = response.json()
        except Exception as exc:
            raise self.classify_error(exc, during=during) from exc
        if not isinstance(body, dict):
            raise ProviderError(
                f"{during}: body is not an object", retry_class=RetryClass.RETRYABLE
            )
        return body

    def _result(self, job: Mapping[str, Any], *, estimated: int | None = None) -> ProviderResult:
        try:
            return self._normalize(job, estimated)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProviderError(
                f"malformed job: {type(exc).__name__}: {exc}",
                retry_class=RetryClass.RETRYABLE,
                code="malformed_response",
            ) from None

    def _normalize(self, job: Mapping[str, Any], estimated: int | None) -> ProviderResult:
        raw_status = str(job["status"])
        status = _STATUSES.get(raw_status, NormalizedStatus.UNKNOWN)
        error = job.get("error") or {}
        code = error.get("code") if isinstance(error, dict) else None
        retry = RetryClass.NONE
        if status == NormalizedStatus.FAILED:
            transient = code in TRANSIENT_JOB_ERRORS
            retry = RetryClass.RETRYABLE if transient else RetryClass.PERMANENT
        assets: tuple[OutputAsset, ...] = ()
        output = job.get("output")
        if isinstance(output, dict) and output.get("url"):
            assets = (
                OutputAsset(
                    url=str(output["url"]),
                    content_type=output.get("content_type"),
                    expires_at_ms=_ms(output.get("expires_at")),
                    size_bytes=output.get("size_bytes"),
                ),
            )
        progress = job.get("progress")
        return ProviderResult(
            provider_job_id=str(job["id"]),
            normalized_status=status,
            progress=float(progress) if isinstance(progress, int | float) else None,
            retry_class=retry,
            provider_error_code=code,
            output_assets=assets,
            estimated_cost=estimated,
            actual_cost=job.get("cost") if status == NormalizedStatus.SUCCEEDED else None,
            raw_response_ref=f"local:{job['id']}#{job.get('sequence')}",
            raw_status=raw_status,
            observed_at_ms=_ms(job.get("updated_at")),
        )


_: type[base.ProviderAdapter] = LocalProviderAdapter  # the adapter satisfies the contract
