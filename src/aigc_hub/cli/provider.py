"""``aigc-hub provider serve``: run the local AI-video provider (a real process, for tests,
demos and benchmarks of the generation pipeline)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from aigc_hub.cli import common

app = common.new_app(
    "provider",
    "A local AI-video provider: a vendor-style job API that renders real clips with FFmpeg "
    "and reports progress with signed webhooks.",
)

RenderModeOption = typer.Option(
    "--render-mode",
    envvar="AIGC_HUB_PROVIDER_RENDER_MODE",
    help="ffmpeg: render every job with FFmpeg; instant: serve one clip per size and "
    "duration, rendered once and cached (zero render time, for benchmarks).",
)


def serve(
    host: Annotated[
        str,
        typer.Option("--host", envvar="AIGC_HUB_PROVIDER_HOST", help="Address to listen on."),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port",
            envvar="AIGC_HUB_PROVIDER_PORT",
            min=1,
            max=65535,
            help="Port to listen on (output URLs point here).",
        ),
    ] = 8100,
    webhook_secret: Annotated[
        str | None,
        typer.Option(
            "--webhook-secret",
            envvar="AIGC_HUB_PROVIDER_WEBHOOK_SECRET",
            help="Standard Webhooks secret (whsec_<base64>; the prefix and '=' padding are "
            "optional) that signs job webhooks; "
            "a fresh one is made and printed when not given.",
        ),
    ] = None,
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            envvar="AIGC_HUB_PROVIDER_DATA_DIR",
            help="Folder for rendered clips and the instant-mode cache.",
        ),
    ] = Path("var/provider"),
    render_mode: Annotated[str, RenderModeOption] = "ffmpeg",
    max_concurrent: Annotated[
        int,
        typer.Option(
            "--max-concurrent",
            envvar="AIGC_HUB_PROVIDER_MAX_CONCURRENT",
            min=1,
            max=64,
            help="Jobs rendering at once; the rest wait queued.",
        ),
    ] = 2,
    output_ttl_s: Annotated[
        int,
        typer.Option(
            "--output-ttl",
            envvar="AIGC_HUB_PROVIDER_OUTPUT_TTL",
            min=1,
            help="Seconds a signed output URL stays valid.",
        ),
    ] = 600,
    faults: Annotated[
        bool,
        typer.Option(
            "--faults/--no-faults",
            envvar="AIGC_HUB_PROVIDER_FAULTS",
            help="Expose POST /_faults and GET /_stats so tests can inject failures.",
        ),
    ] = False,
) -> None:
    """Serve the local provider's job API until Ctrl-C (see docs/providers.md)."""
    import uvicorn

    from aigc_hub.providers.local.app import ProviderConfig, create_app
    from aigc_hub.reliability import webhooks

    if render_mode not in ("ffmpeg", "instant"):
        common.fail(
            f"--render-mode must be ffmpeg or instant, not {render_mode!r}", common.ExitCode.USAGE
        )
    if webhook_secret is None:
        webhook_secret = webhooks.generate_secret()
        common.console().print(f"webhook secret: {webhook_secret}")
    try:
        webhooks.decode_secret(webhook_secret)  # refused before listening, never per webhook
    except webhooks.WebhookSecretError as exc:
        common.fail(
            f"--webhook-secret (AIGC_HUB_PROVIDER_WEBHOOK_SECRET): {exc}", common.ExitCode.USAGE
        )
    config = ProviderConfig(
        webhook_secret=webhook_secret,
        data_dir=data_dir,
        host=host,
        port=port,
        render_mode="instant" if render_mode == "instant" else "ffmpeg",
        max_concurrent=max_concurrent,
        faults=faults,
        output_ttl_s=output_ttl_s,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    common.console().print(f"local provider on {config.base_url} (render: {render_mode})")
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")


app.command("serve")(serve)
