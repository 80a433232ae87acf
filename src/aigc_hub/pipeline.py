"""Pipelines register like blueprints: topics, event schemas, handlers and scanners.

A pipeline module builds one :class:`Pipeline`; the composition root includes it in the hub.
The backbone never imports a pipeline; pipelines import the backbone. Besides what runs in
the hub, a pipeline declares what the hub's tools need from its folder: its settings class,
its CLI sub-app, its tables and migrations, and the outside processes ``up`` starts.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from pydantic_settings import BaseSettings

from aigc_hub.messaging.catalog import TopicSpec

if TYPE_CHECKING:
    from fastapi import APIRouter

    from aigc_hub.bootstrap import Hub
    from aigc_hub.core.envelope import Envelope
    from aigc_hub.reliability.scanners import Scanner
    from aigc_hub.runtime.context import HandlerContext

#: A consumer handler: does its outside work, stages its writes on ``ctx``, returns events.
Handler = Callable[["Envelope", "HandlerContext"], Awaitable[list["Envelope"]]]

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
class UpContext:
    """What ``aigc-hub up`` tells a pipeline's hooks: where the API and the data are, and how
    to say one line to the person who started it."""

    api_url: str
    data_dir: Path
    say: Callable[[str], None]
    warn: Callable[[str], None]


#: An outside process a pipeline needs on embedded defaults (its local provider…): ``up``
#: enters it after the hub started and leaves it when the hub stops. Only ``up`` runs hooks.
UpHook = Callable[["Hub", UpContext], AbstractAsyncContextManager[None]]

#: Env prefixes and CLI names are made of these (``AIGC_HUB_<ALIAS>_``, ``aigc-hub <alias>``).
_ALIAS = re.compile(r"[a-z][a-z0-9_]*")

M = TypeVar("M", bound=type[pydantic.BaseModel])
H = TypeVar("H", bound=Handler)


@dataclass(frozen=True)
class EventSpec:
    """An event type at one schema version, with its payload model and topic."""

    name: str
    version: int
    model: type[pydantic.BaseModel]
    topic: str | None = None


@dataclass(frozen=True)
class HandlerSpec:
    """A consumer group: which topics it reads, its handler and its limits."""

    group: str
    topics: tuple[str, ...]
    handler: Handler
    concurrency: int = 4
    timeout: float | None = None
    pipeline: str = ""


@dataclass
class Pipeline:
    """A named bundle of topics, event schemas and consumer handlers."""

    name: str
    topics: list[TopicSpec] = field(default_factory=list)
    events: list[EventSpec] = field(default_factory=list)
    handlers: list[HandlerSpec] = field(default_factory=list)
    scanners: list[ScannerFactory] = field(default_factory=list)
    #: FastAPI routers mounted under ``/v1`` by the HTTP app.
    routers: list[APIRouter] = field(default_factory=list)
    timelines: list[TimelineSource] = field(default_factory=list)
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

    def handler(
        self,
        group: str,
        topics: Sequence[str],
        *,
        concurrency: int = 4,
        timeout: float | None = None,
    ) -> Callable[[H], H]:
        """Function decorator: run this handler as consumer group ``group`` over ``topics``."""

        def register(fn: H) -> H:
            self.handlers.append(
                HandlerSpec(group, tuple(topics), fn, concurrency, timeout, self.name)
            )
            return fn

        return register
