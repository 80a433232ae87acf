"""What the sync and async clients share: requests, retry decisions and answer parsing.

A client method builds a :class:`Call` (method, path, parameters, body, headers, whether it
may be retried, how to parse the answer); the sync and async clients only differ in how
they send it and sleep between attempts.

Retries (bounded by :attr:`RetryPolicy.attempts`, exponential backoff with full jitter):

* a call marked ``safe`` (GETs and POSTs that carry an ``Idempotency-Key``) is retried on
  transport errors, on 429/502/503/504 (honouring ``Retry-After``, capped) and, for a keyed
  POST, on 409 ``idempotency-key-in-flight``;
* any other call is retried only when the connection could not be made (the request never
  reached the server); never on an error status or after a read error or timeout.

The ``Idempotency-Key`` of a creating POST is generated once, when its :class:`Call` is
built, so every retry of that logical call sends the same key.
"""

from __future__ import annotations

import email.utils
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from aigc_hub.client import _models as m
from aigc_hub.client._errors import BLANK, HubAPIError, error_class

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

IDEMPOTENCY_HEADER = "Idempotency-Key"
PROBLEM_MEDIA_TYPE = "application/problem+json"
USER_AGENT = "aigc-hub-client/1"
#: The problem type the server answers while a request with the same key is in flight.
IN_FLIGHT_SUFFIX = "/idempotency-key-in-flight"
#: Statuses retried for safe calls.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "instance")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a call that is safe to retry.

    ``attempts`` counts the first one; the n-th retry waits a random time up to
    ``min(max_backoff_s, backoff_s * 2**(n-1))``, or the server's ``Retry-After`` (at most
    ``max_retry_after_s``) when it sent one.
    """

    attempts: int = 4
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 30.0
    jitter: bool = True

    def backoff(self, retry: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based) without ``Retry-After``."""
        ceiling = min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1))
        return float(ceiling * rng()) if self.jitter else float(ceiling)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds before retry number ``retry``: the server's ``Retry-After`` when it sent one
        (at most ``max_retry_after_s``), else :meth:`backoff`."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        return self.backoff(retry)


#: A policy that never retries.
NO_RETRY = RetryPolicy(attempts=1)


@dataclass
class Call(Generic[T]):
    """One logical API call; its headers (and ``Idempotency-Key``) are fixed for all attempts."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Safe to send again although it may have reached the server (GET, keyed POST).
    safe: bool = True
    #: Whether to retry at all (a probe reports what it sees and does not retry).
    retry: bool = True

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get(IDEMPOTENCY_HEADER)


# -- retry decisions -------------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds of a ``Retry-After`` value (delta-seconds or HTTP-date); ``None`` if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay_for_response(
    call: Call[Any], response: httpx.Response, retry: int, policy: RetryPolicy
) -> float | None:
    """Seconds to wait before retrying after ``response``, or ``None`` not to retry."""
    if not call.retry or not call.safe or retry >= policy.attempts:
        return None
    status = response.status_code
    in_flight = (
        status == 409
        and call.idempotency_key is not None
        and _problem_type(response).endswith(IN_FLIGHT_SUFFIX)
    )
    if status not in RETRY_STATUSES and not in_flight:
        return None
    return policy.delay(retry, parse_retry_after(response.headers.get("Retry-After")))


def retry_delay_for_error(
    call: Call[Any], error: httpx.TransportError, retry: int, policy: RetryPolicy
) -> float | None:
    """Seconds to wait before retrying after a transport error, or ``None`` not to retry."""
    if not call.retry or retry >= policy.attempts:
        return None
    never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    if not call.safe and not never_sent:
        return None  # it may have reached the server: sending it again could repeat it
    return policy.backoff(retry)


# -- answers ---------------------------------------------------------------------------------------


def _problem_type(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return BLANK
    found = body.get("type") if isinstance(body, dict) else None
    return found if isinstance(found, str) else BLANK


def to_error(response: httpx.Response) -> HubAPIError:
    """The :class:`HubAPIError` (subclass by status) of a 4xx/5xx answer."""
    status = response.status_code
    body: Any = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500]}
    extra = {k: v for k, v in body.items() if k not in _PROBLEM_MEMBERS}
    kind = error_class(status)
    return kind(
        status,
        type=str(body.get("type") or BLANK),
        title=str(body.get("title") or response.reason_phrase),
        detail=str(body.get("detail") or ""),
        instance=body.get("instance") if isinstance(body.get("instance"), str) else None,
        extra=extra,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
        response=response,
    )


def checked(response: httpx.Response) -> httpx.Response:
    """``response`` when it is a success, else raise its :class:`HubAPIError`."""
    if response.is_error:
        raise to_error(response)
    return response


def model(kind: type[M]) -> Callable[[httpx.Response], M]:
    """A parser validating a success body as ``kind``."""

    def parse(response: httpx.Response) -> M:
        return kind.model_validate(checked(response).json())

    return parse


def _accepted(response: httpx.Response) -> m.JobAccepted:
    accepted = m.JobAccepted.model_validate(checked(response).json())
    accepted.location = response.headers.get("Location")
    return accepted


# -- calls -----------------------------------------------------------------------------------------


def _params(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def healthz() -> Call[m.Health]:
    return Call("GET", "/healthz", model(m.Health), retry=False)


def readyz() -> Call[m.Health]:
    return Call("GET", "/readyz", model(m.Health), retry=False)


def dlq_list(
    *,
    topic: str | None,
    consumer: str | None,
    pipeline: str | None,
    error_class: str | None,
    status: str | None,
    since: int | None,
    until: int | None,
    limit: int | None,
    cursor: str | None,
) -> Call[m.DeadLetterPage]:
    params = _params(
        {
            "topic": topic,
            "consumer": consumer,
            "pipeline": pipeline,
            "error_class": error_class,
            "status": status,
            "since": since,
            "until": until,
            "limit": limit,
            "cursor": cursor,
        }
    )
    return Call("GET", "/admin/dlq", model(m.DeadLetterPage), params=params)


def dlq_get(dead_letter_id: int) -> Call[m.DeadLetterDetail]:
    return Call("GET", f"/admin/dlq/{int(dead_letter_id)}", model(m.DeadLetterDetail))


def dlq_replay(dead_letter_id: int) -> Call[m.DeadLetter]:
    # Not idempotency-keyed on the server: never sent twice once it may have arrived.
    return Call("POST", f"/admin/dlq/{int(dead_letter_id)}/replay", model(m.DeadLetter), safe=False)


def dlq_replay_bulk(
    *,
    topic: str | None,
    consumer: str | None,
    pipeline: str | None,
    error_class: str | None,
    since: int | None,
    until: int | None,
    max: int | None,
    idempotency_key: str | None,
) -> Call[m.JobAccepted]:
    body = _params(
        {
            "topic": topic,
            "consumer": consumer,
            "pipeline": pipeline,
            "error_class": error_class,
            "since": since,
            "until": until,
            "max": max,
        }
    )
    key = idempotency_key or str(uuid.uuid4())  # once per logical call, reused by retries
    return Call(
        "POST", "/admin/dlq/replay", _accepted, json=body, headers={IDEMPOTENCY_HEADER: key}
    )


def dlq_dismiss(ids: list[int], reason: str) -> Call[m.Dismissed]:
    body = {"ids": [int(x) for x in ids], "reason": reason}
    return Call("POST", "/admin/dlq/dismiss", model(m.Dismissed), json=body, safe=False)


def job(job_id: str) -> Call[m.Job]:
    return Call("GET", f"/admin/jobs/{quote(str(job_id), safe='')}", model(m.Job))


def lag() -> Call[m.Lag]:
    return Call("GET", "/admin/lag", model(m.Lag))


def outbox() -> Call[m.Outbox]:
    return Call("GET", "/admin/outbox", model(m.Outbox))


def audit(limit: int | None, action: str | None) -> Call[m.AuditPage]:
    params = _params({"limit": limit, "action": action})
    return Call("GET", "/admin/audit", model(m.AuditPage), params=params)


def default_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": f"application/json, {PROBLEM_MEDIA_TYPE}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers
