"""What a :class:`~aigc_hub.bootstrap.Hub` is built from: its engines, policies and limits.

One frozen value instead of a long keyword list: tests and embedders name only what they
change (``HubConfig(engine=..., broker=..., clock=ManualClock())``), and
:meth:`HubConfig.from_settings` is the one place that reads :class:`Settings` for the hub.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.blobs.base import BlobStore
from aigc_hub.cache.base import Cache
from aigc_hub.core.clock import Clock
from aigc_hub.core.failpoints import Failpoints
from aigc_hub.core.retry import DELAYED, IN_PROCESS, RetryPolicy
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.catalog import TopicCatalog
from aigc_hub.reliability.lag import Threshold, parse_thresholds
from aigc_hub.reliability.notification_feed import FeedSettings
from aigc_hub.reliability.scanners import LeaderLeases
from aigc_hub.runtime.middleware import Middleware
from aigc_hub.settings import Settings


@dataclass(frozen=True)
class HubConfig:
    """Engines (required), then policies and limits with the defaults a test hub wants.

    ``None`` for an optional part means "the hub picks": a system clock, the seeded topic
    catalog, the in-process cache, leader leases on the cache or the database.
    """

    engine: AsyncEngine
    broker: Broker
    cache: Cache | None = None
    blobs: BlobStore | None = None
    clock: Clock | None = None
    catalog: TopicCatalog | None = None
    leases: LeaderLeases | None = None
    #: The settings pipelines build their state from; ``None`` reads the environment at start.
    settings: Settings | None = None
    #: Each hub its own registry: a test arming one hub's failpoints never reaches another.
    failpoints: Failpoints = field(default_factory=Failpoints)
    in_process: RetryPolicy = IN_PROCESS
    delayed: RetryPolicy = DELAYED
    middleware: Sequence[Middleware] = ()
    #: Records in flight per consumer group; ``None`` keeps each group's own figure.
    concurrency: int | None = None
    commit_batch: int = 256
    commit_wait: float = 0.002
    relay_batch: int = 500
    relay_workers: int = 2
    lag_thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    lag_interval_s: float = 10.0
    alert_webhook: str | None = None
    scanner_lease_ttl_ms: int = 15_000
    feed: FeedSettings | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        engine: AsyncEngine,
        broker: Broker,
        cache: Cache | None = None,
        blobs: BlobStore | None = None,
    ) -> HubConfig:
        """The config ``settings`` describe around engines already created from them."""
        return cls(
            engine=engine,
            broker=broker,
            cache=cache,
            blobs=blobs,
            settings=settings,
            concurrency=settings.concurrency,
            commit_batch=settings.commit_batch,
            commit_wait=settings.commit_wait_ms / 1000,
            relay_batch=settings.relay_batch,
            lag_thresholds=parse_thresholds(settings.lag_thresholds),
            lag_interval_s=settings.lag_interval_s,
            alert_webhook=settings.alert_webhook,
            scanner_lease_ttl_ms=settings.scanner_lease_ttl_ms,
            feed=settings.feed_settings(),
            failpoints=Failpoints.from_spec(settings.failpoints or ""),
        )
