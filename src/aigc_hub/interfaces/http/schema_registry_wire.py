"""How the schema registry speaks Confluent's wire, so confluent-kafka's clients work unchanged.

* **Answers** are ``application/vnd.schemaregistry.v1+json``; every error, the
  authentication's included, is ``{"error_code": ..., "message": ...}`` (never the hub's
  problem+json, which Confluent clients cannot read): :class:`ConfluentRoute` turns the
  registry's errors (:mod:`aigc_hub.schemas.avro_registry.errors`) and :class:`Refusal`
  into that shape.
* **Bodies** are JSON sent as ``application/vnd.schemaregistry.v1+json``,
  ``application/vnd.schemaregistry+json``, ``application/json`` or
  ``application/octet-stream`` (or with no type); others get 415.
* **Keys.** Confluent clients send HTTP basic auth (``basic.auth.user.info``) or a bearer
  token (``bearer.auth.credentials.source=STATIC_TOKEN``): the hub's API key is taken as the
  basic-auth password (any user name) or as the token. Any live key reads; writes need an
  admin key (401 without a live key, 403 with a tenant's).
* **Query flags** are Confluent's: ``true`` in any case is true, anything else false.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Annotated, Any, Final, TypeVar

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from aigc_hub import tenancy
from aigc_hub.core import errors as core_errors
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.interfaces.http.key_cache import key_cache_of
from aigc_hub.schemas.avro_registry import errors
from aigc_hub.schemas.avro_registry.store import AvroRegistry
from aigc_hub.tenancy import Principal

log = logging.getLogger(__name__)
T = TypeVar("T")

MEDIA_TYPE: Final = "application/vnd.schemaregistry.v1+json"
#: Request body types Confluent's server consumes (octet-stream: its "generic request").
BODY_TYPES = frozenset(
    {
        MEDIA_TYPE,
        "application/vnd.schemaregistry+json",
        "application/json",
        "application/octet-stream",
    }
)
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="schema-registry", Bearer'}
#: Confluent's code for an authorization refusal (its RBAC answers 403 with it).
FORBIDDEN_CODE = 40301


class Refusal(Exception):
    """A request refused before the registry is asked (authentication, body, media type)."""

    def __init__(
        self, status: int, error_code: int, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.headers = dict(headers or {})


def ok(content: object, status: int = 200) -> JSONResponse:
    """A successful answer in the registry's media type."""
    return JSONResponse(content, status_code=status, media_type=MEDIA_TYPE)


def error(
    status: int, error_code: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """An error in Confluent's shape: ``{"error_code", "message"}``."""
    body = {"error_code": error_code, "message": message}
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


class ConfluentRoute(APIRoute):
    """A route whose every failure is answered in Confluent's error shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def confluent(request: Request) -> Response:
            try:
                return await handler(request)
            except Refusal as refusal:
                return error(refusal.status, refusal.error_code, refusal.message, refusal.headers)
            except errors.RegistryError as exc:
                return error(exc.http_status, exc.error_code, exc.message)
            except RequestValidationError as exc:
                return error(422, 422, f"invalid request: {exc.errors()}")
            except StarletteHTTPException as exc:
                return error(exc.status_code, exc.status_code, str(exc.detail), exc.headers)
            except core_errors.RetryableError as exc:
                return error(500, 50001, f"Error in the backend data store: {exc.message}")
            except Exception:
                # Like the hub's problem answers: logged with its traceback, never shown.
                log.exception("schema registry: %s %s failed", request.method, request.url.path)
                return error(500, 500, "Internal Server Error")

        return confluent


def registry(request: Request) -> AvroRegistry:
    """The app's registry over the hub's database (made on first use, kept on the app)."""
    found: AvroRegistry | None = getattr(request.app.state, "avro_registry", None)
    if found is None:
        hub = hub_of(request)
        found = request.app.state.avro_registry = AvroRegistry(hub.engine, hub.clock)
    return found


def presented_key(authorization: str) -> str | None:
    """The API key in an ``Authorization`` header: a bearer token, or the password of basic
    auth (the user name is not looked at). None when there is none."""
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer":
        return credentials or None
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


async def reader_principal(request: Request) -> Principal:
    """The principal of any live key (tenant or admin); else a 401 refusal."""
    key = presented_key(request.headers.get("authorization", ""))
    if key is None:
        raise Refusal(
            401,
            401,
            "an API key is required: HTTP basic auth with the key as the password, "
            "or Authorization: Bearer <key>",
            _CHALLENGE,
        )
    cache = key_cache_of(request)
    key_hash = tenancy.hash_key(key)
    found = cache.get(key_hash)
    if found is None:
        found = await tenancy.authenticate(hub_of(request).engine, key)
        if found is None:
            raise Refusal(401, 401, "the API key is unknown or revoked", _CHALLENGE)
        cache.put(key_hash, found)
    request.state.principal = found
    return found


async def writer_principal(who: Annotated[Principal, Depends(reader_principal)]) -> Principal:
    """An admin key's principal: the registry is shared by the whole hub, so only admins
    change it; a tenant key gets 403."""
    if who.role != "admin":
        raise Refusal(403, FORBIDDEN_CODE, "changing the schema registry needs an admin key")
    return who


#: Route parameter types: any live key, an admin key, the registry.
Reader = Annotated[Principal, Depends(reader_principal)]
Writer = Annotated[Principal, Depends(writer_principal)]
Registry = Annotated[AvroRegistry, Depends(registry)]


async def json_body(request: Request) -> Mapping[str, object]:
    """The request's JSON object; 415 for another media type, 400 for text that is not
    JSON, 422 for JSON that is not an object."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media and media not in BODY_TYPES:
        raise Refusal(415, 415, f"HTTP 415 Unsupported Media Type: send {MEDIA_TYPE}")
    try:
        document = json.loads(await request.body())
    except ValueError as exc:
        raise Refusal(400, 400, f"the body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise Refusal(422, 422, "the body must be a JSON object")
    return document


def flag(request: Request, name: str, *aliases: str) -> bool:
    """A boolean query parameter, Confluent's way: ``true`` (any case) or false."""
    for key in (name, *aliases):
        if request.query_params.get(key, "").strip().lower() == "true":
            return True
    return False


def page(request: Request, items: Sequence[T]) -> list[T]:
    """``items`` from ``offset`` on, at most ``limit`` of them (absent or < 1: all)."""
    offset = max(0, _int(request.query_params.get("offset"), 0))
    limit = _int(request.query_params.get("limit"), -1)
    chosen = items[offset:]
    return list(chosen if limit < 1 else chosen[:limit])


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
