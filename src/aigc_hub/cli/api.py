"""``aigc-hub api``: serve the HTTP API with uvicorn until Ctrl-C."""

from __future__ import annotations

from typing import Annotated

import typer

from aigc_hub import bootstrap
from aigc_hub.cli import common, database
from aigc_hub.observability.logging import configure_logging
from aigc_hub.settings import Settings

#: Seconds a stop waits for open requests (SSE streams never finish by themselves).
SHUTDOWN_GRACE_S = 5


async def _serve(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from aigc_hub.interfaces.http.app import create_app

    hub = bootstrap.Hub.from_settings(settings)
    await hub.start()
    try:
        # Open SSE streams would hold a graceful stop forever: give them a few seconds.
        config = uvicorn.Config(
            create_app(
                hub,
                limits=settings.api_limits(),
                console_secret=settings.console_secret_bytes(),
                key_cache_s=settings.api_key_cache_s,
            ),
            host=host,
            port=port,
            log_config=None,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
        await uvicorn.Server(config).serve()
    finally:
        await hub.close()


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
) -> None:
    """Serve the HTTP API (problem+json errors, /healthz, /readyz, /metrics)."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    database.ready_url(settings.resolved_database_url())
    common.run_async(_serve(settings, host, port))
