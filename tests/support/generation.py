"""A running generation stack for tests: hub + API (real uvicorn) + the local provider."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from aigc_hub import tenancy
from aigc_hub.blobs.local import LocalBlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.messaging.base import Broker
from aigc_hub.pipelines.generation import services
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import STATE, Generation, build
from aigc_hub.reliability import notifications
from aigc_hub.settings import API_KEEP_ALIVE_S
from aigc_hub.store import engine as store_engine
from tests.support.provider import SECRET, ProviderServer, free_port


@dataclass
class Stack:
    hub: Hub
    api_url: str
    provider: ProviderServer

    @property
    def gen(self) -> Generation:
        """The generation pipeline's state in this stack's hub."""
        return self.hub.state_of(STATE)

    async def tenant(self, name: str, credits: int = 100_000) -> str:
        tenant, key = await tenancy.create_tenant(self.hub.engine, name)
        if credits > 0:
            await services.grant_credits(
                self.hub, tenant_id=tenant.id, amount=credits, grant_id=f"start-{tenant.id}"
            )
        return key

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {key}"},
            trust_env=False,
            timeout=10.0,
        )


def fast_settings(provider: ProviderServer, api_url: str, **overrides: Any) -> GenerationSettings:
    """Short polls and deadlines so recovery paths show within seconds."""
    values: dict[str, Any] = {
        "local_provider_url": provider.base_url,
        "local_webhook_secrets": SECRET,
        "callback_base_url": api_url,
        "submit_timeout_s": 2.0,
        "poll_first_s": 0.5,
        "poll_max_s": 2.0,
        "unknown_recheck_s": 1.0,
        "dispatching_deadline_s": 3.0,
        "running_silence_s": 3.0,
        "fetch_deadline_s": 5.0,
        "cancel_deadline_s": 3.0,
        # One cheap variant and no review: most tests are about the provider side and make
        # many tasks; tests of the media stage ask for the whole of it (MEDIA_STAGE).
        "media_profiles": "poster",
        "output_review": False,
    }
    return GenerationSettings(**(values | overrides))


#: The media stage as a deployment runs it: every variant and the output review.
MEDIA_STAGE: dict[str, Any] = {
    "media_profiles": "proxy,hls,poster,thumbnails,waveform",
    "output_review": True,
}


@contextlib.asynccontextmanager
async def generation_stack(
    db_url: str,
    broker: Broker,
    provider: ProviderServer,
    tmp_path: Path,
    **settings: Any,
) -> AsyncIterator[Stack]:
    config = HubConfig(
        engine=store_engine.create_engine(db_url),
        broker=broker,
        blobs=LocalBlobStore(tmp_path / "blobs", secret=b"test-blob-secret"),
        scanner_lease_ttl_ms=2_000,
    )
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    fast = fast_settings(provider, api_url, **settings)
    pipeline = generation.with_state(lambda hub, _settings: build(hub, fast))
    hub = Hub(config, [notifications.pipeline, pipeline])
    await hub.start()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(hub, limits=Limits(rate_per_s=5_000, burst=5_000)),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=API_KEEP_ALIVE_S,
        )
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve())
    running = asyncio.create_task(hub.run(stop, scan=True))
    try:
        for _ in range(500):  # uvicorn has no started event to await; bounded to 10 s
            if server.started:
                break
            if serving.done():
                serving.result()  # raises why it could not start
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.02)
        else:
            raise TimeoutError(f"the API did not start on {api_url} within 10 s")
        yield Stack(hub, api_url, provider)
    finally:
        stop.set()
        server.should_exit = True
        await asyncio.wait_for(asyncio.gather(serving, running, return_exceptions=True), 30)
        await hub.close()
