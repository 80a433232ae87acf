"""The composition root: Settings in, a running hub out. Tests call the same code with memory parts.

Nothing here opens a connection at import time; :meth:`Hub.start` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TypeVar, cast

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub import plugins
from aigc_hub.blobs.base import BlobStore
from aigc_hub.cache.base import Cache
from aigc_hub.cache.leadership import CacheLeaderLeases
from aigc_hub.cache.memory import MemoryCache
from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.catalog import backbone_catalog
from aigc_hub.pipeline import (
    Closable,
    HandlerSpec,
    Pipeline,
    PipelineBase,
    Started,
    StateFactory,
    StateKey,
    StreamSpec,
)
from aigc_hub.reliability import notifications
from aigc_hub.reliability.admission import AdmissionGate
from aigc_hub.reliability.dlq import DeadLetterStore
from aigc_hub.reliability.idempotency_scanner import IdempotencyExpiryScanner
from aigc_hub.reliability.lag import DEFAULT_THRESHOLDS, LagMonitor
from aigc_hub.reliability.leases import DatabaseLeases
from aigc_hub.reliability.notification_feed import NotificationFeed
from aigc_hub.reliability.outbox import EventRoutes, OutboxWriter
from aigc_hub.reliability.outbox_scanner import OutboxAgeScanner
from aigc_hub.reliability.redelivery import RedeliveryStore
from aigc_hub.reliability.relay import Relay
from aigc_hub.reliability.scanners import LeaderLeases, Scanner, ScannerRunner, default_owner
from aigc_hub.runtime.committer import Committer
from aigc_hub.runtime.consumer import ConsumerGroupRuntime, RuntimeDeps
from aigc_hub.runtime.decoding import RecordDecoder
from aigc_hub.runtime.stream import STOP_GRACE_S, StreamRuntime
from aigc_hub.schemas.registry import SchemaRegistry
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.grouped import GroupedCalls, Work

log = logging.getLogger(__name__)

S = TypeVar("S")


#: How long a stopping hub waits for its parts before giving up on them (they are logged).
SHUTDOWN_GRACE_S = 30.0


class Hub:
    """Store, broker, outbox, relay, DLQ and one runtime per consumer group, wired together."""

    def __init__(self, config: HubConfig, pipelines: Sequence[PipelineBase] = ()) -> None:
        # Pipelines differ in their state's type, so the hub sees them as PipelineBase: it
        # builds, keeps and closes states, and hands one out typed through a StateKey.
        self.config = config
        engine, broker = config.engine, config.broker
        self.engine = engine
        self.broker = broker
        # The backbone's notification schema is always known; no business pipeline needed.
        self.pipelines: list[PipelineBase] = [
            notifications.pipeline,
            *(p for p in pipelines if p is not notifications.pipeline),
        ]
        #: Each pipeline as started in this hub (its state built), by name; filled by start.
        self.started: dict[str, Started] = {}
        self.clock = config.clock or SystemClock()
        self.catalog = config.catalog or backbone_catalog()
        self.failpoints = config.failpoints
        self.registry = SchemaRegistry.from_pipelines(self.pipelines)
        self.routes = EventRoutes()
        for pipeline in self.pipelines:
            for spec in pipeline.topics:
                self.catalog.add(spec)
            for event in pipeline.events:
                if event.topic:
                    self.routes.add(event.name, event.topic)
        self.outbox = OutboxWriter(self.routes, self.clock)
        self.relay = Relay(
            engine, broker, self.clock, batch_size=config.relay_batch, failpoints=self.failpoints
        )
        self.committer = Committer(
            engine,
            self.outbox,
            self.clock,
            max_batch=config.commit_batch,
            max_wait=config.commit_wait,
            on_emitted=self.relay.wake,
        )
        # SQLite has one writer: one group at a time; PostgreSQL runs a few side by side.
        self.grouped = GroupedCalls(
            engine,
            max_groups=1 if store_engine.is_sqlite(engine) else 4,
            after_commit=self.relay.wake,
        )
        self.dlq = DeadLetterStore(engine, self.outbox, self.clock)
        self.redeliveries = RedeliveryStore(engine)
        self.deps = RuntimeDeps(
            engine=engine,
            broker=broker,
            registry=self.registry,
            committer=self.committer,
            dlq=self.dlq,
            redeliveries=self.redeliveries,
            clock=self.clock,
            in_process=config.in_process,
            delayed=config.delayed,
            failpoints=self.failpoints,
            decoder=_record_decoder(engine, self.clock, self.pipelines),
        )
        self.concurrency = config.concurrency
        self.middleware = tuple(config.middleware)
        self.cache: Cache = config.cache or MemoryCache(self.clock)
        self.blobs = config.blobs
        # Leader leases: Redis when the hub has it (several hosts), else the database, which
        # every process of this hub shares (the in-process cache would not be shared).
        self.leases: LeaderLeases = config.leases or (
            CacheLeaderLeases(self.cache.leases)
            if self.cache.features.cross_process
            else DatabaseLeases(engine, self.clock)
        )
        self.scanner_lease_ttl_ms = config.scanner_lease_ttl_ms
        self.relay_workers = max(1, config.relay_workers)
        self._check_stream_groups()
        self.lag = LagMonitor(
            broker,
            self.clock,
            self._watched_groups(),
            self.catalog,
            thresholds={**DEFAULT_THRESHOLDS, **config.lag_thresholds},
            webhook_url=config.alert_webhook,
            interval_s=config.lag_interval_s,
        )
        self.gate = AdmissionGate(self.lag)
        #: This process's live notification feed (SSE); started by its first reader.
        self.notification_feed = NotificationFeed(broker, config.feed)

    @classmethod
    def from_settings(cls, settings: Settings, pipelines: Sequence[PipelineBase] = ()) -> Hub:
        """Build the hub the settings describe (engines are created, not yet connected)."""
        config = HubConfig.from_settings(
            settings,
            engine=store_engine.create_engine(settings.resolved_database_url()),
            broker=make_broker(settings),
            cache=make_cache(settings),
            blobs=make_blobs(settings),
        )
        return cls(config, [*pipelines, *plugins.load(settings.pipelines)])

    def use_state(self, pipeline: Pipeline[S], factory: StateFactory[S]) -> None:
        """Build ``pipeline``'s state with ``factory`` instead of its own (call before start).

        For tests (fake providers) and embedders (settings decided at run time).
        """
        if pipeline.name in self.started:
            raise RuntimeError(f"pipeline {pipeline.name!r} already has its state in this hub")
        found = [i for i, p in enumerate(self.pipelines) if p.name == pipeline.name]
        if not found:
            raise KeyError(f"pipeline {pipeline.name!r} is not in this hub")
        self.pipelines[found[0]] = pipeline.with_state(factory)

    def state_of(self, key: StateKey[S]) -> S:
        """The state of the pipeline ``key`` names (``pipeline.key``), built at start."""
        started = self.started.get(key.name)
        if started is None:
            raise RuntimeError(
                f"pipeline {key.name!r} has no state in this hub: is it loaded, "
                "and was Hub.start called?"
            )
        # Sound: only Pipeline[S].start wrote this state, and a key is named after its
        # pipeline; the dict holds states of several types, so their type is restored here.
        return cast(S, started.state)

    def running_state(self, key: StateKey[S]) -> S | None:
        """The state of the pipeline ``key`` names, or None when this hub does not run it
        (pages and tools that serve whichever pipelines are loaded)."""
        return self.state_of(key) if key.name in self.started else None

    def relays(self) -> list[Relay]:
        """The relay, plus extra ones where the store lets several claim at once (PostgreSQL's
        SKIP LOCKED): one publishes while another claims, so a broker round trip (``acks=all``)
        does not leave the outbox idle."""
        if not dialect_of(self.engine).skip_locked:
            return [self.relay]
        extra = [
            Relay(
                self.engine,
                self.broker,
                self.clock,
                batch_size=self.relay.batch_size,
                failpoints=self.failpoints,
            )
            for _ in range(self.relay_workers - 1)
        ]
        return [self.relay, *extra]

    def _watched_groups(self) -> dict[str, list[str]]:
        """Every consumer group, handler and stream groups alike, with the topics it reads:
        what the lag monitor samples."""
        declared = [(s.group, s.topics) for s in self.handler_specs]
        declared += [(s.group, s.topics) for s in self.stream_specs]
        groups: dict[str, list[str]] = {}
        for group, topics in declared:
            groups.setdefault(group, []).extend(t for t in topics if t not in groups.get(group, []))
        return groups

    def _check_stream_groups(self) -> None:
        """Refuse a stream group declared twice or named like a handler group: both would
        join one broker group and take each other's partitions."""
        handler_groups = {s.group for s in self.handler_specs}
        seen: set[str] = set()
        for spec in self.stream_specs:
            if spec.group in handler_groups or spec.group in seen:
                raise ConfigurationError(
                    f"stream group {spec.group!r} (pipeline {spec.pipeline!r}) is declared "
                    "more than once: a consumer group is either one stream group or handlers"
                )
            seen.add(spec.group)

    def scanners(self) -> list[Scanner]:
        """The backbone's scanners plus every pipeline's."""
        own_relay = Relay(self.engine, self.broker, self.clock, name=f"scanner-{default_owner()}")
        found: list[Scanner] = [
            OutboxAgeScanner(self.engine, own_relay, self.clock),
            IdempotencyExpiryScanner(self.engine, self.clock),
        ]
        found += [factory(self) for p in self.pipelines for factory in self._started(p).scanners]
        return found

    def scanner_runner(self, owner: str | None = None) -> ScannerRunner:
        """A runner for :meth:`scanners` under leader leases (not started)."""
        return ScannerRunner(
            self.engine,
            self.leases,
            self.clock,
            self.scanners(),
            owner=owner,
            lease_ttl_ms=self.scanner_lease_ttl_ms,
        )

    @property
    def handler_specs(self) -> list[HandlerSpec]:
        """Every consumer group of every included pipeline."""
        return [spec for p in self.pipelines for spec in self._started(p).handlers]

    @property
    def stream_specs(self) -> list[StreamSpec]:
        """Every stream group (the telemetry road) of every included pipeline."""
        return [spec for p in self.pipelines for spec in self._started(p).streams]

    def _started(self, pipeline: PipelineBase) -> Started:
        """The pipeline as started here; before start, as declared (state handlers unbound)."""
        return self.started.get(pipeline.name) or Started(
            None, list(pipeline.handlers), list(pipeline.scanners), list(pipeline.streams)
        )

    def runtime(self, spec: HandlerSpec, **options: object) -> ConsumerGroupRuntime:
        """A runtime for one consumer group (not started)."""
        # the hub-wide default, not over what a pipeline's own settings chose for the group
        if self.concurrency and "concurrency" not in options and not spec.tuned:
            options["concurrency"] = self.concurrency
        if self.middleware and "extra_middleware" not in options:
            options["extra_middleware"] = self.middleware
        return ConsumerGroupRuntime(spec, self.deps, **options)  # type: ignore[arg-type]

    def stream_runtime(self, spec: StreamSpec, *, grace_s: float = STOP_GRACE_S) -> StreamRuntime:
        """A runtime for one stream group (not started); it backs off on the hub's clock."""
        return StreamRuntime(
            spec, self.broker, clock=self.clock, failpoints=self.failpoints, grace_s=grace_s
        )

    async def start(self) -> None:
        """Create the broker's topics (catalog + pipelines), then build each pipeline's
        state once (a second call changes nothing)."""
        await self.broker.ensure_topics(list(self.catalog))
        settings = self.config.settings or Settings()
        for pipeline in self.pipelines:
            if pipeline.name not in self.started:
                started = self.started[pipeline.name] = pipeline.start(self, settings)
                for check in started.admission:
                    self.gate.add_check(pipeline.name, check)
        # A group the settings leave out (an optional model's) has no lag to watch.
        self.lag.groups = self._watched_groups()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction for a service call; the relay is woken after it commits."""
        async with self.engine.begin() as conn:
            yield conn
        self.relay.wake()

    async def service_call(self, work: Work[S]) -> S:
        """Run a service call's database work grouped with concurrent ones (one commit for
        all; see :mod:`aigc_hub.store.grouped`) and return its result once it committed.

        For calls whose work touches only the database and may run twice; the relay is woken
        after the commit. A call that must do more inside its transaction uses
        :meth:`transaction`.
        """
        return await self.grouped.run(work)

    async def run(
        self,
        stop: asyncio.Event,
        groups: Sequence[str] | None = None,
        *,
        relay: bool = True,
        scan: bool = False,
        lag: bool = False,
    ) -> None:
        """Run the relay, the consumer groups (all, or those named; handler and stream
        groups alike), and optionally the scanners and the lag monitor, until ``stop`` is set."""
        specs = [s for s in self.handler_specs if groups is None or s.group in groups]
        streams = [s for s in self.stream_specs if groups is None or s.group in groups]
        running = {s.group for s in specs} | {s.group for s in streams}
        missing = sorted(set(groups or ()) - running)
        if missing:
            raise ConfigurationError(
                f"consumer group(s) {', '.join(missing)} not enabled by this hub's settings "
                "(a group of an optional model runs only when that model is configured)"
            )
        tasks = (
            [asyncio.create_task(r.run(stop), name="relay") for r in self.relays()] if relay else []
        )
        if scan:
            tasks.append(asyncio.create_task(self.scanner_runner().run(stop), name="scanners"))
        if lag:
            tasks.append(asyncio.create_task(self._observe(stop), name="lag-monitor"))
        tasks += [asyncio.create_task(self.runtime(s).run(stop), name=s.group) for s in specs]
        tasks += [
            asyncio.create_task(self.stream_runtime(s).run(stop), name=s.group) for s in streams
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            # One part failed (or we were cancelled): every loop also sees ``stop``, so a part
            # whose cancellation is swallowed (Python 3.11's wait_for can lose one that
            # arrives as its inner wait completes) still ends instead of hanging the others.
            stop.set()
            for task in tasks:
                task.cancel()
            _done, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in stuck:
                log.error(
                    "hub part %s did not stop within %.0f s", task.get_name(), SHUTDOWN_GRACE_S
                )

    async def _observe(self, stop: asyncio.Event) -> None:
        """Sample lag (gauges, alerts, gate) and the pending dead letters until stopped."""
        while not stop.is_set():
            try:
                await self.lag.sample()
                await self.dlq.refresh_pending_gauge()
            except Exception:
                log.exception("lag/DLQ sample failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.lag.interval_s)

    async def close(self) -> None:
        """Stop the committer and the notification feed, close pipeline state, the broker
        and the database."""
        for started in list(self.started.values()):
            if isinstance(started.state, Closable):
                await started.state.close()
        self.started.clear()
        await self.committer.close()
        await self.notification_feed.close()
        await self.broker.close()
        await self.cache.close()
        if self.blobs is not None:
            await self.blobs.close()
        await self.engine.dispose()


def make_blobs(settings: Settings) -> BlobStore:
    """Local files (``file://``, default ``<data_dir>/blobs``) or S3 (``s3://bucket``)."""
    url = settings.blob_url or f"file://{(settings.data_dir / 'blobs').resolve()}"
    if url.startswith("s3://"):
        from aigc_hub.blobs.s3 import S3BlobStore

        return S3BlobStore.from_url(
            url,
            endpoint=settings.s3_endpoint,
            access_key=settings.s3_access_key,
            secret_key=settings.s3_secret_key,
            region=settings.s3_region,
        )
    if not url.startswith("file://"):
        raise ConfigurationError(f"blob URL {url!r} is neither file:///path nor s3://bucket")
    from aigc_hub.blobs.local import LocalBlobStore, load_or_create_secret

    root = Path(url.removeprefix("file://"))
    secret = settings.blob_signing_key or load_or_create_secret(root)
    return LocalBlobStore(root, secret=secret)


def make_cache(settings: Settings) -> Cache:
    """Redis when ``AIGC_HUB_REDIS_URL`` is set, else the in-process cache."""
    if not settings.redis_url:
        return MemoryCache()
    from aigc_hub.cache.redis import RedisCache

    return RedisCache.from_url(settings.redis_url)


def make_broker(settings: Settings) -> Broker:
    """The messaging engine the settings name."""
    if settings.broker == "memory":
        from aigc_hub.messaging.memory import MemoryBroker

        return MemoryBroker()
    if settings.broker == "kafka":
        from aigc_hub.messaging.kafka import KafkaBroker

        options = settings.kafka_options()
        return KafkaBroker(
            settings.kafka_bootstrap,
            consumer_overrides=options["consumer_overrides"],
            producer_overrides=options["producer_overrides"],
        )
    from aigc_hub.messaging.embedded import EmbeddedBroker

    return EmbeddedBroker(settings.resolved_log_path())


def _record_decoder(
    engine: AsyncEngine, clock: Clock, pipelines: Sequence[PipelineBase]
) -> RecordDecoder | None:
    """Avro on the topics pipelines declared (their registry lookups); None: JSON only."""
    bindings = [binding for p in pipelines for binding in p.avro_topics]
    if not bindings:
        return None
    from aigc_hub.schemas.avro_envelopes import AvroEnvelopes
    from aigc_hub.schemas.avro_registry.store import AvroRegistry

    return AvroEnvelopes(AvroRegistry(engine, clock), bindings)
