"""The generation pipeline's per-hub state: settings, providers, slots, the scheduler's wake.

Built on first use from :class:`GenerationSettings` (environment), or installed by a test or
an embedding program with :func:`install`. Stored in ``hub.extensions`` and closed with the hub.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aigc_hub.pipelines.generation.adapters.base import ProviderAdapter
from aigc_hub.pipelines.generation.config import GenerationSettings
from aigc_hub.pipelines.generation.providers import Providers
from aigc_hub.pipelines.generation.slots import Slots

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub

NAME = "generation"


@dataclass
class Generation:
    """Everything the pipeline's handlers, routes and scanners share within one hub."""

    settings: GenerationSettings
    providers: Providers
    slots: Slots
    #: Serializes scheduling passes within a process (across processes guarded updates do).
    schedule_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    rerun: bool = False

    async def close(self) -> None:
        await self.providers.close()


def default_adapters(settings: GenerationSettings) -> list[ProviderAdapter]:
    """The adapters named by ``settings.providers``."""
    builders: dict[str, Callable[[GenerationSettings], ProviderAdapter]] = {
        "local": _local,
    }
    unknown = [n for n in settings.provider_names() if n not in builders]
    if unknown:
        raise ValueError(f"unknown providers {unknown}; known: {sorted(builders)}")
    return [builders[n](settings) for n in settings.provider_names()]


def _local(settings: GenerationSettings) -> ProviderAdapter:
    from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter

    return LocalProviderAdapter(
        settings.local_provider_url,
        submit_timeout_s=settings.submit_timeout_s,
        query_timeout_s=settings.query_timeout_s,
    )


def build(
    hub: Hub,
    settings: GenerationSettings | None = None,
    adapters: Sequence[ProviderAdapter] | None = None,
) -> Generation:
    """A Generation for ``hub`` (not installed)."""
    settings = settings or GenerationSettings()
    return Generation(
        settings=settings,
        providers=Providers(adapters if adapters is not None else default_adapters(settings)),
        slots=Slots(
            hub.cache.leases,
            platform=settings.slots_platform,
            tenant=settings.slots_tenant,
            provider=settings.slots_provider,
            model=settings.slots_model,
            ttl_ms=int(settings.slot_ttl_s * 1000),
        ),
    )


def install(hub: Hub, generation: Generation) -> Generation:
    hub.extensions[NAME] = generation
    return generation


def generation_of(hub: Hub) -> Generation:
    """The hub's Generation, built from the environment on first use."""
    found = hub.extensions.get(NAME)
    if found is None:
        found = install(hub, build(hub))
    assert isinstance(found, Generation)
    return found
