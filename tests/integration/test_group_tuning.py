"""A consumer group whose concurrency a pipeline reads from its own settings keeps it on a
hub with a hub-wide default (``AIGC_HUB_CONCURRENCY``, always set under ``aigc-hub up``);
groups that declare a plain figure take the hub's default."""

from __future__ import annotations

from aigc_hub.bootstrap import Hub
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.pipelines.generation.state import build
from aigc_hub.store import engine as store_engine
from aigc_hub.testing import FakeProvider


async def test_a_group_sized_by_its_pipelines_settings_is_not_resized_by_the_hub_default(
    sqlite_url: str,
) -> None:
    settings = GenerationSettings(providers="local", render_concurrency=3)
    pipeline = generation.with_state(
        lambda hub, _s: build(hub, settings, adapters=[FakeProvider()])
    )
    config = HubConfig(
        engine=store_engine.create_engine(sqlite_url), broker=MemoryBroker(), concurrency=7
    )
    hub = Hub(config, [pipeline])
    await hub.start()
    try:
        specs = {spec.group: spec for spec in hub.handler_specs}
        assert hub.runtime(specs["generation-render"]).concurrency == 3
        assert hub.runtime(specs["generation-reconciler"]).concurrency == 7
    finally:
        await hub.close()
