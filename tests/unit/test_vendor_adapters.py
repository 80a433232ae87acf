"""Replicate, fal and Runway adapters: status and error mapping, reconcile, wiring.

Bodies are the recorded ones under ``tests/fixtures/vendors`` served by ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.vendor_fakes import FIXTURES, fill, iso

from aigc_hub.egress import EgressFetcher, EgressPolicy
from aigc_hub.pipelines.generation.adapters import fal, fetch, hosted, replicate_reconcile
from aigc_hub.pipelines.generation.adapters.base import (
    GenerationRequest,
    NormalizedStatus,
    ProviderError,
    RetryClass,
)
from aigc_hub.pipelines.generation.adapters.fal import FalAdapter
from aigc_hub.pipelines.generation.adapters.replicate import ReplicateAdapter
from aigc_hub.pipelines.generation.adapters.runway import RunwayAdapter
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import default_adapters

BASE = "http://vendor.test"
REQUEST = httpx.Request("POST", f"{BASE}/v1/x")
ADAPTERS: dict[str, Callable[..., Any]] = {
    "replicate": ReplicateAdapter,
    "fal": FalAdapter,
    "runway": RunwayAdapter,
}


def recorded(vendor: str, name: str, **values: Any) -> Any:
    data = json.loads((FIXTURES / vendor / f"{name}.json").read_text())
    defaults = {"base": BASE, "id": "job1", "model": "kwaivgi/kling-v1.6-standard"}
    defaults |= {"input": {"prompt": "p", "duration": 5}, "webhook": None, "retry_after": 7}
    defaults |= {"output_url": "https://replicate.delivery/xezq/a/out.mp4", "app": "fal-ai/kling"}
    now = iso(time.time())
    defaults |= {"created_at": now, "started_at": now, "completed_at": now, "file_size": 10}
    return fill(data, {**defaults, **values})


def status_error(status: int, body: object = None, **headers: str) -> httpx.HTTPStatusError:
    response = httpx.Response(status, json=body, headers=headers, request=REQUEST)
    return httpx.HTTPStatusError("x", request=REQUEST, response=response)


def mock(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", sorted(ADAPTERS))
@pytest.mark.parametrize(
    ("error", "during", "expected"),
    [
        (httpx.ReadTimeout("t", request=REQUEST), "submit", RetryClass.UNKNOWN_OUTCOME),
        (httpx.ReadTimeout("t", request=REQUEST), "query", RetryClass.RETRYABLE),
        (httpx.ConnectError("refused", request=REQUEST), "submit", RetryClass.RETRYABLE),
        (status_error(500), "submit", RetryClass.RETRYABLE),
        (status_error(503), "query", RetryClass.RETRYABLE),
        (status_error(401), "submit", RetryClass.PERMANENT),
        (status_error(403), "query", RetryClass.PERMANENT),
    ],
)
def test_classify_error(vendor: str, error: BaseException, during: str, expected: str) -> None:
    adapter = ADAPTERS[vendor](BASE, "k")
    assert adapter.classify_error(error, during=during).retry_class == expected


@pytest.mark.parametrize("vendor", sorted(ADAPTERS))
def test_429_reads_retry_after(vendor: str) -> None:
    body = recorded(vendor, "error_429")
    error = status_error(429, body, **{"Retry-After": "7"})
    found = ADAPTERS[vendor](BASE, "k").classify_error(error, during="submit")
    assert (found.retry_class, found.retry_after_s) == (RetryClass.RATE_LIMITED, 7.0)


@pytest.mark.parametrize(
    ("vendor", "status", "fixture", "code"),
    [
        ("replicate", 422, "error_422", "input_validation_failed"),
        ("replicate", 401, "error_401", "unauthenticated"),
        ("fal", 422, "error_422", "literal_error"),
        ("fal", 401, "error_401", "http_401"),
        ("runway", 400, "error_400", "http_400"),
        ("runway", 401, "error_401", "http_401"),
    ],
)
def test_4xx_is_permanent_with_the_vendor_code(
    vendor: str, status: int, fixture: str, code: str
) -> None:
    error = status_error(status, recorded(vendor, fixture))
    found = ADAPTERS[vendor](BASE, "k").classify_error(error, during="submit")
    assert (found.retry_class, found.code) == (RetryClass.PERMANENT, code)


# --- statuses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "status", "retry"),
    [
        ("prediction_starting", NormalizedStatus.ACCEPTED, RetryClass.NONE),
        ("prediction_processing", NormalizedStatus.RUNNING, RetryClass.NONE),
        ("prediction_succeeded", NormalizedStatus.SUCCEEDED, RetryClass.NONE),
        ("prediction_failed", NormalizedStatus.FAILED, RetryClass.PERMANENT),
        ("prediction_canceled", NormalizedStatus.CANCELED, RetryClass.NONE),
    ],
)
def test_replicate_statuses(fixture: str, status: NormalizedStatus, retry: RetryClass) -> None:
    body = json.dumps(recorded("replicate", fixture)).encode()
    result = ReplicateAdapter(BASE, "k").parse_callback(body, {})
    assert (result.normalized_status, result.retry_class) == (status, retry)
    assert result.raw_response_ref == f"replicate:job1#{fixture.split('_')[1]}"
    if status is NormalizedStatus.RUNNING:
        assert result.progress == 0.42  # from the logged progress bar
    if status is NormalizedStatus.SUCCEEDED:
        assert result.actual_cost == 5 * 5 and result.progress == 1.0
        assert [a.url for a in result.output_assets] == [recorded("replicate", fixture)["output"]]


def test_replicate_hardware_billing_uses_predict_time() -> None:
    adapter = ReplicateAdapter(
        BASE, "k", predict_second_credits={"kwaivgi/kling-v1.6-standard": 0.1}
    )
    body = json.dumps(recorded("replicate", "prediction_succeeded")).encode()
    assert adapter.parse_callback(body, {}).actual_cost == 10  # ceil(97.41 × 0.1)


@pytest.mark.parametrize(
    ("status_fixture", "expected"),
    [
        ("status_in_queue", NormalizedStatus.ACCEPTED),
        ("status_in_progress", NormalizedStatus.RUNNING),
        ("status_completed", NormalizedStatus.SUCCEEDED),
        ("status_canceled", NormalizedStatus.CANCELED),
    ],
)
async def test_fal_statuses(status_fixture: str, expected: NormalizedStatus) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Key k"
        if request.url.path.endswith("/status"):
            return httpx.Response(200, json=recorded("fal", status_fixture))
        return httpx.Response(200, json=recorded("fal", "result"))

    async with mock(handler) as http:
        adapter = FalAdapter(BASE, "k", http=http)
        result = await adapter.query(provider_job_id="fal-ai/kling/requests/job1", request_key="")
    assert result.normalized_status is expected
    assert result.observed_at_ms is None or result.observed_at_ms > 0
    if expected is NormalizedStatus.SUCCEEDED:
        assert result.output_assets[0].size_bytes == 10 and result.actual_cost is None


async def test_fal_a_completed_request_whose_result_is_an_error_failed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/status"):
            return httpx.Response(200, json=recorded("fal", "status_completed"))
        return httpx.Response(422, json=recorded("fal", "error_422"))

    async with mock(handler) as http:
        result = await FalAdapter(BASE, "k", http=http).query(
            provider_job_id="fal-ai/kling/requests/job1", request_key=""
        )
    assert (result.normalized_status, result.provider_error_code) == (
        NormalizedStatus.FAILED,
        "literal_error",
    )


@pytest.mark.parametrize("job_id", ["job1", "a/b/c/requests/x", "fal-ai/x/requests/y/z"])
def test_fal_refuses_job_ids_it_did_not_make(job_id: str) -> None:
    with pytest.raises(ProviderError) as info:
        fal.job_path(job_id)
    assert info.value.retry_class is RetryClass.PERMANENT


@pytest.mark.parametrize(
    ("fixture", "status", "retry", "code"),
    [
        ("task_pending", NormalizedStatus.ACCEPTED, RetryClass.NONE, None),
        ("task_throttled", NormalizedStatus.ACCEPTED, RetryClass.NONE, None),
        ("task_running", NormalizedStatus.RUNNING, RetryClass.NONE, None),
        ("task_succeeded", NormalizedStatus.SUCCEEDED, RetryClass.NONE, None),
        ("task_failed", NormalizedStatus.FAILED, RetryClass.PERMANENT, "SAFETY.INPUT.TEXT"),
        ("task_cancelled", NormalizedStatus.CANCELED, RetryClass.NONE, None),
    ],
)
async def test_runway_statuses(
    fixture: str, status: NormalizedStatus, retry: RetryClass, code: str | None
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-runway-version"] == "2024-11-06"
        headers = {"date": "Mon, 30 Nov 2026 10:00:00 GMT"}
        return httpx.Response(200, json=recorded("runway", fixture), headers=headers)

    async with mock(handler) as http:
        result = await RunwayAdapter(BASE, "k", http=http).query(
            provider_job_id="job1", request_key=""
        )
    assert (result.normalized_status, result.retry_class) == (status, retry)
    assert result.provider_error_code == code and result.observed_at_ms
    if fixture == "task_running":
        assert result.progress == 0.42


async def test_runway_cancel_leaves_a_finished_task_alone() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        return httpx.Response(200, json=recorded("runway", "task_succeeded"))

    async with mock(handler) as http:
        result = await RunwayAdapter(BASE, "k", http=http).cancel("job1")
    assert result.normalized_status is NormalizedStatus.SUCCEEDED
    assert seen == ["GET"]  # DELETE would have erased the output


@pytest.mark.parametrize("vendor", ["fal", "runway"])
async def test_without_lookup_a_key_is_unknown_and_callbacks_are_refused(vendor: str) -> None:
    adapter = ADAPTERS[vendor](BASE, "k")
    result = await adapter.query(provider_job_id=None, request_key="rk")
    assert result.normalized_status is NormalizedStatus.UNKNOWN
    assert not any(m.callbacks for m in adapter.capabilities())
    with pytest.raises(ProviderError) as info:
        adapter.parse_callback(b"{}", {})
    assert info.value.code == "callbacks_unsupported"


# --- Replicate reconcile ------------------------------------------------------------------


def _listing(items: list[dict[str, Any]], next_link: str | None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/predictions":
            return httpx.Response(200, json={"results": items, "next": next_link})
        job = request.url.path.rsplit("/", 1)[1]
        webhook = f"https://hub/cb?request_key={job}-key"
        return httpx.Response(200, json=recorded("replicate", "prediction_starting", id=job,
                                                 webhook=webhook))  # fmt: skip

    return httpx.MockTransport(handler)


def _item(job: str, age_s: float) -> dict[str, Any]:
    return {"id": job, "status": "starting", "created_at": iso(time.time() - age_s)}


@pytest.mark.parametrize(
    ("items", "next_link", "key", "expected"),
    [
        ([_item("a", 1), _item("b", 2)], None, "b-key", "b"),
        ([_item("a", 1)], None, "zz", NormalizedStatus.NOT_FOUND),  # whole list read
        ([_item("a", 1), _item("old", 9000)], f"{BASE}/v1/predictions?c=1", "zz", "NOT_FOUND"),
        ([_item("a", 1)], f"{BASE}/v1/predictions?cursor=2", "zz", NormalizedStatus.UNKNOWN),
        ([_item("a", 1)], "https://elsewhere.test/v1/predictions", "zz", "UNKNOWN"),
    ],
)
async def test_replicate_finds_a_lost_submit_or_says_how_sure_it_is(
    items: list[dict[str, Any]], next_link: str | None, key: str, expected: Any
) -> None:
    async with httpx.AsyncClient(transport=_listing(items, next_link)) as client:
        http = hosted.VendorHttp(BASE, {}, code_of=lambda r: None, output_hosts=(), http=client)
        found = await replicate_reconcile.find(http, key, window_s=3600, timeout_s=1)
    if isinstance(found, NormalizedStatus):
        assert found == expected
    else:
        assert found["id"] == expected


# --- delivery hosts, wiring ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://replicate.delivery/x/out.mp4", True),
        ("https://pbxt.replicate.delivery/x/out.mp4", True),
        ("https://evilreplicate.delivery/x", False),
        ("http://replicate.delivery/x", False),
        ("https://replicate.delivery:8443/x", False),
        ("https://v3.fal.media.evil.test/x", False),
        ("https://user:pass@replicate.delivery/x", False),
        ("https://user@pbxt.replicate.delivery/x", False),
        ("https://@replicate.delivery/x", False),
        ("https://replicate.delivery/x@y.mp4", True),  # an @ in the path is not user info
    ],
)
def test_delivery_hosts(url: str, allowed: bool) -> None:
    hosts = ("https://replicate.delivery", "https://*.replicate.delivery")
    assert (hosted.allowed_origin(url, hosts) is not None) is allowed


@pytest.mark.parametrize(
    "userinfo",
    ["user:pass@", "user@", ":pass@", "@", "evil.test\\@"],
    ids=["user-and-password", "user", "password", "empty", "backslash"],
)
async def test_an_output_url_with_user_info_is_refused_before_any_request(
    userinfo: str, tmp_path: Path
) -> None:
    looked_up: list[str] = []

    async def resolver(host: str, port: int) -> list[IPv4Address]:
        looked_up.append(host)
        return [IPv4Address("93.184.215.14")]

    with pytest.raises(ProviderError) as info:
        await fetch.fetch_to_file(
            EgressFetcher(EgressPolicy(max_bytes=1_000, deadline_s=5), resolver=resolver),
            f"https://{userinfo}cdn.provider.test/out.mp4",
            tmp_path / "o.mp4",
            allowed_origins=["https://cdn.provider.test"],
            max_bytes=1_000,
            timeout_s=5,
        )
    assert (info.value.retry_class, info.value.code) == (RetryClass.PERMANENT, "output_url_refused")
    assert "user info" in str(info.value)
    assert looked_up == [] and not (tmp_path / "o.mp4").exists()


@pytest.mark.parametrize("vendor", sorted(ADAPTERS))
def test_an_enabled_vendor_without_a_key_names_the_variable(vendor: str) -> None:
    settings = GenerationSettings(providers=vendor)
    with pytest.raises(ValueError, match=f"AIGC_HUB_GEN_{vendor.upper()}_API_KEY"):
        default_adapters(settings)
    built = default_adapters(GenerationSettings(providers=vendor, **{f"{vendor}_api_key": "k"}))
    assert [a.name for a in built] == [vendor]


def test_webhook_secrets_per_provider() -> None:
    settings = GenerationSettings(replicate_webhook_secrets="whsec_YWFh, whsec_YmJi")
    assert settings.webhook_secrets("replicate") == ["whsec_YWFh", "whsec_YmJi"]
    assert settings.webhook_secrets("fal") == settings.webhook_secrets("runway") == []


def test_image_to_video_needs_a_reference() -> None:
    request = GenerationRequest("t", "rk", "image_to_video", "gen4_turbo", "p", 5, 1280, 720)
    with pytest.raises(ValueError, match="reference_urls"):
        RunwayAdapter(BASE, "k").validate_capability(request)
