"""``aigc-hub up | relay | worker | scan``: run the hub, or one of its parts, until Ctrl-C.

``up`` migrates the database first; the others check once, at start, that it is reachable
and migrated, and exit with one line naming the fix instead of failing on every pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import typer

from aigc_hub import bootstrap
from aigc_hub.cli import common, database
from aigc_hub.observability.exporter import start_exporter
from aigc_hub.observability.logging import configure_logging
from aigc_hub.pipeline import UpContext
from aigc_hub.settings import Settings


async def _serve(
    settings: Settings,
    *,
    relay: bool,
    groups: list[str] | None,
    scan: bool = False,
    lag: bool = False,
    api: bool = False,
) -> None:
    hub = bootstrap.Hub.from_settings(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    known = {s.group for s in hub.handler_specs} | {s.group for s in hub.stream_specs}
    unknown = sorted(set(groups or ()) - known)
    if unknown:
        await hub.close()
        common.fail(
            f"unknown consumer group(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(known)) or 'none (no pipeline installed)'}",
            common.ExitCode.NOT_FOUND,
        )
    exporter = (
        start_exporter(settings.metrics_port, settings.metrics_host)
        if settings.metrics_port is not None
        else None
    )
    try:
        if api:
            # `up`: everything in one process, the pipelines' outside processes included; the
            # hooks run before start, since one may give the hub the settings its state needs
            async with _up_hooks(hub, settings):
                await hub.start()
                await _with_api(hub, settings, stop, groups=groups, relay=relay, scan=scan, lag=lag)
        else:
            await hub.start()
            await hub.run(stop, groups=groups, relay=relay, scan=scan, lag=lag)
    finally:
        await hub.close()
        if exporter is not None:
            exporter.close()


async def _with_api(
    hub: bootstrap.Hub, settings: Settings, stop: asyncio.Event, **parts: object
) -> None:
    """Serve the HTTP API beside the hub's parts; Ctrl-C stops both, API first."""
    import uvicorn

    from aigc_hub.interfaces.http.app import create_app

    class _Server(uvicorn.Server):
        # Signals are ours (they set ``stop``); uvicorn must not re-raise them on exit.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        create_app(
            hub,
            limits=settings.api_limits(),
            console_secret=settings.console_secret_bytes(),
            key_cache_s=settings.api_key_cache_s,
        ),
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        timeout_graceful_shutdown=5,  # open SSE streams must not hold the stop forever
        timeout_keep_alive=settings.api_keep_alive_s,
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve(), name="http")
    running = asyncio.create_task(hub.run(stop, **parts), name="hub")  # type: ignore[arg-type]
    await stop.wait()
    server.should_exit = True
    await serving
    await running


@contextlib.asynccontextmanager
async def _up_hooks(hub: bootstrap.Hub, settings: Settings) -> AsyncIterator[None]:
    """Run every pipeline's ``up`` hooks (their outside processes) until the block ends."""
    context = UpContext(
        api_url=f"http://{settings.api_host}:{settings.api_port}",
        data_dir=settings.data_dir,
        say=common.console().print,
        warn=common.report_warning,
    )
    async with contextlib.AsyncExitStack() as stack:
        for pipeline in hub.pipelines:
            for hook in pipeline.up_hooks:
                await stack.enter_async_context(hook(hub, context))
        yield


def _configure_logging(settings: Settings) -> None:
    configure_logging(level=settings.log_level.upper(), json=settings.log_json)


Host = Annotated[
    str,
    typer.Option("--host", envvar="AIGC_HUB_API_HOST", help="Address the HTTP API listens on."),
]
Port = Annotated[
    int,
    typer.Option(
        "--port",
        envvar="AIGC_HUB_API_PORT",
        min=0,
        max=65535,
        help="Port the HTTP API listens on.",
    ),
]


def up(host: Host = "127.0.0.1", port: Port = 8000) -> None:
    """Run everything on one machine (migrations, API, relay, consumer groups, scanners,
    lag monitor) until Ctrl-C."""
    settings = Settings()
    settings.api_host, settings.api_port = host, port
    _configure_logging(settings)
    url, _revision = database.upgrade(settings.resolved_database_url())
    out = common.console()
    out.print(f"[bold]AIGC Hub[/] up: database {url}, embedded log {settings.resolved_log_path()}")
    out.print(f"data lives under {settings.data_dir.resolve()}; Ctrl-C stops")
    out.print(f"API on http://{settings.api_host}:{settings.api_port} (docs at /docs)")
    common.run_async(_serve(settings, relay=True, groups=None, scan=True, lag=True, api=True))


def relay() -> None:
    """Run only the outbox relay (start several on PostgreSQL; one is active on SQLite)."""
    settings = Settings()
    _configure_logging(settings)
    database.ready_url(settings.resolved_database_url())
    common.run_async(_serve(settings, relay=True, groups=[]))


def scan() -> None:
    """Run the scanners (one active instance each across processes) and the lag monitor."""
    settings = Settings()
    _configure_logging(settings)
    database.ready_url(settings.resolved_database_url())
    common.run_async(_serve(settings, relay=False, groups=[], scan=True, lag=True))


def worker(
    group: Annotated[
        list[str],
        typer.Option(
            "--group",
            help="Consumer group(s) to run: handler groups or stream groups (the telemetry road).",
        ),
    ],
    concurrency: Annotated[
        int | None, typer.Option(envvar="AIGC_HUB_CONCURRENCY", min=1, help="Records in flight.")
    ] = None,
) -> None:
    """Run the named consumer groups (handler or stream groups); start more workers to share
    partitions."""
    settings = Settings()
    if concurrency:
        settings.concurrency = concurrency
    _configure_logging(settings)
    database.ready_url(settings.resolved_database_url())
    common.run_async(_serve(settings, relay=False, groups=group))
