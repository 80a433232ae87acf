"""Bearer-key authentication: FastAPI dependencies that yield a :class:`Principal`.

``tenant_principal`` accepts a tenant key, ``admin_principal`` an admin key. A missing,
unknown or revoked key is a 401 problem with ``WWW-Authenticate: Bearer``; a valid key of
the wrong role is a 403. Tenant isolation: a route that finds a row of another tenant must
answer exactly as for an unknown id, with :func:`not_found`, so ids cannot be probed.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import Depends, Request

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.key_cache import key_cache_of
from aigc_hub.interfaces.http.problems import Problem
from aigc_hub.pipeline import StateKey
from aigc_hub.tenancy import Principal

S = TypeVar("S")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def hub_of(request: Request) -> Hub:
    """The hub the app was created around."""
    hub: Hub = request.app.state.hub
    return hub


def state_of(request: Request, key: StateKey[S]) -> S:
    """The state of the pipeline ``key`` names in the request's hub (built at hub start).

    A pipeline's routes wrap it in a dependency: ``Depends(lambda r: state_of(r, KEY))``.
    """
    return hub_of(request).state_of(key)


def not_found(what: str = "resource") -> Problem:
    """The 404 problem for an id that is unknown *or belongs to another tenant*.

    Routes ``raise not_found("job")`` in both cases, with the same detail, so a tenant
    cannot tell another tenant's ids from ids that do not exist.
    """
    return Problem(404, f"no such {what}")


def _unauthorized(detail: str) -> Problem:
    return Problem(401, detail, headers=_CHALLENGE)


async def principal(request: Request) -> Principal:
    """The principal of the request's ``Authorization: Bearer <key>``, any role; else 401.

    A live key is remembered for a few seconds (:mod:`.key_cache`: how long a key revoked
    elsewhere may still be accepted)."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    presented = key.strip()
    if scheme.lower() != "bearer" or not presented:
        raise _unauthorized("an API key is required: Authorization: Bearer <key>")
    cache = key_cache_of(request)
    key_hash = tenancy.hash_key(presented)
    found = cache.get(key_hash)
    if found is None:
        found = await tenancy.authenticate(hub_of(request).engine, presented)
        if found is None:
            raise _unauthorized("the API key is unknown or revoked")
        cache.put(key_hash, found)
    request.state.principal = found
    return found


async def tenant_principal(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """A tenant key's principal (``tenant_id`` set); an admin key is refused with 403."""
    if who.role != "tenant" or who.tenant_id is None:
        raise Problem(403, "this route needs a tenant key")
    return who


async def admin_principal(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """An admin key's principal; a tenant key is refused with 403."""
    if who.role != "admin":
        raise Problem(403, "this route needs an admin key")
    return who


#: Shorthands for route signatures: ``who: TenantPrincipal``.
TenantPrincipal = Annotated[Principal, Depends(tenant_principal)]
AdminPrincipal = Annotated[Principal, Depends(admin_principal)]
