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

**Folded mode** (:data:`FoldedIdempotency`), for a route whose effects are all in one
transaction of its own: nothing is claimed up front. The route hands
:meth:`FoldedKey.hook` to its service, which calls it inside that transaction after its
writes; the hook renders the answer and inserts the key as ``done`` with it, so the effects
and the stored answer commit together or not at all (one write transaction per request
instead of three). The route returns :attr:`FoldedKey.stored`, the very response whose bytes
were stored. When the key is taken the hook raises, the transaction rolls back (no effect
happens) and the answer comes from the key's row exactly as above: replay, 422, or a wait
then 409; an expired row is replaced inside the transaction. An answer given without the
hook (a 4xx problem, an answer about what exists already) is stored by the route class in
one transaction the same way, and a replay wins over it when the key is taken. A 5xx answer,
an exception or a body that fails validation stores nothing. On PostgreSQL a concurrent
identical request waits on a unique index until the first commits, then replays its answer.

The policy is ``app.state.idempotency`` when set (an :class:`IdempotencyPolicy`), else the
defaults. Times come from ``hub.clock``. If storing the answer fails after the route
succeeded (claim-first mode), the claim stays ``in_flight`` (retries get 409) until it is
abandoned: a duplicate creation would be worse than a delayed retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.exceptions import HTTPException as StarletteHTTPException

from aigc_hub.interfaces.http import auth, problems
from aigc_hub.interfaces.http import idempotency_rows as rows
from aigc_hub.interfaces.http.idempotency_rows import DONE, KeyTaken
from aigc_hub.interfaces.http.problems import Problem
from aigc_hub.store.engine import reader

log = logging.getLogger(__name__)

T = TypeVar("T")

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
#: Response headers stored and replayed (lower case); others are not part of the answer.
STORED_HEADERS = ("content-type", "location", "content-location", "etag", "last-modified")
DEFAULT_TTL_S = 24 * 3600.0
#: The ``tenant_id`` column value of keys sent with admin keys (never a tenant's UUID).
ADMIN_SCOPE = "admin"
#: Runs of a folded route for one request: a rerun happens only when the request holding
#: the key let it go meanwhile, so more than one is already rare.
FOLDED_RUNS = 3

_CLAIM = "aigc_hub.idempotency.claim"
_FOLDED = "aigc_hub.idempotency.folded"
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

    @property
    def ref(self) -> rows.KeyRef:
        """The key's row reference."""
        return rows.KeyRef(self.tenant_id, self.key, self.fingerprint)


class FoldedKey:
    """A request's key in folded mode: not claimed; its answer is stored by :meth:`hook`
    inside the route's own transaction. One per request; not shared between tasks."""

    def __init__(self, ref: rows.KeyRef, now_ms: int, ttl_ms: int) -> None:
        self.ref = ref
        self.now_ms = now_ms
        self.ttl_ms = ttl_ms
        #: The response the hook stored, once its transaction reached the hook.
        self.stored: Response | None = None

    @property
    def key(self) -> str:
        """The key as the client sent it (unquoted)."""
        return self.ref.key

    def hook(
        self, render: Callable[[T], Response]
    ) -> Callable[[AsyncConnection, T], Awaitable[None]]:
        """A ``before_commit`` hook for a service: renders the answer from the service's
        result and inserts the key as ``done`` with it on the service's connection.

        Raises :class:`~.idempotency_rows.KeyTaken` when the key is held, so the service's
        transaction rolls back; :class:`IdempotentRoute` then answers from the holder's row.
        """

        async def store_answer(conn: AsyncConnection, result: T) -> None:
            response = render(result)
            await rows.insert_answer(conn, self.ref, _answer(response), self.now_ms, self.ttl_ms)
            self.stored = response

        return store_answer


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


async def folded_idempotent(
    request: Request, who: auth.TenantPrincipal, _key: KeyHeader = None
) -> FoldedKey:
    """The request's key for the tenant in folded mode: parsed and fingerprinted, not claimed
    (400 when missing or invalid). The route must pass :meth:`FoldedKey.hook` to its one
    transaction and return :attr:`FoldedKey.stored` when set."""
    assert who.tenant_id is not None  # a tenant principal
    ref = await _ref(request, who.tenant_id)
    hub = auth.hub_of(request)
    key = FoldedKey(ref, hub.clock.now_ms(), int(policy_of(request).ttl_s * 1000))
    request.scope[_FOLDED] = key
    return key


async def _ref(request: Request, scope: str) -> rows.KeyRef:
    if not request.scope.get(_ROUTE):
        raise RuntimeError("the Idempotency dependency needs route_class=IdempotentRoute")
    key = parse_key(request.headers.get(HEADER))
    if _is_form(request):
        body = await form_digest(request)
    else:
        body = await request.body()
    printed = fingerprint(request.method, request.url.path, request.url.query, body)
    return rows.KeyRef(scope, key, printed)


def _is_form(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media in ("multipart/form-data", "application/x-www-form-urlencoded")


async def form_digest(request: Request) -> bytes:
    """What a form request's fingerprint covers: its fields and files' names, types and
    SHA-256, sorted. Not the raw body: the route has parsed it already (the stream is
    consumed), and a client retrying a multipart upload picks a new boundary each time."""
    form = await request.form()  # parsed once, cached on the request
    parts: list[list[str]] = []
    for name, value in form.multi_items():
        if isinstance(value, str):
            parts.append([name, value])
            continue
        await value.seek(0)
        digest = hashlib.sha256()
        while chunk := await value.read(1 << 20):
            digest.update(chunk)
        await value.seek(0)
        parts.append([name, value.filename or "", value.content_type or "", digest.hexdigest()])
    return json.dumps(sorted(parts), ensure_ascii=False).encode()


async def _claim(request: Request, scope: str) -> IdempotencyClaim:
    ref = await _ref(request, scope)
    hub = auth.hub_of(request)
    policy = policy_of(request)
    ttl_ms = int(policy.ttl_s * 1000)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.wait_s
    while True:
        now = hub.clock.now_ms()
        async with hub.engine.begin() as conn:
            claimed = await rows.claim(conn, ref, now, ttl_ms)
        if claimed:
            claim = IdempotencyClaim(scope, ref.key, ref.fingerprint, now)
            request.scope[_CLAIM] = claim
            return claim
        async with reader(hub.engine) as conn:
            row = await rows.read(conn, ref)
        if row is None:
            continue  # released meanwhile: claim it
        if row.fingerprint != ref.fingerprint:
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
#: The folded mode for tenant routes: ``idem: FoldedIdempotency`` (see the module doc).
FoldedIdempotency = Annotated[FoldedKey, Depends(folded_idempotent)]


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


def _answer(response: Response) -> rows.Answer:
    return rows.Answer(response.status_code, _selected(response.headers), bytes(response.body))


def _problem_of(exc: Problem | StarletteHTTPException) -> Problem:
    if isinstance(exc, Problem):
        return exc
    detail = exc.detail if isinstance(exc.detail, str) else "error"
    return Problem(exc.status_code, detail, headers=exc.headers)


def _uses(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """True when ``call`` is among ``dependant``'s dependencies, at any depth."""
    return any(d.call is call or _uses(d, call) for d in dependant.dependencies)


class IdempotentRoute(APIRoute):
    """A route class that stores and replays answers of routes using :data:`Idempotency`
    (claim first) or :data:`FoldedIdempotency` (stored in the route's transaction)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler with the mode the route's dependencies ask for."""
        original = super().get_route_handler()
        if _uses(self.dependant, folded_idempotent):
            return _folded_handler(original)
        return _claim_first_handler(original)


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _claim_first_handler(original: Handler) -> Handler:
    """Replay, store 2xx–4xx, release the key on 5xx/errors."""

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
            problem = _problem_of(exc)
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
            async with auth.hub_of(request).engine.begin() as conn:
                await rows.store(conn, claim.ref, claim.created_at, _answer(response))
        except Exception:
            log.exception("could not store the answer for Idempotency-Key %r", claim.key)
        return response

    return handler


async def _quietly_release(request: Request, claim: IdempotencyClaim) -> None:
    with contextlib.suppress(Exception):
        async with auth.hub_of(request).engine.begin() as conn:
            await rows.release(conn, claim.ref, claim.created_at)


def _folded_handler(original: Handler) -> Handler:
    """Answer from the key's row when the route's transaction found it taken; store the
    answers the route gave without its hook; store nothing on 5xx/errors."""

    async def handler(request: Request) -> Response:
        request.scope[_ROUTE] = True
        for _ in range(FOLDED_RUNS):
            try:
                response = await original(request)
            except KeyTaken:
                held = await _holders_answer(request, request.scope[_FOLDED])
                if held is None:
                    continue  # the holder let the key go: run the route again
                return held
            except (Problem, StarletteHTTPException) as exc:
                problem = _problem_of(exc)
                if request.scope.get(_FOLDED) is None or problem.status >= 500:
                    raise
                response = problems.response(request, problem)
            key: FoldedKey | None = request.scope.get(_FOLDED)
            if key is None or key.stored is response or response.status_code >= 500:
                return response
            return await _store_alone(request, key, await _buffered(response))
        return problems.response(request, _in_flight())

    return handler


async def _store_alone(request: Request, key: FoldedKey, response: Response) -> Response:
    """Store an answer the route gave without its hook, in one transaction; the holder's
    answer instead when the key is taken."""
    engine = auth.hub_of(request).engine
    for _ in range(FOLDED_RUNS):
        try:
            async with engine.begin() as conn:
                await rows.insert_answer(conn, key.ref, _answer(response), key.now_ms, key.ttl_ms)
            return response
        except KeyTaken:
            held = await _holders_answer(request, key)
            if held is not None:
                return held
        except Exception:
            log.exception("could not store the answer for Idempotency-Key %r", key.key)
            return response
    return problems.response(request, _in_flight())


async def _holders_answer(request: Request, key: FoldedKey) -> Response | None:
    """The answer for a request whose key another request holds: its replay, 422 for
    another fingerprint, 409 after waiting for one in flight; None once the key is free."""
    hub = auth.hub_of(request)
    policy = policy_of(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.wait_s
    while True:
        async with reader(hub.engine) as conn:
            row = await rows.read(conn, key.ref)
        if row is None or row.expires_at <= hub.clock.now_ms():
            return None
        if row.fingerprint != key.ref.fingerprint:
            return problems.response(request, _reused())
        if row.status == DONE:
            return _replay(row)
        if loop.time() >= deadline:
            return problems.response(request, _in_flight())
        await asyncio.sleep(policy.poll_s)
