"""RFC 9457 problem details: every 4xx/5xx answer is ``application/problem+json``.

Each problem has a stable ``type`` URI under :data:`BASE`, plus ``title``, ``status``,
``detail`` and ``instance`` (the request path). 429 and 503 carry ``Retry-After``. Raise
:class:`Problem` from a route or dependency; FastAPI's own errors, the :class:`HubError`
tree and any other exception are turned into problems by :func:`install`. A 500 never
shows a traceback or an exception's text.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from aigc_hub.core import errors

log = logging.getLogger(__name__)

#: Where problem types live; a type URI is ``BASE + slug`` and never changes once published.
BASE = "https://aigc-hub.dev/problems/"
MEDIA_TYPE = "application/problem+json"

#: Slugs of the problems the backbone answers with.
SLUGS: Mapping[int, str] = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation-error",
    429: "too-many-requests",
    500: "internal-error",
    503: "unavailable",
}


def type_uri(slug: str) -> str:
    """The stable ``type`` URI of a problem slug."""
    return BASE + slug


class Problem(Exception):
    """An HTTP error answered as problem+json; ``extra`` members are added to the body."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        title: str | None = None,
        retry_after_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug or SLUGS.get(status, "error")
        self.title = title or _phrase(status)
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        self.extra = extra


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def response(request: Request, problem: Problem) -> JSONResponse:
    """The problem+json response for ``problem`` at ``request``'s path."""
    body: dict[str, Any] = {
        "type": type_uri(problem.slug),
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
        "instance": request.url.path,
        **problem.extra,
    }
    headers = dict(problem.headers)
    if problem.status in (429, 503):
        wait = problem.retry_after_s if problem.retry_after_s is not None else 1
        headers["Retry-After"] = str(max(1, math.ceil(wait)))
    return JSONResponse(body, status_code=problem.status, headers=headers, media_type=MEDIA_TYPE)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return response(request, exc)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else _phrase(exc.status_code)
    return response(request, Problem(exc.status_code, detail, headers=exc.headers))


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    found = [
        {
            "field": ".".join(str(part) for part in e.get("loc", ())),
            "message": str(e.get("msg", "")),
        }
        for e in exc.errors()
    ]
    names = ", ".join(f["field"] for f in found) or "the request"
    return response(request, Problem(422, f"invalid fields: {names}", errors=found))


# The first matching class wins, so subclasses come before their bases.
_HUB_STATUS: tuple[tuple[type[errors.HubError], int], ...] = (
    (errors.StaleTransition, 409),
    (errors.Retry, 503),
    (errors.RetryableError, 503),
    (errors.SchemaError, 422),
    (errors.EnvelopeError, 400),
    (errors.InvalidInput, 422),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
)


async def _on_hub_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.HubError)
    for kind, status in _HUB_STATUS:
        if isinstance(exc, kind):
            delay = getattr(exc, "delay", None)
            retry = float(delay) if isinstance(delay, int | float) else None
            extra: dict[str, Any] = {}
            if isinstance(exc, errors.InvalidInput):
                extra["errors"] = [{"field": exc.field, "message": exc.message}]
            problem = Problem(status, exc.message, retry_after_s=retry, **extra)
            return response(request, problem)
    return await _on_unexpected(request, exc)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return response(request, Problem(500, "The server failed to answer; the error was logged."))


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as problem+json."""
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(errors.HubError, _on_hub_error)
    app.add_exception_handler(Exception, _on_unexpected)
