"""``create_app(hub)``: the FastAPI application around a hub the caller starts and closes.

One router module per area (``health``, ``admin``, ``events``); a pipeline adds its own
routers through ``Pipeline.routers``, mounted under ``/v1``. The web console (HTML, outside
the OpenAPI document) is mounted at ``/console``. Errors are
problem+json (:mod:`.problems`); bodies are bounded by :class:`.limits.BodyLimits`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces import console
from aigc_hub.interfaces.console.sessions import Sessions
from aigc_hub.interfaces.http import admin, blobs, events, health, problems, schema_registry
from aigc_hub.interfaces.http.key_cache import DEFAULT_TTL_S, KeyCache
from aigc_hub.interfaces.http.limits import BodyLimits, Limits

#: The prefix of the versioned API.
API_PREFIX = "/v1"


def create_app(
    hub: Hub,
    *,
    limits: Limits | None = None,
    routers: list[APIRouter] | None = None,
    console_secret: bytes | None = None,
    key_cache_s: float = DEFAULT_TTL_S,
) -> FastAPI:
    """The HTTP API for ``hub``; ``routers`` (tests, extensions) are mounted under ``/v1``.

    ``console_secret`` signs console sessions (processes that share it share logins; None:
    a random secret per process). ``key_cache_s``: how long a live API key is remembered
    (:mod:`.key_cache`; 0 = ask the database on every request). The app does not own the
    hub: no lifespan starts or closes it.
    """
    limits = limits or Limits()
    app = FastAPI(
        title="AIGC Hub",
        version="1",
        openapi_url=f"{API_PREFIX}/openapi.json",
        lifespan=_lifespan,
    )
    app.state.hub = hub
    app.state.limits = limits
    app.state.key_cache = KeyCache(ttl_s=key_cache_s)
    if console_secret is not None:
        app.state.console_sessions = Sessions(secret=console_secret)
    problems.install(app)
    # The local blob engine's signed URLs point at the hub: serve them (streamed, bounded
    # by the route itself, so outside the JSON body limit).
    served = hub.blobs is not None and hub.blobs.features.urls_served_by_hub
    if served and isinstance(hub.blobs, blobs.HubServedBlobs):
        app.include_router(blobs.router(hub.blobs))
    exempt = (blobs.PREFIX + "/",) if served else ()
    larger = tuple(
        (API_PREFIX + prefix, limit(hub)) for p in hub.pipelines for prefix, limit in p.body_limits
    )
    app.add_middleware(BodyLimits, limits=limits, exempt=exempt, larger=larger)
    app.include_router(health.router)
    app.include_router(admin.router, prefix="/admin")
    app.include_router(events.router, prefix=API_PREFIX)
    app.include_router(schema_registry.router, prefix=schema_registry.PREFIX)
    app.include_router(console.router(), prefix=console.PREFIX, include_in_schema=False)
    app.mount(console.STATIC_PATH, console.static_files(), name="console-static")
    for pipeline in hub.pipelines:
        for router in pipeline.routers:
            app.include_router(router, prefix=API_PREFIX)
        for router in pipeline.root_routers:
            app.include_router(router)
    for router in routers or []:
        app.include_router(router, prefix=API_PREFIX)
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """On shutdown, end the SSE streams (the notification feed) and stop bulk replay jobs
    still running (they are marked, not lost)."""
    yield
    hub: Hub = app.state.hub
    await hub.notification_feed.close()
    jobs = getattr(app.state, "replay_jobs", None)
    if jobs is not None:
        await jobs.close()
