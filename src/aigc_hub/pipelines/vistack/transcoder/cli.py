"""``aigc-hub vistack transcoder``: run the transcoder service."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Annotated

import typer

from aigc_hub.blobs.base import BlobStore
from aigc_hub.cli import kit

from .settings import TranscoderSettings

app = kit.new_app("transcoder", "The transcoder: the gRPC ProcessVideo service workers call.")


@app.command()
def serve(
    listen: Annotated[
        str | None, typer.Option(help="host:port to listen on (default 127.0.0.1:50051).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, max=64, help="Videos transcoded at once (default 2).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Serve /metrics on 127.0.0.1:PORT.")
    ] = None,
) -> None:
    """Serve ProcessVideo until SIGTERM or Ctrl-C: download from the hub's object store
    (AIGC_HUB_BLOB_URL), transcode to MPEG-DASH with FFmpeg, upload the files."""
    from aigc_hub.bootstrap import make_blobs
    from aigc_hub.media import tools
    from aigc_hub.settings import Settings

    settings = TranscoderSettings()
    overrides = {"listen": listen, "concurrency": concurrency, "metrics_port": metrics_port}
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    missing = tools.missing()
    if missing:
        kit.fail(f"{missing[0]}")
    asyncio.run(_serve(settings, make_blobs(Settings())))


async def _serve(settings: TranscoderSettings, store: BlobStore) -> None:
    from aigc_hub.media.sandbox import MediaLimits
    from aigc_hub.observability.exporter import start_exporter

    from .server import serve
    from .service import TranscoderService

    service = TranscoderService(
        store,
        concurrency=settings.concurrency,
        queue=settings.queue,
        limits=MediaLimits(timeout_s=settings.timeout_s),
        max_source_bytes=settings.max_source_bytes,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    exporter = start_exporter(settings.metrics_port) if settings.metrics_port else None
    try:
        await serve(
            service,
            settings.listen,
            stop,
            on_listening=lambda address: kit.console().print(f"transcoder listening on {address}"),
        )
    finally:
        if exporter is not None:
            exporter.close()
        await store.close()
