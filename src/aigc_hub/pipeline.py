"""Pipelines register like blueprints: topics, event schemas, handlers and scanners.

A pipeline module builds one :class:`Pipeline`; the composition root includes it in the hub.
The backbone never imports a pipeline; pipelines import the backbone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

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

    def topic(self, spec: TopicSpec) -> TopicSpec:
        """Declare a topic this pipeline uses (it may also be in the seeded catalog)."""
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
