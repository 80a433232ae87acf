"""The generation pipeline's per-hub state: settings, providers, slots, the scheduler's wake.

The hub builds it once at start with :func:`build_state` (settings from the environment),
or with the factory a test or an embedding program gave ``hub.use_state`` (fake providers,
settings decided at run time: see :func:`build`). It is closed with the hub. Handlers and
scanners receive it as an argument; routes take it from :data:`STATE` (``kit.state_of``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr

from aigc_hub.media.probe import VideoInfo, probe_video
from aigc_hub.media.sandbox import MediaLimits
from aigc_hub.moderation import (
    LocalModeration,
    Moderation,
    ModerationUnavailable,
    make_moderation,
)
from aigc_hub.pipeline import StateKey
from aigc_hub.pipelines.generation.adapters.base import ProviderAdapter
from aigc_hub.pipelines.generation.providers import Providers
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.reliability import webhooks
from aigc_hub.reliability.slots import Slots

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub
    from aigc_hub.settings import Settings

log = logging.getLogger(__name__)

NAME = "generation"

#: Reads a fetched output file: its VideoInfo, or InvalidMedia when it is no readable video.
VideoProbe = Callable[[Path], Awaitable[VideoInfo]]


@dataclass
class SchedulerStats:
    """What this process's scheduling passes did (tests and benchmarks read it)."""

    passes: int = 0
    rows_read: int = 0


@dataclass
class Generation:
    """Everything the pipeline's handlers, routes and scanners share within one hub."""

    #: The hub this state was built for (its engine, outbox, clock, blobs…).
    hub: Hub
    settings: GenerationSettings
    providers: Providers
    slots: Slots
    #: How fetched outputs are checked (PyAV, else ffprobe; tests without FFmpeg pass a fake).
    probe: VideoProbe = probe_video
    #: Serializes scheduling passes within a process (across processes guarded updates do).
    schedule_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    rerun: bool = False
    scheduler: SchedulerStats = field(default_factory=SchedulerStats)
    #: Reviews prompts (creating path) and outputs (media worker): the backbone's moderation.
    moderation: Moderation = field(default_factory=make_moderation)
    _warming: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    #: Webhook verifiers by provider, built once (None: that provider's webhooks are refused).
    _verifiers: dict[str, webhooks.WebhookVerifier | None] = field(
        default_factory=dict, init=False, repr=False
    )

    def webhook_verifier(self, provider: str) -> webhooks.WebhookVerifier | None:
        """The verifier of ``provider``'s webhooks (its secrets decoded once), or None when
        none are configured. Raises WebhookSecretError for a malformed secret."""
        if provider not in self._verifiers:
            secrets = self.settings.webhook_secrets(provider)
            self._verifiers[provider] = webhooks.StandardWebhooks(secrets) if secrets else None
        return self._verifiers[provider]

    def media_limits(self) -> MediaLimits:
        """The limits every media job of this pipeline runs under."""
        return MediaLimits(
            max_bytes=self.settings.max_output_bytes, timeout_s=self.settings.media_timeout_s
        )

    def scratch_root(self) -> Path | None:
        """Where media jobs make their scratch folders (None: the system's temp dir)."""
        return Path(self.settings.media_scratch_dir) if self.settings.media_scratch_dir else None

    def warm_up_moderation(self) -> None:
        """Load the moderation's model in the background now, so the first create does not
        wait for it (a failure is only logged: the first review tries again)."""
        if not isinstance(self.moderation, LocalModeration) or self._warming is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # built outside a hub's loop (a tool): the first review loads it
            return
        self._warming = loop.create_task(_warm(self.moderation), name="moderation-warm-up")

    async def close(self) -> None:
        """Close the provider clients and the moderation's worker."""
        await self.providers.close()
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warming
        if isinstance(self.moderation, LocalModeration):
            self.moderation.close()


#: The typed handle on a hub's Generation (``hub.state_of(STATE)``; routes import it, as
#: they cannot import the pipeline that mounts them).
STATE: StateKey[Generation] = StateKey(NAME)


def default_adapters(settings: GenerationSettings) -> list[ProviderAdapter]:
    """The adapters named by ``settings.providers``."""
    builders: dict[str, Callable[[GenerationSettings], ProviderAdapter]] = {
        "local": _local,
        "replicate": _replicate,
        "fal": _fal,
        "runway": _runway,
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


def _api_key(settings: GenerationSettings, provider: str) -> str:
    """The provider's API key; a provider enabled without one is a configuration error."""
    secret: SecretStr = getattr(settings, f"{provider}_api_key")
    if not secret.get_secret_value():
        raise ValueError(
            f"provider {provider!r} is enabled but AIGC_HUB_GEN_{provider.upper()}_API_KEY "
            "is empty; set it or remove the provider from AIGC_HUB_GEN_PROVIDERS"
        )
    return secret.get_secret_value()


def _hosts(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def _replicate(settings: GenerationSettings) -> ProviderAdapter:
    from aigc_hub.pipelines.generation.adapters.replicate import ReplicateAdapter

    return ReplicateAdapter(
        settings.replicate_base_url,
        _api_key(settings, "replicate"),
        submit_timeout_s=settings.submit_timeout_s,
        query_timeout_s=settings.query_timeout_s,
        output_hosts=_hosts(settings.replicate_output_hosts),
        reconcile_window_s=settings.replicate_reconcile_window_s,
    )


def _fal(settings: GenerationSettings) -> ProviderAdapter:
    from aigc_hub.pipelines.generation.adapters.fal import FalAdapter

    return FalAdapter(
        settings.fal_base_url,
        _api_key(settings, "fal"),
        submit_timeout_s=settings.submit_timeout_s,
        query_timeout_s=settings.query_timeout_s,
        output_hosts=_hosts(settings.fal_output_hosts),
    )


def _runway(settings: GenerationSettings) -> ProviderAdapter:
    from aigc_hub.pipelines.generation.adapters.runway import RunwayAdapter

    return RunwayAdapter(
        settings.runway_base_url,
        _api_key(settings, "runway"),
        submit_timeout_s=settings.submit_timeout_s,
        query_timeout_s=settings.query_timeout_s,
        output_hosts=_hosts(settings.runway_output_hosts),
        api_version=settings.runway_api_version,
    )


def build(
    hub: Hub,
    settings: GenerationSettings | None = None,
    adapters: Sequence[ProviderAdapter] | None = None,
    probe: VideoProbe = probe_video,
    moderation: Moderation | None = None,
) -> Generation:
    """A Generation for ``hub``: ``settings`` (default: the environment), the adapters they
    name unless ``adapters`` are given, ``probe`` to check fetched outputs, and
    ``moderation`` (default: the local one, :func:`~aigc_hub.moderation.make_moderation`)."""
    settings = settings or GenerationSettings()
    return Generation(
        hub=hub,
        settings=settings,
        providers=Providers(adapters if adapters is not None else default_adapters(settings)),
        slots=Slots(
            hub.cache.leases,
            {
                "platform": settings.slots_platform,
                "tenant": settings.slots_tenant,
                "provider": settings.slots_provider,
                "model": settings.slots_model,
            },
            ttl_ms=int(settings.slot_ttl_s * 1000),
        ),
        probe=probe,
        moderation=moderation or make_moderation(),
    )


def build_state(hub: Hub, settings: Settings) -> Generation:
    """The pipeline's state factory: a Generation from ``AIGC_HUB_GEN_*`` (the hub's own
    settings hold nothing of generation's)."""
    return build(hub)


async def _warm(moderation: LocalModeration) -> None:
    try:
        await moderation.warm_up()
    except ModerationUnavailable as exc:
        log.warning("moderation model not loaded at start (%s); the first review tries again", exc)
