"""Errors raised by the client: one per problem status, all carrying the problem details."""

from __future__ import annotations

from typing import Any

import httpx

#: The ``type`` of a problem whose body was not problem+json (RFC 9457's default).
BLANK = "about:blank"


class HubAPIError(Exception):
    """The API answered with a 4xx/5xx problem (RFC 9457).

    ``type`` is stable per kind of error (match on it, not on ``detail``); ``extra`` holds the
    problem's other members (e.g. ``errors`` of a 422, ``failed`` of a ``readyz`` 503).
    """

    def __init__(
        self,
        status: int,
        *,
        type: str = BLANK,
        title: str = "",
        detail: str = "",
        instance: str | None = None,
        extra: dict[str, Any] | None = None,
        retry_after: float | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(f"{status} {title or 'error'}: {detail}" if detail else f"{status}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.instance = instance
        self.extra = dict(extra or {})
        self.retry_after = retry_after
        self.response = response


class BadRequest(HubAPIError):
    """400."""


class Unauthorized(HubAPIError):
    """401: no, an unknown or a revoked API key."""


class Forbidden(HubAPIError):
    """403: the key may not use this route (e.g. a tenant key on ``/admin``)."""


class NotFound(HubAPIError):
    """404."""


class Conflict(HubAPIError):
    """409 (e.g. a dead letter that is not pending, an Idempotency-Key still in flight)."""


class ValidationFailed(HubAPIError):
    """422: invalid parameters or body; ``extra["errors"]`` lists the fields."""


class RateLimited(HubAPIError):
    """429; ``retry_after`` is the server's ``Retry-After`` in seconds."""


class Unavailable(HubAPIError):
    """503; ``retry_after`` is the server's ``Retry-After`` in seconds."""


class ServerError(HubAPIError):
    """Any other 5xx."""


class JobTimeout(TimeoutError):
    """``wait_job`` gave up; ``job`` is the last state seen."""

    def __init__(self, job: Any) -> None:
        super().__init__(f"job {getattr(job, 'id', '?')} still {getattr(job, 'status', '?')}")
        self.job = job


class WaitTimeout(TimeoutError):
    """``wait_for`` gave up; ``snapshot`` is the last one read."""

    def __init__(self, subject_id: str, snapshot: Any) -> None:
        super().__init__(f"{subject_id} is not done yet")
        self.subject_id = subject_id
        self.snapshot = snapshot


_BY_STATUS: dict[int, type[HubAPIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
    429: RateLimited,
    503: Unavailable,
}


def error_class(status: int) -> type[HubAPIError]:
    """The exception class of an HTTP error status."""
    found = _BY_STATUS.get(status)
    if found is not None:
        return found
    return ServerError if status >= 500 else HubAPIError
