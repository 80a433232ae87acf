"""Request limits: body size and JSON depth (ASGI middleware), per-tenant rate, admission.

* :class:`BodyLimits` refuses a body over ``max_body_bytes`` with 413, judged on
  ``Content-Length`` first and on the bytes actually streamed (a lying or absent header
  does not help), a JSON body nested deeper than ``max_json_depth`` with 400, and a JSON
  body holding a lone UTF-16 surrogate (``"\\ud800"``) with 400 before any route sees it.
* :func:`rate_limited_tenant` spends one token of the tenant's bucket
  (``api:{tenant_id}`` on ``hub.cache.limiter``): 429 with ``Retry-After`` when empty.
* :func:`admit` makes a dependency that asks ``hub.gate`` whether a pipeline takes new
  work: 429 with ``Retry-After`` when it is behind, 503 when the broker is unreachable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aigc_hub.interfaces.http import auth, problems
from aigc_hub.interfaces.http.problems import Problem

# Limits is a backbone value (settings build it); re-exported for the app and its callers.
from aigc_hub.settings import Limits as Limits
from aigc_hub.tenancy import Principal


def too_large(limit: int) -> Problem:
    """The 413 problem for a body over ``limit`` bytes."""
    return Problem(413, f"the request body is larger than {limit} bytes", limit=limit)


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """True when ``body``'s arrays/objects nest deeper than ``limit`` (strings are skipped).

    A scan, not a parse: it runs before any JSON parser can recurse on a hostile body. It
    runs on every JSON body (a megabyte of telemetry, say), so it is vectorized: only quotes
    and brackets are kept (``bytes.translate``, a C loop), a quote count's parity tells which
    brackets sit inside strings, and a cumulative sum gives the depth (numpy). A body with a
    backslash may hold an escaped quote, which parity would miscount: it takes the exact byte
    walk instead.
    """
    if b"\\" in body:
        return _walk_depth_exceeds(body, limit)
    import numpy as np  # here: every CLI command imports this module, few parse a body

    marks = np.frombuffer(body.translate(None, _NOT_MARKS), dtype=np.uint8)
    if marks.size == 0:
        return False
    in_string = (np.cumsum(marks == 0x22) & 1).astype(bool)
    step = np.isin(marks, _OPENS).astype(np.int32) - np.isin(marks, _CLOSES).astype(np.int32)
    step[in_string] = 0
    return bool(np.cumsum(step).max() > limit)


def _walk_depth_exceeds(body: bytes, limit: int) -> bool:
    """:func:`json_depth_exceeds` byte by byte, escapes understood."""
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


#: Every byte but quotes and brackets, for ``bytes.translate``'s delete argument.
_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')
_OPENS = (0x5B, 0x7B)
_CLOSES = (0x5D, 0x7D)


#: A ``\\u`` escape of a UTF-16 surrogate (D800–DFFF), the only way JSON text can hold one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def has_lone_surrogate(body: bytes) -> bool:
    """True when JSON ``body`` holds a string (or key) with an unpaired UTF-16 surrogate.

    Such a string cannot be encoded as UTF-8, so no store, fingerprint or answer can hold
    it. Bodies without a surrogate escape (nearly all) are not parsed; malformed JSON is
    left to the route's own parser.
    """
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    try:
        json.dumps(parsed, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True  # a pair (\ud83d\ude00) was joined by the parser; a lone half stays
    return False


def _is_json(scope: Scope) -> bool:
    """True when the route's parser will read the body as JSON: FastAPI's rule (no
    content type, or a ``json`` / ``+json`` subtype), so no JSON body passes unchecked."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            subtype = media.rpartition(b"/")[2]
            return subtype == b"json" or subtype.endswith(b"+json")
    return True


class BodyLimits:
    """ASGI middleware enforcing :class:`Limits` body size and JSON depth on HTTP requests."""

    def __init__(
        self,
        app: ASGIApp,
        limits: Limits,
        exempt: tuple[str, ...] = (),
        larger: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.app = app
        self.limits = limits
        #: Path prefixes whose routes bound their own (streamed) bodies: blob uploads.
        self.exempt = exempt
        #: (path prefix, limit) of routes taking bodies past the API's limit (uploads).
        self.larger = larger

    def _limit_of(self, path: str) -> int:
        for prefix, limit in self.larger:
            if path.startswith(prefix):
                return limit
        return self.limits.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt and scope["path"].startswith(self.exempt)):
            await self.app(scope, receive, send)
            return
        limit = self._limit_of(scope["path"])
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._refuse(scope, receive, send, too_large(limit))
                return
        if _is_json(scope):
            await self._buffered_json(scope, receive, send)
            return
        received = 0

        async def counting() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(limit)
            return message

        await self.app(scope, counting, send)

    async def _buffered_json(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the whole (bounded) JSON body, check its depth, then replay it to the app."""
        limit, chunks, size = self.limits.max_body_bytes, [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(scope, receive, send, too_large(limit))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        depth = self.limits.max_json_depth
        if json_depth_exceeds(body, depth):
            problem = Problem(400, f"JSON nested deeper than {depth}", slug="json-too-deep")
            await self._refuse(scope, receive, send, problem)
            return
        if has_lone_surrogate(body):
            problem = Problem(
                400,
                "a JSON string holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is"
                " not Unicode text; send each surrogate as part of a pair or not at all",
                slug="json-invalid-unicode",
            )
            await self._refuse(scope, receive, send, problem)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, problem: Problem) -> None:
        await problems.response(Request(scope), problem)(scope, receive, send)


def limits_of(request: Request) -> Limits:
    """The app's :class:`Limits`."""
    found: Limits = request.app.state.limits
    return found


async def rate_limited_tenant(request: Request, who: auth.TenantPrincipal) -> Principal:
    """The tenant principal, after taking one token from its bucket; else 429 + Retry-After."""
    limits = limits_of(request)
    decision = await auth.hub_of(request).cache.limiter.acquire(
        f"api:{who.tenant_id}", limits.rate_per_s, limits.burst
    )
    if not decision.allowed:
        raise Problem(
            429, "too many requests for this tenant", retry_after_s=decision.retry_after_s
        )
    return who


#: Shorthand for route signatures: an authenticated, rate-limited tenant.
LimitedTenant = Annotated[Principal, Depends(rate_limited_tenant)]


def admit(pipeline: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency refusing new work for ``pipeline`` while the admission gate is closed.

    429 + ``Retry-After`` when its consumers are behind; 503 when the admission says the
    broker is unreachable (the admission's ``broker_unreachable``).
    """

    async def admission(request: Request) -> None:
        answer = auth.hub_of(request).gate.admit(pipeline)
        if answer.admitted:
            return
        status = 503 if answer.broker_unreachable else 429
        detail = answer.reason or f"{pipeline} is not taking new work right now"
        raise Problem(status, detail, retry_after_s=answer.retry_after_s, pipeline=pipeline)

    return admission
