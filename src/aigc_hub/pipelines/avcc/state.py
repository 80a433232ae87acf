"""avcc's per-hub state: settings, the blob store, moderation, the chain and its notary, the
near-duplicate index and the C2PA signer. Built once at hub start by :func:`build_state`;
handlers receive it, routes take it from :data:`STATE`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aigc_hub.blobs.base import BlobStore
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.moderation import Moderation, make_moderation
from aigc_hub.pipeline import StateKey

from .adapters.base import Chain
from .analytics import AnalyticsStore, open_analytics
from .analytics.opening import CLICKHOUSE_SCHEMES
from .credentials import platform_signer
from .nodes import NodeKeys
from .notary import Notary
from .playback import CodeChecks
from .provenance import PlatformSigner
from .settings import AvccSettings

if TYPE_CHECKING:
    from aigc_hub.bootstrap import Hub
    from aigc_hub.settings import Settings

NAME = "avcc"


@dataclass(frozen=True)
class Resemblance:
    """The coded work most like a new one: its record, the similarity in [0, 1] (1: the
    same) and whether that is past the duplicate line of its kind."""

    record_id: int
    similarity: float
    near_duplicate: bool


class Likeness(Protocol):
    """Fingerprints works and finds the coded work most like one (``likeness.py``)."""

    async def fingerprint(
        self, path: Path, content_type: str, scratch: Path
    ) -> tuple[str, bytes] | None:
        """``(kind, serialized fingerprint)`` of the file, or None for a kind without one."""
        ...

    async def nearest(
        self, fingerprint: tuple[str, bytes], *, tenant_id: str | None
    ) -> Resemblance | None:
        """The most similar coded work (of ``tenant_id`` only, when given), or None."""
        ...


@dataclass
class Avcc:
    """Everything avcc's handlers, routes and scanners share within one hub."""

    hub: Hub
    settings: AvccSettings
    chain: Chain
    likeness: Likeness
    #: Where avcc keeps its keys on embedded defaults (the hub's data dir).
    data_dir: Path = Path("var")
    moderation: Moderation = field(default_factory=make_moderation)
    notary: Notary = field(init=False)
    #: gateway-svc's memory: codes whose check character was judged, nodes' keys, and the
    #: tenant of each issued code a purchase named (see ``gateway.py``).
    code_checks: CodeChecks = field(default_factory=CodeChecks)
    node_keys: NodeKeys = field(init=False)
    code_owners: dict[str, str] = field(default_factory=dict)
    _signer: PlatformSigner | None = field(default=None, init=False, repr=False)
    _analytics: AnalyticsStore | None = field(default=None, init=False, repr=False)
    _analytics_opening: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.notary = Notary(
            self.chain, self.settings.batch_window_ms / 1000, self.settings.batch_max
        )
        self.node_keys = NodeKeys(self.hub.engine)

    @property
    def store(self) -> BlobStore:
        """The hub's blob store (the works, the reports, the signed copies)."""
        if self.hub.blobs is None:
            raise ConfigurationError("avcc keeps works and reports in the hub's blob store")
        return self.hub.blobs

    async def c2pa_signer(self) -> PlatformSigner:
        """The platform's C2PA signer: the configured certificate, or on embedded defaults a
        CA of the hub's own in its data dir (``credentials.py``), made once."""
        if self._signer is None:
            settings = self.settings
            if settings.c2pa_cert_path and settings.c2pa_key_path:
                self._signer = PlatformSigner.from_files(
                    Path(settings.c2pa_cert_path), Path(settings.c2pa_key_path)
                )
            else:
                self._signer = await asyncio.to_thread(
                    platform_signer, self.data_dir / "avcc" / "c2pa"
                )
        return self._signer

    async def analytics(self) -> AnalyticsStore:
        """The playback analytics store (``AIGC_HUB_AVCC_ANALYTICS_URL``), opened on first
        use, once per process (a DuckDB file has one writer process); closed with the state."""
        async with self._analytics_opening:
            if self._analytics is None:
                self._analytics = await open_analytics(
                    self.settings.analytics_url, self.data_dir, clock=self.hub.clock
                )
        return self._analytics

    async def analytics_for_reading(self) -> AnalyticsStore | None:
        """The analytics store for a reader beside the sink (the console, the admin API), or
        None while reading would take it from the sink: a DuckDB file admits one process, so
        a process that has not opened it (the sink runs elsewhere, or has stored nothing yet)
        leaves it alone. ClickHouse serves every process."""
        if self._analytics is not None:
            return self._analytics
        scheme = self.settings.analytics_url.partition("://")[0]
        if scheme in CLICKHOUSE_SCHEMES:
            return await self.analytics()
        return None

    @property
    def failpoints(self) -> Failpoints:
        """The hub's failpoints (crash tests arm ``avcc.chain.after_submit``)."""
        return self.hub.failpoints

    async def close(self) -> None:
        """Stop the notary, release the chain's connections, close the analytics store."""
        await self.notary.close()
        await self.chain.close()
        if self._analytics is not None:
            await self._analytics.close()


#: The typed handle on a hub's Avcc (``kit.state_of(request, STATE)``).
STATE: StateKey[Avcc] = StateKey(NAME)


def build_state(hub: Hub, settings: Settings) -> Avcc:
    """The state factory: an Avcc from ``AIGC_HUB_AVCC_*`` and the hub's data dir."""
    # Imported here: the chain and similarity modules pull in their libraries only for a hub
    # that runs avcc.
    from .chains import make_chain
    from .likeness import StoredLikeness

    avcc_settings = AvccSettings()
    chain = make_chain(hub, avcc_settings, settings.data_dir)
    return Avcc(hub, avcc_settings, chain, StoredLikeness(hub.engine), settings.data_dir)
