"""The vistack pipeline's per-hub state: settings, the blob store, the transcoder's client
and this process's lease owner name. Built once at hub start by :func:`build_state`;
handlers and scanners receive it, routes take it from :data:`STATE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aigc_hub.blobs.base import BlobStore
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.moderation import LocalModeration, Moderation, make_moderation
from aigc_hub.moderation.settings import ModerationSettings
from aigc_hub.pipeline import StateKey
from aigc_hub.reliability.scanners import default_owner

from .settings import VistackSettings

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub
    from aigc_hub.settings import Settings

    from .adapters.transcoder import TranscoderClient

NAME = "vistack"


@dataclass
class Vistack:
    """Everything the vistack pipeline's handlers, routes and scanners share in one hub."""

    hub: Hub
    settings: VistackSettings
    #: Who holds this process's transcode leases (host, pid, a random suffix).
    owner: str = field(default_factory=default_owner)
    #: Comments: the shared moderation as configured (``AIGC_HUB_MODERATION_*``).
    moderation: Moderation = field(default_factory=make_moderation)
    #: Danmaku: the same rules without the semantic model (thousands a second).
    danmaku_moderation: Moderation = field(
        default_factory=lambda: make_moderation(ModerationSettings(semantic=False))
    )
    _transcoder: TranscoderClient | None = field(default=None, init=False, repr=False)

    @property
    def store(self) -> BlobStore:
        """The hub's blob store: sources, DASH segments, covers."""
        if self.hub.blobs is None:
            raise ConfigurationError("the vistack pipeline keeps videos in the blob store")
        return self.hub.blobs

    @property
    def transcoder(self) -> TranscoderClient:
        """The client of the transcoder's gRPC service, made on first use."""
        if self._transcoder is None:
            from .adapters.transcoder import TranscoderClient

            self._transcoder = TranscoderClient(self.settings.transcoder_address)
        return self._transcoder

    async def close(self) -> None:
        """Close the transcoder's channel and the moderation model's thread."""
        for moderation in (self.moderation, self.danmaku_moderation):
            if isinstance(moderation, LocalModeration):
                moderation.close()
        if self._transcoder is not None:
            await self._transcoder.close()
            self._transcoder = None


#: The typed handle on a hub's Vistack (``kit.state_of(request, STATE)``).
STATE: StateKey[Vistack] = StateKey(NAME)


def build_state(hub: Hub, settings: Settings) -> Vistack:
    """The state factory: Vistack from ``AIGC_HUB_VISTACK_*``, checked against the hub."""
    vistack_settings = VistackSettings()
    check_brokers(vistack_settings, settings)
    return Vistack(hub, vistack_settings)


def check_brokers(vistack: VistackSettings, hub: Settings) -> None:
    """The seed's ``[kafka].brokers`` names the hub's one backbone, or is left empty."""
    wanted = vistack.kafka_brokers.strip()
    if not wanted:
        return
    if hub.broker != "kafka":
        raise ConfigurationError(
            f"AIGC_HUB_VISTACK_KAFKA_BROKERS={wanted} but the hub runs the {hub.broker} broker: "
            f"set AIGC_HUB_BROKER=kafka and AIGC_HUB_KAFKA_BOOTSTRAP={wanted}, or unset it"
        )
    if _servers(wanted) != _servers(hub.kafka_bootstrap):
        raise ConfigurationError(
            f"AIGC_HUB_VISTACK_KAFKA_BROKERS={wanted} differs from the hub's "
            f"AIGC_HUB_KAFKA_BOOTSTRAP={hub.kafka_bootstrap}: vistack runs on the hub's one "
            "Kafka; set them alike or unset AIGC_HUB_VISTACK_KAFKA_BROKERS"
        )


def _servers(value: str) -> set[str]:
    return {part.strip() for part in value.split(",") if part.strip()}
