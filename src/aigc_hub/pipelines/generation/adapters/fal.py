"""The adapter for fal.ai's queue API (``https://queue.fal.run``).

A job is a queue *request*: ``POST /{endpoint}`` (the model's endpoint id, e.g.
``fal-ai/kling-video/v1.6/standard/text-to-video``) answers ``request_id`` and its
status/response/cancel URLs. Those live under the *app* (the endpoint's first two path
segments): ``GET /{app}/requests/{id}/status`` → ``IN_QUEUE | IN_PROGRESS | COMPLETED``,
``GET /{app}/requests/{id}`` → the result (``video.url`` on ``*.fal.media``), ``PUT
/{app}/requests/{id}/cancel``. Auth is ``Authorization: Key …``.

So that a later query needs nothing but the job id, the id we keep is the request's path,
``{app}/requests/{request_id}``; we never follow the URLs fal returns (we rebuild them on
our own base URL).

What fal cannot do: look a request up by a key of ours (no idempotency key, no listing), so
``query`` without a job id is UNKNOWN and a lost submit waits for the hub's give-up
deadline; report a cost (the price list is charged); send webhooks we can verify with a
shared secret (fal signs with ED25519 keys from a JWKS), so fal jobs are polled and
``parse_callback`` refuses every body.
"""

from __future__ import annotations

import dataclasses
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

DEFAULT_BASE_URL = "https://queue.fal.run"
DEFAULT_OUTPUT_HOSTS = ("https://fal.media", "https://*.fal.media")
_ASPECTS = {(1280, 720): "16:9", (720, 1280): "9:16", (720, 720): "1:1"}
# Prices transcribed from the models' pages (1 credit = 1 US cent, rounded up per second).
DEFAULT_MODELS: tuple[ModelCapability, ...] = (
    ModelCapability(
        model="fal-ai/kling-video/v1.6/standard",
        modes=frozenset({"text_to_video", "image_to_video"}),
        max_duration_s=10,
        resolutions=frozenset(_ASPECTS),
        credits_per_second=5,
        callbacks=False,
    ),
    ModelCapability(
        model="fal-ai/minimax/video-01",
        modes=frozenset({"text_to_video", "image_to_video"}),
        max_duration_s=6,
        resolutions=frozenset({(1280, 720)}),
        credits_per_second=9,
        callbacks=False,
    ),
)
DURATIONS: Mapping[str, frozenset[int]] = {
    "fal-ai/kling-video/v1.6/standard": frozenset({5, 10}),
    "fal-ai/minimax/video-01": frozenset({6}),
}
#: Endpoint id per (model, mode): on fal the mode is part of the endpoint.
ENDPOINTS: Mapping[tuple[str, str], str] = {
    ("fal-ai/kling-video/v1.6/standard", "text_to_video"): (
        "fal-ai/kling-video/v1.6/standard/text-to-video"
    ),
    ("fal-ai/kling-video/v1.6/standard", "image_to_video"): (
        "fal-ai/kling-video/v1.6/standard/image-to-video"
    ),
    ("fal-ai/minimax/video-01", "text_to_video"): "fal-ai/minimax/video-01",
    ("fal-ai/minimax/video-01", "image_to_video"): "fal-ai/minimax/video-01/image-to-video",
}
_STATUSES = {
    "IN_QUEUE": NormalizedStatus.ACCEPTED,
    "IN_PROGRESS": NormalizedStatus.RUNNING,
    "COMPLETED": NormalizedStatus.SUCCEEDED,  # unless the result is an error
    "CANCELED": NormalizedStatus.CANCELED,
    "CANCELLED": NormalizedStatus.CANCELED,
}


def error_code(response: httpx.Response) -> str | None:
    """fal errors are ``{"detail": …}``; a validation error's first ``type`` is the code."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        kind = detail[0].get("type")
        return kind if isinstance(kind, str) else None
    return None


def job_path(provider_job_id: str) -> str:
    """``/{app}/requests/{id}`` from our job id, refusing anything else (no path tricks)."""
    app, sep, request_id = provider_job_id.rpartition("/requests/")
    parts = app.split("/")
    if not sep or len(parts) != 2 or not all(parts) or not request_id or "/" in request_id:
        raise ProviderError("not a fal job id", retry_class=RetryClass.PERMANENT, code="bad_job_id")
    return f"/{quote(app)}/requests/{quote(request_id, safe='')}"


class FalAdapter:
    """:class:`~.base.ProviderAdapter` for fal's queue; polled only (see module)."""

    name = "fal"

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
    ) -> None:
        self.submit_timeout_s = submit_timeout_s
        self.query_timeout_s = query_timeout_s
        self._models = {m.model: m for m in models}
        headers = {"Authorization": f"Key {api_key}"}
        self._http = hosted.VendorHttp(
            base_url, headers, code_of=error_code, output_hosts=output_hosts, http=http,
            output=output,
        )  # fmt: skip

    # -- pure ------------------------------------------------------------------------------

    def capabilities(self) -> list[ModelCapability]:
        """The models served (``callbacks=False``: fal jobs are polled)."""
        return list(self._models.values())

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise CapabilityError naming ``model``, ``mode``, ``duration_s`` or ``resolution``."""
        hosted.check_capability(self._models, DURATIONS, request)

    def estimate_cost(self, request: GenerationRequest) -> int:
        """Output seconds × the model's per-second price (also what a success costs)."""
        model = hosted.check_capability(self._models, DURATIONS, request)
        return request.duration_s * model.credits_per_second

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """Always PERMANENT: fal webhooks are not accepted (no shared-secret signature)."""
        raise ProviderError(
            "fal callbacks are not accepted; fal jobs are polled",
            retry_class=RetryClass.PERMANENT,
            code="callbacks_unsupported",
        )

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """See :func:`.hosted.classify`; validation errors keep fal's ``type`` as the code."""
        return hosted.classify(error, during=during, code_of=error_code)

    # -- calls -----------------------------------------------------------------------------

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """The endpoint's input object (fal takes it as the whole body)."""
        self.validate_capability(request)
        body: dict[str, Any] = {"prompt": request.prompt}
        if len(DURATIONS.get(request.model, ())) > 1:
            body["duration"] = str(request.duration_s)  # fal's kling takes "5" | "10"
        if len(self._models[request.model].resolutions) > 1:
            body["aspect_ratio"] = _ASPECTS[(request.width, request.height)]
        if request.mode == "image_to_video":
            body["image_url"] = request.reference_urls[0]
        return PreparedInput(request=request, body=body)

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Enqueue the request (not idempotent: fal has no idempotency key)."""
        request = prepared.request
        endpoint = ENDPOINTS[(request.model, request.mode)]
        answer, response = await self._http.call(
            "submit", "POST", f"/{endpoint}", self.submit_timeout_s, json=dict(prepared.body)
        )
        try:
            app = "/".join(endpoint.split("/")[:2])
            job_id = f"{app}/requests/{answer['request_id']}"
        except (KeyError, TypeError) as exc:
            raise hosted.malformed("submit", exc) from None
        return ProviderResult(
            provider_job_id=job_id,
            normalized_status=NormalizedStatus.ACCEPTED,
            estimated_cost=self.estimate_cost(request),
            raw_response_ref=f"fal:{answer['request_id']}#submitted",
            raw_status="IN_QUEUE",
            observed_at_ms=hosted.date_ms(response),
        )

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """The request's status, and its result once COMPLETED; UNKNOWN without a job id."""
        if not provider_job_id:
            return ProviderResult(None, NormalizedStatus.UNKNOWN, raw_status="no_lookup")
        path = job_path(provider_job_id)
        status, response = await self._http.call(
            "query", "GET", f"{path}/status", self.query_timeout_s
        )
        try:
            raw = str(status["status"])
        except (KeyError, TypeError) as exc:
            raise hosted.malformed("query", exc) from None
        seen = _STATUSES.get(raw, NormalizedStatus.UNKNOWN)
        if raw == "COMPLETED" and not status.get("error"):
            return await self._completed(provider_job_id, path)
        code = status.get("error_type") if raw == "COMPLETED" else None
        return self._result(provider_job_id, seen, raw, response, code=code)

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Ask to cancel, then answer the request's status (fal may finish it anyway)."""
        path = job_path(provider_job_id)
        try:
            await self._http.call("cancel", "PUT", f"{path}/cancel", self.query_timeout_s)
        except ProviderError as exc:
            if exc.retry_class is not RetryClass.PERMANENT:
                raise  # 400 ALREADY_COMPLETED is fine: the status says how it ended
        return await self.query(provider_job_id=provider_job_id, request_key="")

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Stream from the configured delivery hosts only (``*.fal.media``)."""
        return await self._http.fetch(
            asset, dest, max_bytes=max_bytes, timeout_s=self.query_timeout_s
        )

    async def close(self) -> None:
        """Close the HTTP client if this adapter made it."""
        await self._http.close()

    # -- internals -------------------------------------------------------------------------

    async def _completed(self, job_id: str, path: str) -> ProviderResult:
        try:
            result, response = await self._http.call("query", "GET", path, self.query_timeout_s)
        except ProviderError as exc:
            if exc.retry_class is not RetryClass.PERMANENT:
                raise
            # the run ended in an error: the result endpoint answers it as a 4xx
            return self._result(job_id, NormalizedStatus.FAILED, "COMPLETED", None, code=exc.code)
        try:
            video = result["video"]
            asset = OutputAsset(
                url=str(video["url"]),
                content_type=video.get("content_type"),
                size_bytes=video.get("file_size"),
            )
        except (KeyError, TypeError) as exc:
            raise hosted.malformed("query", exc) from None
        done = self._result(job_id, NormalizedStatus.SUCCEEDED, "COMPLETED", response)
        # fal reports no cost (nor the input) with a result: actual_cost stays None and the
        # reservation made from the price list is what is charged
        return dataclasses.replace(done, output_assets=(asset,))

    def _result(
        self,
        job_id: str,
        status: NormalizedStatus,
        raw: str,
        response: httpx.Response | None,
        *,
        code: object = None,
    ) -> ProviderResult:
        failed = status is NormalizedStatus.FAILED or (raw == "COMPLETED" and code)
        return ProviderResult(
            provider_job_id=job_id,
            normalized_status=NormalizedStatus.FAILED if failed else status,
            progress=1.0 if status is NormalizedStatus.SUCCEEDED and not failed else None,
            retry_class=RetryClass.PERMANENT if failed else RetryClass.NONE,
            provider_error_code=(str(code) if code else "request_failed") if failed else None,
            raw_response_ref=f"fal:{job_id.rpartition('/')[2]}#{raw}",
            raw_status=raw,
            observed_at_ms=hosted.date_ms(response) if response is not None else None,
        )


_: type[base.ProviderAdapter] = FalAdapter  # the adapter satisfies the contract
