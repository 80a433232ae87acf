"""Plumbing shared by the adapters of hosted vendors (Replicate, fal, Runway).

Each vendor adapter keeps its own wire shapes; what is the same for all of them lives here:
one JSON call that turns every failure into a :class:`~.base.ProviderError`, the HTTP error
→ retry class table, timestamps, capability checks, and output downloads locked to the
vendor's configured delivery hosts (``https://host`` or ``https://*.host``). The retry class
table (:func:`classify`) is the local adapter's too.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from aigc_hub.pipelines.generation.adapters import fetch
from aigc_hub.pipelines.generation.adapters.base import (
    CapabilityError,
    FetchedFile,
    GenerationRequest,
    ModelCapability,
    OutputAsset,
    ProviderError,
    RetryClass,
)

#: Reads the vendor's machine error code from an error response, if it has one.
CodeReader = Callable[[httpx.Response], str | None]


def stamp_ms(stamp: object) -> int | None:
    """Epoch ms of an ISO-8601 timestamp (``Z`` or offset), else None."""
    if not isinstance(stamp, str):
        return None
    try:
        return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def date_ms(response: httpx.Response) -> int | None:
    """The vendor's clock from the ``Date`` header, for vendors whose bodies carry no time."""
    value = response.headers.get("date")
    try:
        return int(email.utils.parsedate_to_datetime(value).timestamp() * 1000) if value else None
    except (TypeError, ValueError):
        return None


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds, from delta-seconds or an HTTP date."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - dt.datetime.now(dt.UTC).timestamp())


def classify(error: BaseException, *, during: str, code_of: CodeReader) -> ProviderError:
    """429 → RATE_LIMITED; 5xx, 408 and connect errors → RETRYABLE; other 4xx → PERMANENT.

    A transport error after a submit may have reached the vendor is UNKNOWN_OUTCOME.
    """
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, CapabilityError):
        return ProviderError(str(error), retry_class=RetryClass.PERMANENT, code="capability")
    unknown = RetryClass.UNKNOWN_OUTCOME if during == "submit" else RetryClass.RETRYABLE
    if isinstance(error, httpx.HTTPStatusError):
        response = error.response
        status, code = response.status_code, code_of(response)
        message = f"{during}: HTTP {status} {code or ''}".strip()
        if status == 429:
            after = retry_after(response.headers.get("retry-after"))
            return ProviderError(
                message, retry_class=RetryClass.RATE_LIMITED, code=code, retry_after_s=after
            )
        if status >= 500 or status == 408:
            return ProviderError(message, retry_class=RetryClass.RETRYABLE, code=code)
        return ProviderError(
            message, retry_class=RetryClass.PERMANENT, code=code or f"http_{status}"
        )
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        # the request never left: safe to send again
        return ProviderError(f"{during}: {type(error).__name__}", retry_class=RetryClass.RETRYABLE)
    if isinstance(error, httpx.TransportError):
        return ProviderError(f"{during}: {type(error).__name__}", retry_class=unknown)
    return ProviderError(
        f"{during}: {type(error).__name__}: {error}", retry_class=unknown, code="unexpected"
    )


def check_capability(
    models: Mapping[str, ModelCapability],
    durations: Mapping[str, frozenset[int]],
    request: GenerationRequest,
) -> ModelCapability:
    """The request's model, or CapabilityError naming ``model``/``mode``/``duration_s``/…"""
    model = models.get(request.model)
    if model is None:
        raise CapabilityError("model", f"unknown model {request.model!r}")
    if request.mode not in model.modes:
        raise CapabilityError("mode", f"{request.model} does not do {request.mode!r}")
    allowed = durations.get(model.model) or frozenset(range(1, model.max_duration_s + 1))
    if request.duration_s not in allowed:
        raise CapabilityError("duration_s", f"must be one of {sorted(allowed)} s")
    if (request.width, request.height) not in model.resolutions:
        raise CapabilityError("resolution", f"{request.width}x{request.height} not offered")
    if request.mode == "image_to_video" and not request.reference_urls:
        raise CapabilityError("reference_urls", "image_to_video needs a reference image")
    return model


def allowed_origin(url: str, output_hosts: Sequence[str]) -> str | None:
    """The configured origin ``url`` is on (``*.`` matches any subdomain), else None."""
    target = fetch.origin(url)
    if target is None:
        return None
    for entry in output_hosts:
        if "://*." in entry:
            scheme, suffix = entry.split("://*.", 1)
            pattern = fetch.origin(f"{scheme}://{suffix}")
            same_scheme_port = pattern and (target[0], target[2]) == (pattern[0], pattern[2])
            if pattern and same_scheme_port and target[1].endswith("." + pattern[1]):
                return f"{target[0]}://{target[1]}:{target[2]}"
        elif fetch.origin(entry) == target:
            return entry
    return None


class VendorHttp:
    """One vendor's HTTP client: base URL, auth headers, error reading, output downloads."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        code_of: CodeReader,
        output_hosts: Sequence[str],
        http: httpx.AsyncClient | None,
        output: fetch.OutputFetch | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.code_of = code_of
        self.output_hosts = tuple(output_hosts)
        self.output = output or fetch.OutputFetch()
        self.egress = self.output.fetcher()
        # a malformed delivery host stops the start (ValueError naming it), not every fetch
        fetch.check_origins(self.output_hosts, self.output.trusted_origins)
        self.owns_http = http is None
        # trust_env=False: no proxy from the environment between us and the vendor
        self.client = http or httpx.AsyncClient(trust_env=False, follow_redirects=False)

    async def call(
        self, during: str, method: str, path: str, timeout_s: float, **kwargs: Any
    ) -> tuple[Any, httpx.Response]:
        """``(parsed JSON or None, response)``; any failure is a classified ProviderError."""
        try:
            response = await self.client.request(
                method, self.base_url + path, timeout=timeout_s, headers=self.headers, **kwargs
            )
            response.raise_for_status()
            body = response.json() if response.content else None
        except Exception as exc:
            raise classify(exc, during=during, code_of=self.code_of) from exc
        return body, response

    async def fetch(
        self, asset: OutputAsset, dest: Path, *, max_bytes: int, timeout_s: float
    ) -> FetchedFile:
        """Download from a configured delivery host only, through the guarded egress (see
        :func:`.fetch.fetch_to_file`); every failure is a classified ProviderError."""
        try:
            return await fetch.fetch_to_file(
                self.egress,
                asset.url,
                dest,
                allowed_origins=self.output_hosts,
                trusted_origins=self.output.trusted_origins,
                max_bytes=max_bytes,
                timeout_s=timeout_s,
                deadline_s=self.output.deadline_s,
                content_type=asset.content_type,
            )
        except Exception as exc:
            raise classify(exc, during="fetch_output", code_of=self.code_of) from exc

    async def close(self) -> None:
        """Close the HTTP client if this object made it."""
        if self.owns_http:
            await self.client.aclose()


def malformed(during: str, exc: BaseException) -> ProviderError:
    """A vendor answer we cannot read: RETRYABLE (the next poll may read a good one)."""
    return ProviderError(
        f"{during}: malformed answer: {type(exc).__name__}: {exc}",
        retry_class=RetryClass.RETRYABLE,
        code="malformed_response",
    )
