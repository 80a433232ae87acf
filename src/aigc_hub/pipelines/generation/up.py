"""``aigc-hub up`` on embedded defaults runs the local provider beside the hub, so a fresh
machine can generate real clips with nothing else installed.

It is served in the same process on the port of ``local_provider_url`` with a webhook secret
shared with the callback gateway (the configured one, or a fresh one per start).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from aigc_hub.media import tools as media_tools
from aigc_hub.pipeline import Pipeline, UpContext
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import NAME, Generation, build
from aigc_hub.reliability import webhooks
from aigc_hub.settings import API_KEEP_ALIVE_S

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _use(hub: Hub, settings: GenerationSettings) -> None:
    """Have ``hub`` build its Generation from ``settings`` (the secret shared with the
    provider served here) rather than from the environment alone."""
    found = next(p for p in hub.pipelines if p.name == NAME)
    assert isinstance(found, Pipeline)
    # Sound: the pipeline named generation is the one whose state is a Generation (it is
    # looked up, not imported, because the pipeline module imports this hook).
    generation = cast("Pipeline[Generation]", found)
    hub.use_state(generation, lambda built_for, _hub_settings: build(built_for, settings))


def wants_embedded_provider(settings: GenerationSettings) -> bool:
    """True when ``local`` is enabled, asked to run here, and its URL is on this machine."""
    host = urlsplit(settings.local_provider_url).hostname or ""
    return settings.run_local_provider and "local" in settings.provider_names() and host in LOOPBACK


@contextlib.asynccontextmanager
async def local_provider_hook(hub: Hub, up: UpContext) -> AsyncIterator[None]:
    """Generation's ``up`` hook: install its settings, say in one line when media tools are
    missing, and serve the local provider (when wanted) until ``up`` stops."""
    async with embedded_provider(hub, up.data_dir / "provider", api_url=up.api_url) as gen:
        if gen is not None:
            problems = media_tools.missing()
            if problems:
                up.warn("generation tasks cannot finish here: " + "; ".join(map(str, problems)))
            if gen.run_local_provider:
                up.say(f"local provider on {gen.local_provider_url}")
        yield


@contextlib.asynccontextmanager
async def embedded_provider(
    hub: Hub, data_dir: Path, *, api_url: str
) -> AsyncIterator[GenerationSettings | None]:
    """Give ``hub`` the generation settings in force and, when wanted, serve the local
    provider until the block ends. Enter it before ``hub.start()``, which builds the state
    from these settings. Yields them (None: generation not loaded)."""
    if not any(p.name == NAME for p in hub.pipelines):
        yield None
        return
    settings = GenerationSettings()
    if "callback_base_url" not in settings.model_fields_set:
        settings = settings.model_copy(update={"callback_base_url": api_url})
    if not wants_embedded_provider(settings):
        _use(hub, settings)
        yield settings
        return
    secrets = settings.local_secrets() or [webhooks.generate_secret()]
    settings = settings.model_copy(update={"local_webhook_secrets": ",".join(secrets)})
    _use(hub, settings)

    import uvicorn

    from aigc_hub.providers.local.app import ProviderConfig, create_app

    url = urlsplit(settings.local_provider_url)
    config = ProviderConfig(
        webhook_secret=secrets[0],
        data_dir=data_dir,
        host=url.hostname or "127.0.0.1",
        port=url.port or 80,
        render_mode="ffmpeg",
    )

    class _Server(uvicorn.Server):
        # The hub owns signals (they stop everything); uvicorn must not take them.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = _Server(
        uvicorn.Config(
            create_app(config),
            host=config.host,
            port=config.port,
            log_config=None,
            log_level="warning",
            timeout_keep_alive=API_KEEP_ALIVE_S,
        )
    )
    serving = asyncio.create_task(server.serve(), name="local-provider")
    try:
        yield settings
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
