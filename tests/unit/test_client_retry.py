"""The client's retry decisions, as pure functions: what is retried, after how long, how often."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from aigc_hub.client import _core as core

POLICY = core.RetryPolicy(attempts=3, backoff_s=0.2, max_backoff_s=1.0, max_retry_after_s=30)
GET = core.Call("GET", "/admin/lag", parse=lambda r: r)
KEYED_POST = core.Call(
    "POST", "/admin/dlq/replay", parse=lambda r: r, headers={"Idempotency-Key": "k"}, safe=True
)
UNSAFE_POST = core.Call("POST", "/admin/dlq/1/replay", parse=lambda r: r, safe=False)
PROBE = core.Call("GET", "/readyz", parse=lambda r: r, retry=False)


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


@pytest.mark.parametrize(("retry", "expected"), [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (10, 1.0)])
def test_backoff_doubles_up_to_the_cap(retry: int, expected: float) -> None:
    no_jitter = core.RetryPolicy(backoff_s=0.2, max_backoff_s=1.0, jitter=False)
    assert no_jitter.backoff(retry) == pytest.approx(expected)
    assert 0 <= POLICY.backoff(retry, rng=lambda: 0.999) <= expected


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert core.parse_retry_after("7") == 7.0
    assert core.parse_retry_after(" 0 ") == 0.0
    assert core.parse_retry_after("-3") == 0.0
    assert core.parse_retry_after(None) is None
    assert core.parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_060, usegmt=True)
    assert core.parse_retry_after(date, now=1_000_000) == pytest.approx(60)


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_safe_calls_retry_on_overload_statuses(status: int) -> None:
    assert (
        core.retry_delay_for_response(GET, answer(status, **{"Retry-After": "2"}), 1, POLICY) == 2
    )
    assert core.retry_delay_for_response(KEYED_POST, answer(status), 1, POLICY) is not None


@pytest.mark.parametrize("status", [200, 201, 400, 401, 404, 409, 422, 500])
def test_other_statuses_are_answers_not_retries(status: int) -> None:
    assert core.retry_delay_for_response(GET, answer(status), 1, POLICY) is None


def test_retry_after_is_capped_and_attempts_are_bounded() -> None:
    huge = answer(503, **{"Retry-After": "3600"})
    assert core.retry_delay_for_response(GET, huge, 1, POLICY) == 30
    assert core.retry_delay_for_response(GET, answer(503), 2, POLICY) is not None
    assert core.retry_delay_for_response(GET, answer(503), 3, POLICY) is None  # 3 sends done


def test_unsafe_posts_and_probes_never_retry_on_a_status() -> None:
    assert core.retry_delay_for_response(UNSAFE_POST, answer(503), 1, POLICY) is None
    assert core.retry_delay_for_response(PROBE, answer(503), 1, POLICY) is None


def test_a_keyed_post_still_in_flight_is_retried() -> None:
    in_flight = httpx.Response(
        409,
        json={"type": "https://aigc-hub.dev/problems/idempotency-key-in-flight"},
        headers={"Retry-After": "1"},
    )
    assert core.retry_delay_for_response(KEYED_POST, in_flight, 1, POLICY) == 1
    assert core.retry_delay_for_response(GET, in_flight, 1, POLICY) is None  # no key: a conflict


def test_transport_errors_retry_only_when_the_request_cannot_have_arrived() -> None:
    request = httpx.Request("POST", "http://hub.test/x")
    refused = httpx.ConnectError("refused", request=request)
    read_timeout = httpx.ReadTimeout("slow", request=request)
    assert core.retry_delay_for_error(UNSAFE_POST, refused, 1, POLICY) is not None
    assert core.retry_delay_for_error(UNSAFE_POST, read_timeout, 1, POLICY) is None
    assert core.retry_delay_for_error(GET, read_timeout, 1, POLICY) is not None
    assert core.retry_delay_for_error(GET, read_timeout, 3, POLICY) is None
    assert core.retry_delay_for_error(PROBE, refused, 1, POLICY) is None
