"""``Idempotency-Key`` for creating POSTs (IETF draft "The Idempotency-Key HTTP Header Field").

A route opts in by living on a router whose ``route_class`` is :class:`IdempotentRoute` and
by asking for the :data:`Idempotency` dependency; it then returns normally::

    from fastapi import Header, APIRouter
    from aigc_hub.interfaces.http.auth import TenantPrincipal
    from aigc_hub.interfaces.http.idempotency import Idempotency, IdempotentRoute

    router = APIRouter(prefix="/things", route_class=IdempotentRoute)

    @router.post("", status_code=201)
    async def create_thing(body: Thing, who: TenantPrincipal, idem: Idempotency) -> dict:
        ...  # create exactly as without idempotency
        return {"id": new_id}

Routes of that router without the dependency are untouched. Admin routes use
:data:`AdminIdempotency` instead (it requires an admin key; all admin keys share one
scope, :data:`ADMIN_SCOPE`). Behaviour, per tenant
(the key is scoped by the :class:`~aigc_hub.tenancy.Principal`'s ``tenant_id``):

* the header is required: missing → 400 ``idempotency-key-missing``; empty or longer than
  255 characters → 400 ``idempotency-key-invalid``. A structured-field string
  (``"abc"``, as the draft writes it) and a bare token (``abc``) are the same key;
* the first request claims the key with an ``in_flight`` row (INSERT … ON CONFLICT DO
  NOTHING: the primary key decides races between processes), in its own short
  transaction; the route runs; its answer (status, ``Location``/``Content-Type``/…
  headers, body) is stored with status ``done`` in a second short transaction;
* a repeat with the same fingerprint (SHA-256 of method, path, query and the canonical
  JSON body — or the raw body when it is not JSON) replays the stored answer byte for
  byte with ``Idempotent-Replayed: true``;
* the same key with another fingerprint → 422 ``idempotency-key-reused``;
* a repeat while the first is still running waits up to :attr:`IdempotencyPolicy.wait_s`
  for it to finish (so a burst of identical retries gets identical answers), then
  answers 409 ``idempotency-key-in-flight`` with ``Retry-After: 1``;
* 2xx, 3xx and 4xx answers are stored and replayed (the draft); a 5xx answer or an
  exception (including a body that fails validation) releases the key, so the client may
  retry with it;
* keys live ``ttl_s`` (default 24 h) from the first request;
  :class:`~aigc_hub.reliability.idempotency_scanner.IdempotencyExpiryScanner` deletes them
  afterwards, and deletes claims abandoned by a crashed process.

The policy is ``app.state.idempotency`` when set (an :class:`IdempotencyPolicy`), else the
defaults. Times come from ``hub.clock``. If storing the answer fails after the route
succeeded, the claim stays ``in_flight`` (retries get 409) until it is abandoned: a
duplicate creation would be worse than a delayed retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, Header, Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from aigc_hub.interfaces.http import auth, problems
from aigc_hub.interfaces.http.problems import Problem
from aigc_hub.store import tables
from aigc_hub.store.dialects import Dialect, dialect_of
from aigc_hub.store.engine import reader

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
IN_FLIGHT = "in_flight"
DONE = "done"
#: Response headers stored and replayed (lower case); others are not part of the answer.
STORED_HEADERS = ("content-type", "location", "content-location", "etag", "last-modified")
DEFAULT_TTL_S = 24 * 3600.0
#: The ``tenant_id`` column value of keys sent with admin keys (never a tenant's UUID).
ADMIN_SCOPE = "admin"

_CLAIM = "aigc_hub.idempotency.claim"
_ROUTE = "aigc_hub.idempotency.route"


@dataclass(frozen=True)
class IdempotencyPolicy:
    """How long keys live and how long a repeat waits for a request in flight."""

    ttl_s: float = DEFAULT_TTL_S
    wait_s: float = 5.0
    poll_s: float = 0.02


@dataclass(frozen=True)
class IdempotencyClaim:
    """The key this request holds: the route may log it or use it as a correlation id."""

    tenant_id: str  # or ADMIN_SCOPE
    key: str
    fingerprint: str
    created_at: int


class _Replay(Exception):
    """Raised by the dependency to answer with a stored response instead of the route."""

    def __init__(self, response: Response) -> None:
        super().__init__("idempotent replay")
        self.response = response


def policy_of(request: Request) -> IdempotencyPolicy:
    """The app's :class:`IdempotencyPolicy` (``app.state.idempotency``), else the default."""
    found = getattr(request.app.state, "idempotency", None)
    return found if isinstance(found, IdempotencyPolicy) else IdempotencyPolicy()


def canonical_body(body: bytes) -> bytes:
    """JSON with sorted keys and no spaces when ``body`` is JSON, else ``body`` itself.

    Never raises: a lone surrogate (``"\\ud800"``, refused earlier by the body limits) is
    kept as its escape, so the fingerprint stays defined for any bytes.
    """
    if not body:
        return b""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    text = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", errors="backslashreplace")


def fingerprint(method: str, path: str, query: str, body: bytes) -> str:
    """SHA-256 (hex) of method, path, query and the canonical body."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), query.encode()):
        digest.update(part + b"\n")
    digest.update(canonical_body(body))
    return digest.hexdigest()


def parse_key(raw: str | None) -> str:
    """The key of an ``Idempotency-Key`` header value; a 400 problem when missing or invalid."""
    if raw is None:
        raise Problem(400, f"this route needs an {HEADER} header", slug="idempotency-key-missing")
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value or len(value) > MAX_KEY_LENGTH:
        raise Problem(
            400,
            f"the {HEADER} must have 1 to {MAX_KEY_LENGTH} characters",
            slug="idempotency-key-invalid",
        )
    return value


def _in_flight() -> Problem:
    return Problem(
        409,
        "a request with this Idempotency-Key is still being processed; retry later",
        slug="idempotency-key-in-flight",
        headers={"Retry-After": "1"},
    )


def _reused() -> Problem:
    return Problem(
        422,
        "this Idempotency-Key was used for a different request",
        slug="idempotency-key-reused",
    )


def _replay(row: Any) -> Response:
    headers = dict(row.response_headers or {})
    headers[REPLAYED_HEADER] = "true"
    return Response(
        content=bytes(row.response_body or b""),
        status_code=int(row.response_status),
        headers=headers,
    )


#: The header as OpenAPI shows it; checked by :func:`parse_key` (400 when missing or invalid,
#: as the draft asks, rather than FastAPI's 422 for a required header).
KeyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description="Unique per logical operation (e.g. a UUID); reuse it on every retry.",
    ),
]


async def idempotent(
    request: Request, who: auth.TenantPrincipal, _key: KeyHeader = None
) -> IdempotencyClaim:
    """Claim the request's ``Idempotency-Key`` for the tenant, or answer for the route.

    Returns the claim on a first request; raises a replay (handled by
    :class:`IdempotentRoute`) or a 409/422/400 problem otherwise.
    """
    assert who.tenant_id is not None  # a tenant principal
    return await _claim(request, who.tenant_id)


async def admin_idempotent(
    request: Request, who: auth.AdminPrincipal, _key: KeyHeader = None
) -> IdempotencyClaim:
    """As :func:`idempotent` for admin routes; admin keys share the :data:`ADMIN_SCOPE`."""
    return await _claim(request, ADMIN_SCOPE)


# The statements of every keyed request, built once (parameters bound at execute time).
_T = tables.idempotency_keys
_THIS_KEY = (_T.c.tenant_id == sa.bindparam("scope"), _T.c.key == sa.bindparam("idem_key"))
_DELETE_EXPIRED = _T.delete().where(*_THIS_KEY, _T.c.expires_at <= sa.bindparam("now"))
_SELECT_KEY = sa.select(_T).where(*_THIS_KEY)
_UNTOUCHED_CLAIM = (
    *_THIS_KEY,
    _T.c.status == IN_FLIGHT,
    _T.c.created_at == sa.bindparam("claimed_at"),
)
_RELEASE = _T.delete().where(*_UNTOUCHED_CLAIM)
_STORE = (
    _T.update()
    .where(*_UNTOUCHED_CLAIM)
    .values(
        status=DONE,
        response_status=sa.bindparam("answer_status"),
        response_headers=sa.bindparam("answer_headers"),
        response_body=sa.bindparam("answer_body"),
    )
)


@functools.cache
def _claim_insert(dialect: Dialect) -> Any:
    """INSERT of a new claim that does nothing when the key is taken, for ``dialect``."""
    return (
        dialect.insert(_T)
        .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
        .returning(_T.c.key)
    )


async def _claim(request: Request, scope: str) -> IdempotencyClaim:
    if not request.scope.get(_ROUTE):
        raise RuntimeError("the Idempotency dependency needs route_class=IdempotentRoute")
    key = parse_key(request.headers.get(HEADER))
    hub = auth.hub_of(request)
    policy = policy_of(request)
    body = await request.body()
    printed = fingerprint(request.method, request.url.path, request.url.query, body)
    engine = hub.engine
    claim_insert = _claim_insert(dialect_of(engine))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.wait_s
    while True:
        now = hub.clock.now_ms()
        async with engine.begin() as conn:
            # An expired key is free again (the scanner may not have run yet).
            await conn.execute(_DELETE_EXPIRED, {"scope": scope, "idem_key": key, "now": now})
            claimed = await conn.execute(
                claim_insert,
                {
                    "tenant_id": scope,
                    "key": key,
                    "fingerprint": printed,
                    "status": IN_FLIGHT,
                    "created_at": now,
                    "expires_at": now + int(policy.ttl_s * 1000),
                },
            )
            inserted = claimed.first() is not None
        if inserted:
            claim = IdempotencyClaim(scope, key, printed, now)
            request.scope[_CLAIM] = claim
            return claim
        async with reader(engine) as conn:
            row = (await conn.execute(_SELECT_KEY, {"scope": scope, "idem_key": key})).first()
        if row is None:
            continue  # released meanwhile: claim it
        if row.fingerprint != printed:
            raise _reused()
        if row.status == DONE:
            raise _Replay(_replay(row))
        if loop.time() >= deadline:
            raise _in_flight()
        await asyncio.sleep(policy.poll_s)


#: Shorthand for route signatures: ``idem: Idempotency``.
Idempotency = Annotated[IdempotencyClaim, Depends(idempotent)]
#: The same for admin routes: ``idem: AdminIdempotency`` (an admin key is required).
AdminIdempotency = Annotated[IdempotencyClaim, Depends(admin_idempotent)]


def _claim_params(claim: IdempotencyClaim) -> dict[str, Any]:
    return {"scope": claim.tenant_id, "idem_key": claim.key, "claimed_at": claim.created_at}


async def _release(request: Request, claim: IdempotencyClaim) -> None:
    async with auth.hub_of(request).engine.begin() as conn:
        await conn.execute(_RELEASE, _claim_params(claim))


async def _buffered(response: Response) -> Response:
    """``response`` with its whole body in memory (a streaming one is read out)."""
    if getattr(response, "body_iterator", None) is None:
        return response
    chunks = [
        chunk if isinstance(chunk, bytes) else str(chunk).encode()
        async for chunk in response.body_iterator  # type: ignore[attr-defined]
    ]
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return Response(
        content=b"".join(chunks),
        status_code=response.status_code,
        headers=headers,
        background=response.background,
    )


def _selected(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() in STORED_HEADERS}


async def _store(request: Request, claim: IdempotencyClaim, response: Response) -> None:
    answer = {
        "answer_status": response.status_code,
        "answer_headers": _selected(response.headers),
        "answer_body": bytes(response.body),
    }
    async with auth.hub_of(request).engine.begin() as conn:
        await conn.execute(_STORE, _claim_params(claim) | answer)


class IdempotentRoute(APIRoute):
    """A route class that stores and replays answers of routes using :data:`Idempotency`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler: replay, store 2xx–4xx, release the key on 5xx/errors."""
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            request.scope[_ROUTE] = True
            try:
                response = await original(request)
            except _Replay as replay:
                return replay.response
            except (Problem, StarletteHTTPException) as exc:
                claim = request.scope.get(_CLAIM)
                if claim is None:
                    raise
                problem = exc if isinstance(exc, Problem) else _as_problem(exc)
                if problem.status >= 500:
                    await _quietly_release(request, claim)
                    raise
                response = problems.response(request, problem)
            except BaseException:
                claim = request.scope.get(_CLAIM)
                if claim is not None:
                    await _quietly_release(request, claim)
                raise
            claim = request.scope.get(_CLAIM)
            if claim is None:
                return response
            if response.status_code >= 500:
                await _quietly_release(request, claim)
                return response
            response = await _buffered(response)
            try:
                await _store(request, claim, response)
            except Exception:
                log.exception("could not store the answer for Idempotency-Key %r", claim.key)
            return response

        return handler


async def _quietly_release(request: Request, claim: IdempotencyClaim) -> None:
    with contextlib.suppress(Exception):
        await _release(request, claim)


def _as_problem(exc: StarletteHTTPException) -> Problem:
    detail = exc.detail if isinstance(exc.detail, str) else "error"
    return Problem(exc.status_code, detail, headers=exc.headers)
