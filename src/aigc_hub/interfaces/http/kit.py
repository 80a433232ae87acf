"""The HTTP kit: the only part of ``aigc_hub.interfaces`` a pipeline may import.

A pipeline's routers need a few things from the HTTP layer: the hub behind a request, its
pipeline's typed state (``state_of``), the problem+json error, tenant isolation's 404, the
rate-limited tenant, the admission gate and idempotent routes. They take them from here, so
the rest of ``interfaces/`` can change without touching any pipeline;
``tests/unit/test_layering.py`` enforces it. Add a name here only when a pipeline's router
truly needs it, and keep each name's home module the owner.
"""

from __future__ import annotations

from aigc_hub.interfaces.http.auth import AdminPrincipal, hub_of, not_found, state_of
from aigc_hub.interfaces.http.idempotency import (
    FoldedIdempotency,
    Idempotency,
    IdempotentRoute,
    KeyHeader,
    parse_key,
)
from aigc_hub.interfaces.http.limits import LimitedTenant, admit
from aigc_hub.interfaces.http.problems import Problem

__all__ = [
    "AdminPrincipal",
    "FoldedIdempotency",
    "Idempotency",
    "IdempotentRoute",
    "KeyHeader",
    "LimitedTenant",
    "Problem",
    "admit",
    "hub_of",
    "not_found",
    "parse_key",
    "state_of",
]
