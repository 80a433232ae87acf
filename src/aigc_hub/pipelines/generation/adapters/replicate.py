"""The adapter for Replicate's predictions API (``https://api.replicate.com/v1``).

A job is a *prediction*: ``POST /v1/models/{owner}/{name}/predictions`` with ``input``,
``webhook`` and ``webhook_events_filter``; ``GET /v1/predictions/{id}``; ``POST
/v1/predictions/{id}/cancel``. Statuses ``starting | processing | succeeded | failed |
canceled``; the output is a URL on ``replicate.delivery``. Webhook bodies are the prediction
itself, signed with Standard Webhooks headers (verified by the gateway, not here).

Replicate has no idempotency key and no lookup by a key of ours, so the request key rides in
the ``webhook`` URL we send (``?request_key=K``), which every prediction echoes back.
:mod:`.replicate_reconcile` finds a prediction by it (see there for when NOT_FOUND is
confirmed); a submit is therefore *not* idempotent, but a lost one can be found again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from aigc_hub.pipelines.generation.adapters import base, fetch, hosted, replicate_reconcile
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

DEFAULT_BASE_URL = "https://api.replicate.com"
DEFAULT_OUTPUT_HOSTS = ("https://replicate.delivery", "https://*.replicate.delivery")
_ASPECTS = {(1280, 720): "16:9", (720, 1280): "9:16", (720, 720): "1:1"}
# Prices transcribed from the models' pages (1 credit = 1 US cent, rounded up per second).
DEFAULT_MODELS: tuple[ModelCapability, ...] = (
    ModelCapability(
        model="kwaivgi/kling-v1.6-standard",
        modes=frozenset({"text_to_video", "image_to_video"}),
        max_duration_s=10,
        resolutions=frozenset(_ASPECTS),
        credits_per_second=5,
    ),
    ModelCapability(
        model="minimax/video-01",
        modes=frozenset({"text_to_video", "image_to_video"}),
        max_duration_s=6,
        resolutions=frozenset({(1280, 720)}),
        credits_per_second=9,
    ),
)
DURATIONS: Mapping[str, frozenset[int]] = {
    "kwaivgi/kling-v1.6-standard": frozenset({5, 10}),
    "minimax/video-01": frozenset({6}),
}
#: The input field each model reads its first frame from.
IMAGE_FIELDS: Mapping[str, str] = {
    "kwaivgi/kling-v1.6-standard": "start_image",
    "minimax/video-01": "first_frame_image",
}
_STATUSES = {
    "starting": NormalizedStatus.ACCEPTED,
    "processing": NormalizedStatus.RUNNING,
    "succeeded": NormalizedStatus.SUCCEEDED,
    "failed": NormalizedStatus.FAILED,
    "canceled": NormalizedStatus.CANCELED,
    "aborted": NormalizedStatus.FAILED,  # ended before it started (e.g. a deadline)
}
#: Words in a failed prediction's ``error`` that mean another attempt may work.
_TRANSIENT = re.compile(r"timed? ?out|out of memory|cuda|internal|unavailable", re.I)
_PERCENT = re.compile(r"(\d{1,3})%")


def error_code(response: httpx.Response) -> str | None:
    """Replicate errors are problem details: the ``title`` as a snake_case code."""
    try:
        title = response.json().get("title")
    except (ValueError, AttributeError):
        return None
    if not isinstance(title, str):
        return None
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or None


def tagged_webhook(callback_url: str, request_key: str) -> str:
    """The callback URL carrying our request key (how a lost submit is found again)."""
    joiner = "&" if "?" in callback_url else "?"
    return f"{callback_url}{joiner}request_key={quote(request_key, safe='')}"


class ReplicateAdapter:
    """:class:`~.base.ProviderAdapter` for Replicate; async-safe, one HTTP client."""

    name = "replicate"

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
        reconcile_window_s: float = 7200.0,
        predict_second_credits: Mapping[str, float] | None = None,
    ) -> None:
        self.submit_timeout_s = submit_timeout_s
        self.query_timeout_s = query_timeout_s
        self.reconcile_window_s = reconcile_window_s
        self._models = {m.model: m for m in models}
        # models billed by GPU time instead of output seconds: credits per predict second
        self._predict_second_credits = dict(predict_second_credits or {})
        headers = {"Authorization": f"Bearer {api_key}"}
        self._http = hosted.VendorHttp(
            base_url, headers, code_of=error_code, output_hosts=output_hosts, http=http,
            output=output,
        )  # fmt: skip

    # -- pure ------------------------------------------------------------------------------

    def capabilities(self) -> list[ModelCapability]:
        """The models this account may run (callbacks: signed webhooks)."""
        return list(self._models.values())

    def validate_capability(self, request: GenerationRequest) -> None:
        """Raise CapabilityError naming ``model``, ``mode``, ``duration_s`` or ``resolution``."""
        hosted.check_capability(self._models, DURATIONS, request)

    def estimate_cost(self, request: GenerationRequest) -> int:
        """Output seconds × the model's per-second price."""
        model = hosted.check_capability(self._models, DURATIONS, request)
        return request.duration_s * model.credits_per_second

    def parse_callback(self, body: bytes, headers: Mapping[str, str]) -> ProviderResult:
        """A verified webhook (its body is the prediction); a malformed one is PERMANENT."""
        try:
            prediction = json.loads(body)
            if not isinstance(prediction, dict) or "status" not in prediction:
                raise ValueError("not a prediction")
            return self._normalize(prediction, None)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError(
                f"malformed callback: {exc}",
                retry_class=RetryClass.PERMANENT,
                code="malformed_callback",
            ) from None

    def classify_error(self, error: BaseException, *, during: str) -> ProviderError:
        """See :func:`.hosted.classify`; 4xx keep Replicate's problem ``title`` as the code."""
        return hosted.classify(error, during=during, code_of=error_code)

    # -- calls -----------------------------------------------------------------------------

    async def prepare_input(self, request: GenerationRequest) -> PreparedInput:
        """The create-prediction body; the webhook URL carries the request key."""
        self.validate_capability(request)
        inputs: dict[str, Any] = {"prompt": request.prompt}
        if len(DURATIONS.get(request.model, ())) > 1:
            inputs["duration"] = request.duration_s
        if len(self._models[request.model].resolutions) > 1:
            inputs["aspect_ratio"] = _ASPECTS[(request.width, request.height)]
        if request.mode == "image_to_video":
            inputs[IMAGE_FIELDS.get(request.model, "image")] = request.reference_urls[0]
        body: dict[str, Any] = {"input": inputs}
        if request.callback_url:
            body["webhook"] = tagged_webhook(request.callback_url, request.request_key)
            body["webhook_events_filter"] = ["start", "logs", "completed"]
        return PreparedInput(request=request, body=body)

    async def submit(self, prepared: PreparedInput) -> ProviderResult:
        """Create the prediction (not idempotent: Replicate has no idempotency key)."""
        path = f"/v1/models/{prepared.request.model}/predictions"
        body, _ = await self._http.call(
            "submit", "POST", path, self.submit_timeout_s, json=dict(prepared.body)
        )
        return self._result(body, "submit", estimated=self.estimate_cost(prepared.request))

    async def query(self, *, provider_job_id: str | None, request_key: str) -> ProviderResult:
        """By prediction id; without one, by the request key in the webhook URL."""
        if provider_job_id:
            body, _ = await self._http.call(
                "query", "GET", f"/v1/predictions/{quote(provider_job_id, safe='')}",
                self.query_timeout_s,
            )  # fmt: skip
            return self._result(body, "query")
        found = await replicate_reconcile.find(
            self._http,
            request_key,
            window_s=self.reconcile_window_s,
            timeout_s=self.query_timeout_s,
        )
        if isinstance(found, NormalizedStatus):
            return ProviderResult(None, found, raw_status="lookup")
        return self._result(found, "query")

    async def cancel(self, provider_job_id: str) -> ProviderResult:
        """Ask to cancel; the answer is the prediction (final ones keep their status)."""
        path = f"/v1/predictions/{quote(provider_job_id, safe='')}/cancel"
        body, _ = await self._http.call("cancel", "POST", path, self.query_timeout_s)
        return self._result(body, "cancel")

    async def fetch_output(self, asset: OutputAsset, dest: Path, *, max_bytes: int) -> FetchedFile:
        """Stream from the configured delivery hosts only (``replicate.delivery``)."""
        return await self._http.fetch(
            asset, dest, max_bytes=max_bytes, timeout_s=self.query_timeout_s
        )

    async def close(self) -> None:
        """Close the HTTP client if this adapter made it."""
        await self._http.close()

    # -- internals -------------------------------------------------------------------------

    def _result(self, body: Any, during: str, *, estimated: int | None = None) -> ProviderResult:
        try:
            return self._normalize(body, estimated)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise hosted.malformed(during, exc) from None

    def _normalize(self, prediction: Mapping[str, Any], estimated: int | None) -> ProviderResult:
        raw_status = str(prediction["status"])
        status = _STATUSES.get(raw_status, NormalizedStatus.UNKNOWN)
        code, retry = None, RetryClass.NONE
        if status is NormalizedStatus.FAILED:
            error = str(prediction.get("error") or "")
            transient = raw_status == "aborted" or bool(_TRANSIENT.search(error))
            code = raw_status if raw_status == "aborted" else "prediction_failed"
            retry = RetryClass.RETRYABLE if transient else RetryClass.PERMANENT
        output = prediction.get("output")
        urls = [output] if isinstance(output, str) else output if isinstance(output, list) else []
        done = status is NormalizedStatus.SUCCEEDED
        stamp = prediction.get("completed_at") or prediction.get("started_at")
        return ProviderResult(
            provider_job_id=str(prediction["id"]),
            normalized_status=status,
            progress=1.0 if done else _progress(prediction.get("logs")),
            retry_class=retry,
            provider_error_code=code,
            output_assets=tuple(OutputAsset(url=str(u)) for u in urls if u) if done else (),
            estimated_cost=estimated,
            actual_cost=self._actual_cost(prediction) if done else None,
            raw_response_ref=f"replicate:{prediction['id']}#{raw_status}",
            raw_status=raw_status,
            observed_at_ms=hosted.stamp_ms(stamp or prediction.get("created_at")),
        )

    def _actual_cost(self, prediction: Mapping[str, Any]) -> int | None:
        model = str(prediction.get("model") or "")
        rate = self._predict_second_credits.get(model)
        if rate is not None:  # hardware-billed: GPU seconds used
            predict_time = (prediction.get("metrics") or {}).get("predict_time")
            return math.ceil(float(predict_time) * rate) if predict_time is not None else None
        capability = self._models.get(model)
        inputs = prediction.get("input") or {}
        seconds = inputs.get("duration") or min(DURATIONS.get(model, frozenset({0})))
        return int(seconds) * capability.credits_per_second if capability and seconds else None


def _progress(logs: object) -> float | None:
    """The last ``NN%`` the model logged, as 0..1 (video models print their sampler's bar)."""
    found = _PERCENT.findall(logs) if isinstance(logs, str) else []
    return min(int(found[-1]), 100) / 100 if found else None


_: type[base.ProviderAdapter] = ReplicateAdapter  # the adapter satisfies the contract
