"""Probes: ``/healthz`` (the process answers), ``/readyz`` (its dependencies do), ``/metrics``.

``/readyz`` checks the database (a ``SELECT 1`` and migrations at head), the broker (a lag
query for no topic: cheap on every engine) and the cache (a lease lookup). It answers 200
when all pass, else a 503 problem whose ``failed`` lists the checks that did not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import generate_latest

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.auth import hub_of
from aigc_hub.interfaces.http.problems import Problem
from aigc_hub.store import migrate

log = logging.getLogger(__name__)

#: The text exposition format ``generate_latest`` writes.
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Seconds one readiness check may take before it counts as failed.
CHECK_TIMEOUT_S = 5.0

router = APIRouter(tags=["health"])


async def _database(hub: Hub) -> None:
    async with hub.engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
    url = hub.engine.url.render_as_string(hide_password=False)
    if not await asyncio.to_thread(migrate.is_current, url):
        raise RuntimeError("migrations are not at head")


async def _broker(hub: Hub) -> None:
    await hub.broker.lag("readyz", [])


async def _cache(hub: Hub) -> None:
    await hub.cache.leases.holder("readyz")


CHECKS: dict[str, Callable[[Hub], Awaitable[None]]] = {
    "database": _database,
    "broker": _broker,
    "cache": _cache,
}


async def _failed(name: str, hub: Hub) -> str | None:
    try:
        await asyncio.wait_for(CHECKS[name](hub), CHECK_TIMEOUT_S)
    except Exception as exc:
        log.warning("readiness check %s failed: %s", name, type(exc).__name__)
        return name
    return None


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """200 while the process serves requests."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> dict[str, object]:
    """200 when database, broker and cache answer; else a 503 problem naming the failures."""
    hub = hub_of(request)
    results = await asyncio.gather(*(_failed(name, hub) for name in CHECKS))
    failed = [name for name in results if name]
    if failed:
        raise Problem(503, f"not ready: {', '.join(failed)}", retry_after_s=5, failed=failed)
    return {"status": "ok", "checks": list(CHECKS)}


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics() -> Response:
    """The process's Prometheus metrics, text exposition format 0.0.4."""
    return Response(generate_latest(), media_type=METRICS_MEDIA_TYPE)
