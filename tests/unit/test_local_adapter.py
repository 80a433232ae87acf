"""LocalProviderAdapter's pure parts: error classification and callback parsing."""

from __future__ import annotations

import email.utils
import json
import time

import httpx
import pytest

from aigc_hub.pipelines.generation.adapters.base import (
    NormalizedStatus,
    ProviderError,
    RetryClass,
)
from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter

BASE = "http://127.0.0.1:8100"
REQUEST = httpx.Request("POST", f"{BASE}/v1/jobs")


def status_error(status: int, body: object = None, **headers: str) -> httpx.HTTPStatusError:
    response = httpx.Response(status, json=body, headers=headers, request=REQUEST)
    return httpx.HTTPStatusError("x", request=REQUEST, response=response)


@pytest.mark.parametrize(
    ("error", "during", "expected"),
    [
        (httpx.ReadTimeout("t", request=REQUEST), "submit", RetryClass.UNKNOWN_OUTCOME),
        (httpx.ReadTimeout("t", request=REQUEST), "query", RetryClass.RETRYABLE),
        (httpx.RemoteProtocolError("gone", request=REQUEST), "submit", RetryClass.UNKNOWN_OUTCOME),
        (httpx.ConnectError("refused", request=REQUEST), "submit", RetryClass.RETRYABLE),
        (httpx.ConnectTimeout("t", request=REQUEST), "submit", RetryClass.RETRYABLE),
        (status_error(503), "submit", RetryClass.RETRYABLE),
        (status_error(500), "query", RetryClass.RETRYABLE),
        (status_error(400, {"error": {"code": "unsupported_parameter"}}), "submit", "permanent"),
        (RuntimeError("?"), "submit", RetryClass.UNKNOWN_OUTCOME),
        (RuntimeError("?"), "query", RetryClass.RETRYABLE),
    ],
)
def test_classify_error(error: BaseException, during: str, expected: str) -> None:
    adapter = LocalProviderAdapter(BASE)
    assert adapter.classify_error(error, during=during).retry_class == expected


def test_4xx_keeps_the_provider_code_and_429_reads_retry_after_in_both_forms() -> None:
    adapter = LocalProviderAdapter(BASE)
    bad = adapter.classify_error(status_error(409, {"error": {"code": "reused"}}), during="x")
    assert (bad.retry_class, bad.code) == (RetryClass.PERMANENT, "reused")
    seconds = adapter.classify_error(status_error(429, **{"Retry-After": "12"}), during="x")
    assert (seconds.retry_class, seconds.retry_after_s) == (RetryClass.RATE_LIMITED, 12.0)
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    dated = adapter.classify_error(status_error(429, **{"Retry-After": date}), during="x")
    assert dated.retry_after_s is not None and 25 <= dated.retry_after_s <= 31


def test_parse_callback_maps_a_succeeded_job() -> None:
    job = {
        "id": "job_1",
        "status": "succeeded",
        "progress": 1.0,
        "sequence": 6,
        "updated_at": "2026-01-01T00:00:01.250Z",
        "cost": 4,
        "error": None,
        "output": {
            "url": f"{BASE}/outputs/job_1.mp4?expires=1&sig=a",
            "expires_at": "2026-01-01T00:10:00.000Z",
            "content_type": "video/mp4",
            "size_bytes": 100,
        },
    }
    body = json.dumps({"type": "job.updated", "data": job}).encode()
    result = LocalProviderAdapter(BASE).parse_callback(body, {})
    assert result.normalized_status is NormalizedStatus.SUCCEEDED
    assert (result.actual_cost, result.progress, result.raw_status) == (4, 1.0, "succeeded")
    assert result.observed_at_ms == 1_767_225_601_250
    assert result.output_assets[0].expires_at_ms == 1_767_226_200_000
    assert result.raw_response_ref == "local:job_1#6"


@pytest.mark.parametrize("body", [b"", b"[]", b'{"type":"job.updated","data":{}}', b"\xff"])
def test_parse_callback_refuses_garbage_as_permanent(body: bytes) -> None:
    with pytest.raises(ProviderError) as info:
        LocalProviderAdapter(BASE).parse_callback(body, {})
    assert info.value.retry_class is RetryClass.PERMANENT
