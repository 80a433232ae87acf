"""The adapter for Runway's API (``https://api.dev.runwayml.com``).

A job is a *task*: ``POST /v1/image_to_video`` or ``/v1/text_to_video`` answers ``{"id"}``;
``GET /v1/tasks/{id}`` shows ``PENDING | THROTTLED | RUNNING | SUCCEEDED | FAILED |
CANCELLED`` with ``progress`` (0..1) while running, ``output`` (URLs) on success and
``failure`` / ``failureCode`` on failure; ``DELETE /v1/tasks/{id}`` cancels a running task
but *deletes* a finished one. Every call carries ``Authorization: Bearer …`` and
``X-Runway-Version``.

What Runway cannot do: send webhooks (``callbacks=False``: tasks are polled and
``parse_callback`` refuses every body); look a task up by a key of ours (no idempotency key,
no listing), so ``query`` without a task id is UNKNOWN and a lost submit waits for the hub's
give-up deadline; report a task's cost (the price list is charged).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from aigc_hub.pipelines.generation.adapters import base, fetch, hosted
from aigc_hub.pipelines.generation.adapters.base import (
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

DEFAULT_BASE_URL = "https://api.dev.runwayml.com"
API_VERSION = "2024-11-06"
#: Runway serves outputs from a CloudFront distribution; set the one your account sees.
DEFAULT_OUTPUT_HOSTS = ("https://dnznrvs05pmza.cloudfront.net",)
_GEN4_RATIOS = {(1280, 720), (720, 1280), (1104, 832), (832, 1104), (960, 960), (1584, 672)}
# Prices transcribed from Runway's price list (1 credit = 1 US cent per second of video).
DEFAULT_MODELS: tuple[ModelCapability, ...] = (
    ModelCapability(
        model="gen4_turbo",
        modes=frozenset({"image_to_video"}),
        max_duration_s=10,
        resolutions=frozenset(_GEN4_RATIOS),
        credits_per_second=5,
        callbacks=False,
    ),
    ModelCapability(
        model="gen4.5",
        modes=frozenset({"text_to_video", "image_to_video"}),
        max_duration_s=10,
        resolutions=frozenset({(1280, 720), (720, 1280)}),
        credits_per_second=12,
        callbacks=False,
    ),
)
DURATIONS: Mapping[str, frozenset[int]] = {
    "gen4_turbo": frozenset({5, 10}),
    "gen4.5": frozenset({5, 10}),
}
_STATUSES = {
    "PENDING": NormalizedStatus.ACCEPTED,
    "THROTTLED": NormalizedStatus.ACCEPTED,  # queued behind the account's concurrency limit
    "RUNNING": NormalizedStatus.RUNNING,
    "SUCCEEDED": NormalizedStatus.SUCCEEDED,
    "FAILED": NormalizedStatus.FAILED,
    "CANCELLED": NormalizedStatus.CANCELED,
}


def error_code(response: httpx.Response) -> str | None:
    """Runway errors are ``{"error": "<message>"}`` with no code: the status names it."""
    return None


class RunwayAdapter:
    """:class:`~.base.ProviderAdapter` for Runway; polled only (see module)."""

    name = "runway"

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str = "",
        *,
        submit_timeout_s: float = 10.0,
        query_timeout_s: float = 10.0,
        http: httpx.AsyncClient | None = None,
        models: Sequence[ModelCapability] = DEFAULT_MODELS,
        output_hosts: Sequence[str] = DEFAULT_OUTPUT_HOSTS,
        output: fetch.OutputFetch | None = None,
        api_version: str = API_VERSION,
    ) -> None:
        self.submit_timeout_s = submit_timeout_s
        self.query_timeout_s = query_timeout_s
        self._models = {m.model: m for m in models}
        headers = {"Authorization": f"Bearer {api_key}", "X-Runway-Version": api_version}
        self._http = hosted.VendorHttp(
            base_url, headers, code_of=error_code, output_hosts=output_hosts, http=http,
            output=output,
        )  # fmt: skip

    # -- pure ------------------------------------------------------------------------------

    def capabilities(self) -> list[ModelCapability]:
        """The models served (``callbacks=False``: Runway has no webhooks)."""
        return list(self._models.values())

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise CapabilityError naming ``model``, ``mode``, ``duration_s`` or ``resolution``."""
        hosted.check_capability(self._models, DURATIONS, request)

    def estimate_cost(self, request: GenerationRequest) -> int:
        """Output seconds × the model's per-second price (also what a success costs)."""
        model = hosted.check_capability(self._models, DURATIONS, request)
        return request.duration_s * model.credits_per_second

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """Always PERMANENT: Runway sends no webhooks, so any body is not from Runway."""
        raise ProviderError(
            "Runway sends no callbacks; Runway tasks are polled",
            retry_class=RetryClass.PERMANENT,
            code="callbacks_unsupported",
        )

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """See :func:`.hosted.classify` (4xx codes are ``http_<status>``)."""
        return hosted.classify(error, during=during, code_of=error_code)

    # -- calls -----------------------------------------------------------------------------

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """The task body: model, prompt, ``ratio`` as ``"W:H"``, duration, first frame."""
        self.validate_capability(request)
        body: dict[str, Any] = {
            "model": request.model,
            "promptText": request.prompt,
            "ratio": f"{request.width}:{request.height}",
            "duration": request.duration_s,
        }
        if request.mode == "image_to_video":
            body["promptImage"] = request.reference_urls[0]
        return PreparedInput(request=request, body=body)

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Create the task (not idempotent: Runway has no idempotency key)."""
        path = f"/v1/{prepared.request.mode}"
        answer, response = await self._http.call(
            "submit", "POST", path, self.submit_timeout_s, json=dict(prepared.body)
        )
        try:
            task_id = str(answer["id"])
        except (KeyError, TypeError) as exc:
            raise hosted.malformed("submit", exc) from None
        return ProviderResult(
            provider_job_id=task_id,
            normalized_status=NormalizedStatus.ACCEPTED,
            estimated_cost=self.estimate_cost(prepared.request),
            raw_response_ref=f"runway:{task_id}#created",
            raw_status="PENDING",
            observed_at_ms=hosted.date_ms(response),
        )

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """The task by id; UNKNOWN without one (Runway has no lookup by our key)."""
        if not provider_job_id:
            return ProviderResult(None, NormalizedStatus.UNKNOWN, raw_status="no_lookup")
        task, response = await self._http.call(
            "query", "GET", f"/v1/tasks/{quote(provider_job_id, safe='')}", self.query_timeout_s
        )
        try:
            return self._normalize(task, response)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise hosted.malformed("query", exc) from None

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Cancel a task that is not final yet; a final one is left alone (DELETE would erase it).

        A task that finishes between our look and the DELETE is deleted by it: then the
        answer is CANCELED (its output is gone)."""
        current = await self.query(provider_job_id=provider_job_id, request_key="")
        if current.normalized_status.terminal:
            return current
        path = f"/v1/tasks/{quote(provider_job_id, safe='')}"
        await self._http.call("cancel", "DELETE", path, self.query_timeout_s)
        try:
            return await self.query(provider_job_id=provider_job_id, request_key="")
        except ProviderError as exc:
            if exc.code != "http_404":
                raise
            return ProviderResult(provider_job_id, NormalizedStatus.CANCELED, raw_status="deleted")

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Stream from the configured delivery hosts only."""
        return await self._http.fetch(
            asset, dest, max_bytes=max_bytes, timeout_s=self.query_timeout_s
        )

    async def close(self) -> None:
        """Close the HTTP client if this adapter made it."""
        await self._http.close()

    # -- internals -------------------------------------------------------------------------

    def _normalize(self, task: Mapping[str, Any], response: httpx.Response) -> ProviderResult:
        raw_status = str(task["status"])
        status = _STATUSES.get(raw_status, NormalizedStatus.UNKNOWN)
        code, retry = None, RetryClass.NONE
        if status is NormalizedStatus.FAILED:
            code = str(task.get("failureCode") or "task_failed")
            # INTERNAL.* is Runway's side (worth another attempt); SAFETY.*, ASSET.*, INPUT… not
            retry = RetryClass.RETRYABLE if code.startswith("INTERNAL") else RetryClass.PERMANENT
        done = status is NormalizedStatus.SUCCEEDED
        progress = task.get("progress")
        running = float(progress) if isinstance(progress, int | float) else None
        urls = task.get("output") if done else None
        return ProviderResult(
            provider_job_id=str(task["id"]),
            normalized_status=status,
            progress=1.0 if done else running,
            retry_class=retry,
            provider_error_code=code,
            output_assets=tuple(OutputAsset(url=str(u)) for u in urls or () if u),
            raw_response_ref=f"runway:{task['id']}#{raw_status}",
            raw_status=raw_status,
            # tasks carry only createdAt: the response's Date is Runway's clock for this look
            observed_at_ms=hosted.date_ms(response),
        )


_: type[base.ProviderAdapter] = RunwayAdapter  # the adapter satisfies the contract
