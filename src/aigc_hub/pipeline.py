"""Pipelines register like blueprints: topics, event schemas, handlers and scanners.

A pipeline module builds one :class:`Pipeline`; the composition root includes it in the hub.
The backbone never imports a pipeline; pipelines import the backbone. Besides what runs in
the hub, a pipeline declares what the hub's tools need from its folder: its settings class,
its CLI sub-app, its tables and migrations, and the outside processes ``up`` starts.

A pipeline's per-hub state (its settings, provider clients, slots…) is typed: the pipeline
declares a factory (``Pipeline("generation", state=build_state)``), the hub calls it once at
start, and handlers and scanners that need it are registered with ``*_with_state`` and get it
as their first argument (bound by :meth:`Pipeline.start`, where its type is still known).
Routes ask the hub for it through the pipeline's :class:`StateKey`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

import pydantic
from pydantic_settings import BaseSettings

from aigc_hub.messaging.catalog import TopicSpec

if TYPE_CHECKING:
    from fastapi import APIRouter
    from sqlalchemy.ext.asyncio import AsyncConnection

    from aigc_hub.bootstrap import Hub
    from aigc_hub.core.envelope import Envelope
    from aigc_hub.messaging.base import Record
    from aigc_hub.reliability.scanners import Scanner
    from aigc_hub.runtime.context import HandlerContext
    from aigc_hub.schemas.avro_envelopes import AvroBinding
    from aigc_hub.settings import Settings

#: A consumer handler: does its outside work, stages its writes on ``ctx``, returns events.
Handler = Callable[["Envelope", "HandlerContext"], Awaitable[list["Envelope"]]]
#: A stream handler (the telemetry road): takes a batch of raw records, in offset order per
#: partition, and returns once it is done with all of them; the runtime then commits. It may
#: see a batch again after a crash, a rebalance or its own failure (the runtime hands a batch
#: that raised over again, after a back-off: nothing is skipped), so it is idempotent. When no
#: record arrives for the group's ``max_wait_s`` it is called with an EMPTY batch, a tick:
#: time-driven handlers close their windows on it. What it keeps in memory past its return is
#: not redelivered after a crash (those offsets are committed).
StreamHandler = Callable[[Sequence["Record"]], Awaitable[None]]
#: A batch handler's results, one per record in order: the events that record emits, or the
#: exception that fails that record alone (the others of the batch still commit).
BatchResults = Sequence["list[Envelope] | Exception"]
#: A batch handler (a batch consumer group, :meth:`PipelineBase.batch_handler`): gets records
#: as ``(envelope, ctx)`` pairs, does one outside call for all of them (an embedding model's
#: batch), stages each record's writes on its own ``ctx`` and returns one result per record.
#: Raising fails every record of the batch; each is then retried alone (a batch of one).
BatchHandler = Callable[[Sequence["tuple[Envelope, HandlerContext]"]], Awaitable[BatchResults]]
#: Runs in the transaction that stores a group's dead letter (see :attr:`HandlerSpec.
#: on_dead_letter`): the pipeline's facts about the record's failure, e.g. its task FAILED.
DeadLetterHook = Callable[["AsyncConnection", "Envelope", BaseException], Awaitable[None]]
#: A pipeline's own reason to refuse new work now, as ``(retry_after_s, reason)``, or None
#: to admit (an AI service it depends on is overloaded, say): asked by the admission gate
#: beside the lag monitor's breaches.
AdmissionCheck = Callable[[], "tuple[int, str] | None"]
#: Why a consumer group must stop taking records now, or None to go on.
PauseCheck = Callable[[], "str | None"]

#: The largest body a pipeline's routes under a path prefix take, given the started hub
#: (e.g. its settings' upload limit): larger than the API's default, for uploads.
BodyLimitOf = Callable[["Hub"], int]

#: Builds a pipeline's scanner once the hub (engine, outbox, clock…) exists.
ScannerFactory = Callable[["Hub"], "Scanner"]


@dataclass(frozen=True)
class TimelineEntry:
    """One line of a subject's history (a task's transition, an event about it…)."""

    at_ms: int
    source: str
    title: str
    detail: dict[str, Any] = field(default_factory=dict)


#: What a pipeline knows of one subject (a task id…), for the console's task explorer.
#: Returns ``None`` when the id is not one of this pipeline's subjects.
TimelineSource = Callable[["Hub", str], Awaitable["list[TimelineEntry] | None"]]


@dataclass(frozen=True)
class GalleryMedia:
    """One stored file of a task's result (the result itself or a variant of it: proxy, HLS,
    poster…), as the console's gallery and task explorer show it."""

    asset_id: str
    #: ``source`` for the result itself, else the variant's profile (``hls``, ``poster``…).
    profile: str
    status: str
    content_type: str | None = None
    size_bytes: int | None = None
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    #: Why it is REJECTED or failed, when it is.
    status_reason: str | None = None
    #: A short-lived link to play or view it (READY files only); never stored.
    url: str | None = None


@dataclass(frozen=True)
class GalleryItem:
    """One task in a tenant's gallery: what it was asked for, where it is, what to show."""

    task_id: str
    tenant_id: str
    #: The prompt (or another short description), possibly cut.
    title: str
    status: str
    created_at: int
    #: Short-lived URLs minted for this page (seed 004 §3.2.9: rows keep object keys).
    poster_url: str | None = None
    play_url: str | None = None
    #: The content type of :attr:`play_url`: an HLS playlist or a plain video.
    play_type: str | None = None
    result: GalleryMedia | None = None
    variants: tuple[GalleryMedia, ...] = ()


@dataclass(frozen=True)
class GalleryQuery:
    """Which tasks a gallery source returns, newest first.

    The console sets :attr:`tenant_id` from the signed-in key: a tenant always gets its own
    id here; only an admin may pass another tenant's id or None (every tenant).
    """

    tenant_id: str | None
    #: One task only (the task explorer, a player page); the source answers [] if unknown.
    task_id: str | None = None
    #: Keyset cursor: only tasks strictly older than ``(created_at, task_id)``.
    before: tuple[int, str] | None = None
    limit: int = 24


#: What a pipeline shows of its tasks in the console's gallery (newest first, at most
#: ``query.limit`` items, only ``query.tenant_id``'s when it is set).
GallerySource = Callable[["Hub", GalleryQuery], Awaitable[list[GalleryItem]]]


@dataclass(frozen=True)
class UpContext:
    """What ``aigc-hub up`` tells a pipeline's hooks: where the API and the data are, and how
    to say one line to the person who started it."""

    api_url: str
    data_dir: Path
    say: Callable[[str], None]
    warn: Callable[[str], None]


#: An outside process a pipeline needs on embedded defaults (its local provider…): ``up``
#: enters it before the hub starts (so a hook may give the hub settings its state is built
#: from; the state does not exist yet) and leaves it when the hub stops. Only ``up`` runs hooks.
UpHook = Callable[["Hub", UpContext], AbstractAsyncContextManager[None]]

#: Env prefixes and CLI names are made of these (``AIGC_HUB_<ALIAS>_``, ``aigc-hub <alias>``).
_ALIAS = re.compile(r"[a-z][a-z0-9_]*")

M = TypeVar("M", bound=type[pydantic.BaseModel])
H = TypeVar("H", bound=Handler)
#: A pipeline's state type (``None`` for a pipeline without state).
S = TypeVar("S")

#: Builds a pipeline's state once per hub, at start: engines exist, no handler runs yet.
StateFactory = Callable[["Hub", "Settings"], S]
#: A consumer handler that needs its pipeline's state (given first).
StateHandler = Callable[[S, "Envelope", "HandlerContext"], Awaitable[list["Envelope"]]]
#: A dead-letter hook that needs its pipeline's state (given first).
StateDeadLetterHook = Callable[[S, "AsyncConnection", "Envelope", BaseException], Awaitable[None]]
#: A batch handler that needs its pipeline's state (given first).
StateBatchHandler = Callable[
    [S, Sequence["tuple[Envelope, HandlerContext]"]], Awaitable[BatchResults]
]
#: Builds a scanner from its pipeline's state.
StateScannerFactory = Callable[[S], "Scanner"]
#: Builds a stream handler from its pipeline's state (bound once, at hub start).
StateStreamFactory = Callable[[S], StreamHandler]


@runtime_checkable
class Closable(Protocol):
    """A state holding resources (HTTP clients…): the hub closes it with itself."""

    async def close(self) -> None:
        """Release what the state holds."""
        ...


@dataclass(frozen=True)
class StateKey(Generic[S]):
    """A typed handle on one pipeline's state in a hub: ``hub.state_of(key) -> S``.

    A module that cannot import its pipeline (the pipeline imports it: its routes) declares
    the key beside the state type; :attr:`Pipeline.key` is the same key.
    """

    name: str


@dataclass(frozen=True)
class EventSpec:
    """An event type at one schema version, with its payload model and topic."""

    name: str
    version: int
    model: type[pydantic.BaseModel]
    topic: str | None = None


@dataclass(frozen=True)
class Batching:
    """How a batch consumer group gathers records for its :data:`BatchHandler`."""

    handler: BatchHandler
    #: A batch is handed over when it holds this many records...
    max_records: int = 50
    #: ... or when its first record has waited this long (seconds).
    max_wait_s: float = 2.0
    #: A record's rank, higher first: a batch is cut from the highest-ranked records waiting
    #: (arrival order among equals). None: arrival order.
    priority: Callable[[Envelope], int] | None = None


@dataclass(frozen=True)
class GroupTuning:
    """A consumer group's name and concurrency as read from a pipeline's settings at start;
    None keeps what was declared."""

    group: str | None = None
    concurrency: int | None = None


@dataclass(frozen=True)
class HandlerSpec:
    """A consumer group: which topics it reads, its handler and its limits."""

    group: str
    topics: tuple[str, ...]
    handler: Handler
    concurrency: int = 4
    timeout: float | None = None
    pipeline: str = ""
    #: Asked before each fetch: a reason to stop taking work (a full scratch disk), or None.
    #: Records stay in the broker meanwhile (seed 004 §3.9.4: pause consumption, not the API).
    pause: PauseCheck | None = None
    #: Set for a batch group: the runtime gathers records into batches for this handler
    #: (``handler`` then hands it one record at a time, as a batch of one).
    batching: Batching | None = None
    #: Run in the same transaction as the dead letter of one of this group's records, so the
    #: pipeline's own facts say it failed (a task FAILED with its reason) exactly when the
    #: dead letter exists. A hook that raises stores neither: the record stays unfinished
    #: (its offset uncommitted) and comes back on the group's next start.
    on_dead_letter: DeadLetterHook | None = None
    #: The concurrency was read from the pipeline's own settings (a :class:`GroupTuning`):
    #: the hub-wide default (``AIGC_HUB_CONCURRENCY``) does not override it.
    tuned: bool = False


@dataclass(frozen=True)
class StreamSpec:
    """A consumer group on the telemetry road: raw records in batches, no envelope, no
    inbox, no per-record retries or dead letters (see :data:`StreamHandler`)."""

    group: str
    topics: tuple[str, ...]
    handler: StreamHandler
    #: A batch is handed over when it holds this many records...
    max_records: int = 5000
    #: ... or when its first record has waited this long (seconds).
    max_wait_s: float = 0.2
    pipeline: str = ""


@dataclass(frozen=True)
class Started:
    """A pipeline inside one started hub: its built state, handlers and scanners bound to it."""

    state: object
    handlers: list[HandlerSpec]
    scanners: list[ScannerFactory]
    streams: list[StreamSpec] = field(default_factory=list)
    #: Its own admission checks, bound to its state.
    admission: list[AdmissionCheck] = field(default_factory=list)


@dataclass
class PipelineBase:
    """A named bundle of topics, event schemas, consumer handlers and scanners: what the hub
    reads of any pipeline, whatever its state's type (see :class:`Pipeline`)."""

    name: str
    topics: list[TopicSpec] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)
    handlers: list[HandlerSpec] = field(default_factory=list)
    #: Consumer groups on the telemetry road (:meth:`stream`).
    streams: list[StreamSpec] = field(default_factory=list)
    scanners: list[ScannerFactory] = field(default_factory=list)
    #: FastAPI routers mounted under ``/v1`` by the HTTP app.
    routers: list[APIRouter] = field(default_factory=list)
    #: Routers mounted at the root, outside ``/v1``: only for paths a seed fixes (seed 003's
    #: ``/api/admin/dlq``), so its clients work unchanged.
    root_routers: list[APIRouter] = field(default_factory=list)
    timelines: list[TimelineSource] = field(default_factory=list)
    #: Sources of the console's gallery (see :data:`GallerySource`).
    galleries: list[GallerySource] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    #: Short name for the CLI group and the env prefix (``gen``); default: ``name``.
    alias: str = ""
    #: Its settings class; its env prefix must be :attr:`env_prefix` (checked on load).
    settings: type[BaseSettings] | None = None
    #: ``module:attribute`` of its Typer app, mounted as ``aigc-hub <alias>``; imported only
    #: by the CLI, so hub processes never load CLI code.
    cli: str = ""
    #: The module that declares its tables on ``store.tables.metadata`` (autogenerate, checks).
    models: str = ""
    #: Its folder of Alembic revisions: a branch of the one chain labelled with ``name``.
    migrations: Path | None = None
    #: Outside processes ``up`` starts for it (see :data:`UpHook`).
    up_hooks: list[UpHook] = field(default_factory=list)
    #: Path prefixes (under ``/v1``) whose bodies may pass the API's body limit: uploads.
    body_limits: list[tuple[str, BodyLimitOf]] = field(default_factory=list)
    #: Its topics that may carry Confluent-wire Avro records from producers outside the hub,
    #: read with the schema registry (:mod:`aigc_hub.schemas.avro_envelopes`).
    avro_topics: list[AvroBinding] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _ALIAS.fullmatch(self.short_name):
            raise ValueError(
                f"pipeline {self.name!r}: alias {self.short_name!r} must match {_ALIAS.pattern}"
            )

    @property
    def short_name(self) -> str:
        """The CLI group's name and the env prefix's middle part: ``alias`` or ``name``."""
        return self.alias or self.name

    @property
    def env_prefix(self) -> str:
        """The prefix of this pipeline's settings: ``AIGC_HUB_<SHORT_NAME>_``."""
        return f"AIGC_HUB_{self.short_name.upper()}_"

    def up_hook(self, hook: UpHook) -> UpHook:
        """Register an outside process ``aigc-hub up`` runs beside the hub (see :data:`UpHook`)."""
        self.up_hooks.append(hook)
        return hook

    def body_limit(self, prefix: str, limit: BodyLimitOf) -> None:
        """Let bodies of requests under ``/v1{prefix}`` be up to ``limit(hub)`` bytes instead
        of the API's limit (an upload route); the limit is still enforced on the bytes as
        they stream in, before any route reads them."""
        if not prefix.startswith("/"):
            raise ValueError(f"a body-limit prefix starts with '/': {prefix!r}")
        self.body_limits.append((prefix, limit))

    def topic(self, spec: TopicSpec) -> TopicSpec:
        """Declare a topic this pipeline owns (the hub and `aigc-hub topics` merge it in)."""
        self.topics.append(spec)
        return spec

    def event(self, name: str, version: int = 1, *, topic: str | None = None) -> Callable[[M], M]:
        """Class decorator: register a pydantic payload model as ``name`` at ``version``."""

        def register(model: M) -> M:
            self.events.append(EventSpec(name, version, model, topic))
            return model

        return register

    def scanner(self, factory: ScannerFactory) -> ScannerFactory:
        """Register a scanner factory; the hub builds it and runs it under a leader lease."""
        self.scanners.append(factory)
        return factory

    def timeline(self, source: TimelineSource) -> TimelineSource:
        """Register how this pipeline tells one subject's history (console task explorer)."""
        self.timelines.append(source)
        return source

    def gallery(self, source: GallerySource) -> GallerySource:
        """Register how this pipeline shows its tasks in the console's gallery."""
        self.galleries.append(source)
        return source

    def handler(
        self,
        group: str,
        topics: Sequence[str],
        *,
        concurrency: int = 4,
        timeout: float | None = None,
        on_dead_letter: DeadLetterHook | None = None,
    ) -> Callable[[H], H]:
        """Function decorator: run this handler as consumer group ``group`` over ``topics``."""

        def register(fn: H) -> H:
            self.handlers.append(
                HandlerSpec(
                    group,
                    tuple(topics),
                    fn,
                    concurrency,
                    timeout,
                    self.name,
                    on_dead_letter=on_dead_letter,
                )
            )
            return fn

        return register

    def batch_handler(
        self,
        group: str,
        topics: Sequence[str],
        *,
        max_records: int = 50,
        max_wait_s: float = 2.0,
        concurrency: int = 2,
        timeout: float | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        priority: Callable[[Envelope], int] | None = None,
    ) -> Callable[[BatchHandler], BatchHandler]:
        """Function decorator: run ``fn(items)`` as batch consumer group ``group``.

        A batch group is a consumer group (inbox, retries, dead letters, the outbox) whose
        handler gets up to ``max_records`` records at once, or what came within
        ``max_wait_s`` of the first; ``concurrency`` batches run at once. Each record's
        effect is still exactly once: its writes commit with its own inbox mark. Records of
        one key may share a batch or be in two batches at once, so per-key order does not
        hold here: use it where a record's effect does not depend on its key's previous one.
        With ``priority(envelope)`` (higher first) a batch takes the highest-ranked of the
        records waiting for it: under load, urgent records overtake the others in flight.
        """

        def register(fn: BatchHandler) -> BatchHandler:
            self.handlers.append(
                HandlerSpec(
                    group,
                    tuple(topics),
                    _one_by_one(fn),
                    concurrency,
                    timeout,
                    self.name,
                    batching=Batching(fn, max_records, max_wait_s, priority),
                    on_dead_letter=on_dead_letter,
                )
            )
            return fn

        return register

    def stream(
        self,
        group: str,
        topics: Sequence[str],
        *,
        max_records: int = 5000,
        max_wait_s: float = 0.2,
    ) -> Callable[[StreamHandler], StreamHandler]:
        """Function decorator: run ``fn(records)`` as stream group ``group`` over ``topics``."""

        def register(fn: StreamHandler) -> StreamHandler:
            self.streams.append(
                StreamSpec(group, tuple(topics), fn, max_records, max_wait_s, self.name)
            )
            return fn

        return register

    def start(self, hub: Hub, settings: Settings) -> Started:
        """This pipeline in a starting hub; a pipeline without state has nothing to build."""
        return Started(None, list(self.handlers), list(self.scanners), list(self.streams))


@dataclass
class Pipeline(PipelineBase, Generic[S]):
    """A pipeline whose handlers, scanners and routes share a typed per-hub state ``S``
    (``Pipeline[None]`` for one without state)."""

    #: Builds the per-hub state the ``*_with_state`` handlers and scanners receive.
    state: StateFactory[S] | None = None
    #: Handlers and scanners that receive the state, bound at :meth:`start`.
    state_handlers: dict[str, StateHandler[S]] = field(default_factory=dict)
    state_scanners: list[StateScannerFactory[S]] = field(default_factory=list)
    #: Pause checks of state handlers' groups, bound at :meth:`start` like the handlers.
    state_pauses: dict[str, Callable[[S], str | None]] = field(default_factory=dict)
    #: Stream handlers built from the state, by group, bound at :meth:`start`.
    state_streams: dict[str, StateStreamFactory[S]] = field(default_factory=dict)
    #: Batch handlers that receive the state, by group, bound at :meth:`start`.
    state_batch_handlers: dict[str, StateBatchHandler[S]] = field(default_factory=dict)
    #: Admission checks that read the state, bound at :meth:`start`.
    state_admission_checks: list[Callable[[S], tuple[int, str] | None]] = field(
        default_factory=list
    )
    #: Batch shapes read from the state, by group, applied at :meth:`start`.
    state_batch_shapes: dict[str, Callable[[S], tuple[int, float]]] = field(default_factory=dict)
    #: Dead-letter hooks of state handlers' groups, bound at :meth:`start`.
    state_dead_letter_hooks: dict[str, StateDeadLetterHook[S]] = field(default_factory=dict)
    #: Groups that run only when the state says so (an optional model's), asked at :meth:`start`.
    state_enabled: dict[str, Callable[[S], bool]] = field(default_factory=dict)
    #: Group names and concurrency read from the state (its settings), applied at :meth:`start`.
    state_tunings: dict[str, Callable[[S], GroupTuning]] = field(default_factory=dict)

    @property
    def key(self) -> StateKey[S]:
        """The typed handle on this pipeline's state in a hub (``hub.state_of(key)``)."""
        return StateKey(self.name)

    def with_state(self, factory: StateFactory[S]) -> Pipeline[S]:
        """This pipeline with its state built by ``factory`` (a test's fakes, an embedder's
        pre-built clients); everything else is shared with the original."""
        return replace(self, state=factory)

    def start(self, hub: Hub, settings: Settings) -> Started:
        """Build the state once and bind the handlers and scanners that receive it."""
        if self.state is None:
            if (
                self.state_handlers
                or self.state_scanners
                or self.state_streams
                or self.state_batch_handlers
                or self.state_dead_letter_hooks
                or self.state_admission_checks
            ):
                raise TypeError(f"pipeline {self.name!r} uses state but declares no factory")
            return super().start(hub, settings)
        state = self.state(hub, settings)
        handlers = [
            self._bind(spec, state)
            for spec in self.handlers
            if spec.group not in self.state_enabled or self.state_enabled[spec.group](state)
        ]
        scanners: list[ScannerFactory] = [
            *self.scanners,
            *(_bound_scanner(factory, state) for factory in self.state_scanners),
        ]
        streams = [
            replace(spec, handler=self.state_streams[spec.group](state))
            if spec.group in self.state_streams
            else spec
            for spec in self.streams
        ]
        admission = [_bound_check(check, state) for check in self.state_admission_checks]
        return Started(state, handlers, scanners, streams, admission)

    def admission_check_with_state(
        self, check: Callable[[S], tuple[int, str] | None]
    ) -> Callable[[S], tuple[int, str] | None]:
        """Register a check the admission gate asks before admitting new work for this
        pipeline (:data:`AdmissionCheck`, given the state): ``(retry_after_s, reason)``
        refuses with 429 and ``Retry-After``."""
        self.state_admission_checks.append(check)
        return check

    def _bind(self, spec: HandlerSpec, state: S) -> HandlerSpec:
        """``spec`` with its state handler (plain or batch), pause check and dead-letter hook
        bound to ``state``, named and sized as its tuning reads them from ``state``."""
        tune = self.state_tunings.get(spec.group)
        bound = self._bind_handler(spec, state)
        if tune is None:
            return bound
        tuning = tune(state)
        return replace(
            bound,
            group=tuning.group or bound.group,
            concurrency=tuning.concurrency or bound.concurrency,
            tuned=tuning.concurrency is not None,
        )

    def _bind_handler(self, spec: HandlerSpec, state: S) -> HandlerSpec:
        hook = self.state_dead_letter_hooks.get(spec.group)
        if hook is not None:
            spec = replace(spec, on_dead_letter=_bound_hook(hook, state))
        if spec.group in self.state_batch_handlers and spec.batching is not None:
            batch = _bound_batch(self.state_batch_handlers[spec.group], state)
            batching = replace(spec.batching, handler=batch)
            shape = self.state_batch_shapes.get(spec.group)
            if shape is not None:
                max_records, max_wait_s = shape(state)
                batching = replace(batching, max_records=max_records, max_wait_s=max_wait_s)
            return replace(spec, handler=_one_by_one(batch), batching=batching)
        if spec.group in self.state_handlers:
            return replace(
                spec,
                handler=_bound(self.state_handlers[spec.group], state),
                pause=_bound_pause(self.state_pauses.get(spec.group), state),
            )
        return spec

    def scanner_with_state(self, factory: StateScannerFactory[S]) -> StateScannerFactory[S]:
        """Register a scanner built from this pipeline's state (bound at hub start)."""
        self.state_scanners.append(factory)
        return factory

    def handler_with_state(
        self,
        group: str,
        topics: Sequence[str],
        *,
        concurrency: int = 4,
        timeout: float | None = None,
        pause: Callable[[S], str | None] | None = None,
        on_dead_letter: StateDeadLetterHook[S] | None = None,
        tune: Callable[[S], GroupTuning] | None = None,
    ) -> Callable[[StateHandler[S]], StateHandler[S]]:
        """Like :meth:`handler` for ``fn(state, env, ctx)``: the hub binds the state at start.

        ``pause(state)``, when given, is asked before each fetch: a reason string makes the
        group stop taking records until it answers None again (backpressure from a resource
        the handler needs, such as scratch disk). ``tune(state)``, when given, names the group
        and sets its concurrency from the state (a seed's configurable group id) at start:
        ``group`` is then only the name it is declared under."""

        def register(fn: StateHandler[S]) -> StateHandler[S]:
            self.handlers.append(
                HandlerSpec(
                    group,
                    tuple(topics),
                    _unbound(self.name, group),
                    concurrency,
                    timeout,
                    self.name,
                )
            )
            self.state_handlers[group] = fn
            if pause is not None:
                self.state_pauses[group] = pause
            if on_dead_letter is not None:
                self.state_dead_letter_hooks[group] = on_dead_letter
            if tune is not None:
                self.state_tunings[group] = tune
            return fn

        return register

    def batch_handler_with_state(
        self,
        group: str,
        topics: Sequence[str],
        *,
        max_records: int = 50,
        max_wait_s: float = 2.0,
        concurrency: int = 2,
        timeout: float | None = None,
        on_dead_letter: StateDeadLetterHook[S] | None = None,
        shape: Callable[[S], tuple[int, float]] | None = None,
        priority: Callable[[Envelope], int] | None = None,
        enabled: Callable[[S], bool] | None = None,
        tune: Callable[[S], GroupTuning] | None = None,
    ) -> Callable[[StateBatchHandler[S]], StateBatchHandler[S]]:
        """Like :meth:`batch_handler` for ``fn(state, items)``: the hub binds the state.

        ``shape(state)``, when given, is the batches' ``(max_records, max_wait_s)`` read from
        the state (its settings) at hub start, in place of the declared ones. With
        ``enabled(state)`` the group exists in a hub only when it answers true (a group for
        an optional model: unset, nothing consumes for it). ``tune(state)`` as for
        :meth:`handler_with_state`."""

        def register(fn: StateBatchHandler[S]) -> StateBatchHandler[S]:
            unbound = _unbound_batch(self.name, group)
            self.handlers.append(
                HandlerSpec(
                    group,
                    tuple(topics),
                    _one_by_one(unbound),
                    concurrency,
                    timeout,
                    self.name,
                    batching=Batching(unbound, max_records, max_wait_s, priority),
                )
            )
            self.state_batch_handlers[group] = fn
            if shape is not None:
                self.state_batch_shapes[group] = shape
            if enabled is not None:
                self.state_enabled[group] = enabled
            if on_dead_letter is not None:
                self.state_dead_letter_hooks[group] = on_dead_letter
            if tune is not None:
                self.state_tunings[group] = tune
            return fn

        return register

    def stream_with_state(
        self,
        group: str,
        topics: Sequence[str],
        *,
        max_records: int = 5000,
        max_wait_s: float = 0.2,
    ) -> Callable[[StateStreamFactory[S]], StateStreamFactory[S]]:
        """Like :meth:`stream`, for a factory ``make(state) -> handler`` called once at hub
        start (the handler keeps what it builds from the state: a store, a model)."""

        def register(make: StateStreamFactory[S]) -> StateStreamFactory[S]:
            self.streams.append(
                StreamSpec(
                    group,
                    tuple(topics),
                    _unbound_stream(self.name, group),
                    max_records,
                    max_wait_s,
                    self.name,
                )
            )
            self.state_streams[group] = make
            return make

        return register


def _unbound_stream(pipeline: str, group: str) -> StreamHandler:
    """Stands in for a state stream handler until the hub starts (and binds the real one)."""

    async def refuse(records: Sequence[Record]) -> None:
        raise RuntimeError(
            f"stream group {group!r} needs pipeline {pipeline!r}'s state: "
            "run it through a started hub (Hub.start builds the state)"
        )

    return refuse


def _bound(fn: StateHandler[S], state: S) -> Handler:
    """``fn`` with its first argument fixed: a plain handler the runtime can call."""

    async def handle(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        return await fn(state, env, ctx)

    return handle


def _bound_batch(fn: StateBatchHandler[S], state: S) -> BatchHandler:
    """The batch handler ``fn`` with its state fixed."""

    async def handle(items: Sequence[tuple[Envelope, HandlerContext]]) -> BatchResults:
        return await fn(state, items)

    return handle


def _bound_check(check: Callable[[S], tuple[int, str] | None], state: S) -> AdmissionCheck:
    """The admission check ``check`` with its state fixed."""
    return lambda: check(state)


def _bound_hook(hook: StateDeadLetterHook[S], state: S) -> DeadLetterHook:
    """The dead-letter hook ``hook`` with its state fixed."""

    async def on_dead_letter(conn: AsyncConnection, env: Envelope, error: BaseException) -> None:
        await hook(state, conn, env, error)

    return on_dead_letter


def _one_by_one(fn: BatchHandler) -> Handler:
    """A plain handler that hands ``fn`` one record as a batch of one (what the runtime does
    with a record retried alone, and what a caller without the batching runtime gets)."""

    async def handle(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        results = await fn([(env, ctx)])
        if len(results) != 1:
            raise TypeError(f"a batch handler returned {len(results)} results for 1 record")
        result = results[0]
        if isinstance(result, Exception):
            raise result
        return result

    return handle


def _unbound_batch(pipeline: str, group: str) -> BatchHandler:
    """Stands in for a state batch handler until the hub starts (and binds the real one)."""

    async def refuse(items: Sequence[tuple[Envelope, HandlerContext]]) -> BatchResults:
        raise RuntimeError(
            f"consumer group {group!r} needs pipeline {pipeline!r}'s state: "
            "run it through a started hub (Hub.start builds the state)"
        )

    return refuse


def _bound_pause(check: Callable[[S], str | None] | None, state: S) -> PauseCheck | None:
    """``check`` with the state fixed, or None when the group has none."""
    if check is None:
        return None
    return lambda: check(state)


def _bound_scanner(factory: StateScannerFactory[S], state: S) -> ScannerFactory:
    """A hub-taking scanner factory that builds from ``state`` instead."""

    def build(_hub: Hub) -> Scanner:
        return factory(state)

    return build


def _unbound(pipeline: str, group: str) -> Handler:
    """Stands in for a state handler until the hub starts (and binds the real one)."""

    async def refuse(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        raise RuntimeError(
            f"consumer group {group!r} needs pipeline {pipeline!r}'s state: "
            "run it through a started hub (Hub.start builds the state)"
        )

    return refuse
