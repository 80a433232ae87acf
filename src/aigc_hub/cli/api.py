"""``aigc-hub api``: serve the HTTP API with uvicorn until Ctrl-C.

``--workers N`` runs N API processes on one listening socket (uvicorn's workers; the kernel
hands each new connection to one of them). It is safe on every database: each process is an
ordinary API process with its own hub, and nothing an API process does needs to be the only
one. On SQLite, in WAL mode, readers never wait and one writer at a time holds the file's
lock; every write transaction takes that lock up front (``BEGIN IMMEDIATE``), so two
processes never deadlock on a read-to-write upgrade, and a process that meets the lock waits
for it without blocking its event loop, for up to 30 s (``store/engine.py``,
``store/sqlite_inline.py``). Several processes therefore add CPU for the parts of a request
that are not its write transaction (HTTP, validation, rendering), not write throughput. What
stays per process: the memory cache's rate-limit buckets (a tenant gets the limit from each
process; set ``AIGC_HUB_REDIS_URL`` for one shared limit), the API key cache, ``/metrics``
(a scrape sees the worker that answered it), and the SSE feed's resume window (a resume on
another worker answers ``reset``, as behind a load balancer).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Annotated

import typer
from fastapi import FastAPI

from aigc_hub import bootstrap
from aigc_hub.cli import common, database
from aigc_hub.observability.logging import configure_logging
from aigc_hub.settings import MIN_CONSOLE_SECRET, Settings

#: Seconds a stop waits for open requests (SSE streams never finish by themselves).
SHUTDOWN_GRACE_S = 5
#: What each worker process imports to build its app (``factory=True``).
WORKER_APP = "aigc_hub.cli.api:worker_app"
CONSOLE_SECRET_ENV = "AIGC_HUB_CONSOLE_SECRET"


def _app(hub: bootstrap.Hub, settings: Settings) -> FastAPI:
    from aigc_hub.interfaces.http.app import create_app

    return create_app(
        hub,
        limits=settings.api_limits(),
        console_secret=settings.console_secret_bytes(),
        key_cache_s=settings.api_key_cache_s,
    )


async def _serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    hub = bootstrap.Hub.from_settings(settings)
    await hub.start()
    try:
        # Open SSE streams would hold a graceful stop forever: give them a few seconds.
        config = uvicorn.Config(
            _app(hub, settings),
            host=host,
            port=port,
            log_config=None,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            timeout_keep_alive=settings.api_keep_alive_s,
        )
        await uvicorn.Server(config).serve()
    finally:
        await hub.close()


def worker_app() -> FastAPI:
    """The app of one ``--workers`` process: a hub of its own from the environment's
    settings, started and closed by the app's lifespan (the process owns it)."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    hub = bootstrap.Hub.from_settings(settings)
    app = _app(hub, settings)
    serving = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[None]:
        await hub.start()
        try:
            async with serving(served):
                yield
        finally:
            await hub.close()

    app.router.lifespan_context = lifespan
    return app


def _serve_workers(settings: Settings, host: str, port: int, workers: int) -> None:
    import uvicorn

    if settings.console_secret_bytes() is None:
        # One random secret for all workers, or a console login would hold on one only.
        os.environ[CONSOLE_SECRET_ENV] = secrets.token_urlsafe(MIN_CONSOLE_SECRET)
    uvicorn.run(
        WORKER_APP,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )


def api(
    host: Annotated[
        str, typer.Option("--host", envvar="AIGC_HUB_API_HOST", help="Address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port", envvar="AIGC_HUB_API_PORT", min=0, max=65535, help="Port to listen on."
        ),
    ] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            envvar="AIGC_HUB_API_WORKERS",
            min=1,
            help="API processes on the one socket. Safe on SQLite too (WAL, BEGIN IMMEDIATE, "
            "a busy wait off the event loop): more processes add CPU for HTTP and "
            "validation, while writes still take turns on the file's one lock. Per process: "
            "the API key cache, /metrics, and the rate limit unless AIGC_HUB_REDIS_URL is set.",
        ),
    ] = 1,
) -> None:
    """Serve the HTTP API (problem+json errors, /healthz, /readyz, /metrics)."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    database.ready_url(settings.resolved_database_url())
    if workers > 1:
        _serve_workers(settings, host, port, workers)
        return
    common.run_async(_serve(settings, host, port))
