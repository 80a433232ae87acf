"""Logs as JSON lines on stderr, through structlog, with the current event's ids on every line.

``configure_logging()`` once at process start routes both structlog loggers and the standard
``logging`` module through one handler, so library log lines get the same shape. Ids are
bound in context variables (:func:`bind_event`), which asyncio copies into each task: a
handler's lines carry its event's ``trace_id``, ``event_id`` and ``consumer`` and no other's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator
from typing import IO, Any, Protocol

import structlog

#: Keys bind_event() puts on log lines (the ones it finds set).
EVENT_KEYS = ("trace_id", "event_id", "event_type", "consumer", "tenant_id")


class _OurHandler(logging.StreamHandler[IO[str]]):
    """Marks the handler configure_logging() installed, so a second call replaces it."""


class EnvelopeLike(Protocol):
    """What bind_event() reads: an envelope, or anything with these attributes."""

    @property
    def event_id(self) -> str: ...

    @property
    def trace_id(self) -> str | None: ...


class _Binding:
    """An event bound to the logs; its values are worked out only when a line is logged."""

    __slots__ = ("consumer", "envelope", "extra", "outer")

    def __init__(
        self,
        envelope: EnvelopeLike,
        consumer: str | None,
        extra: dict[str, Any] | None,
        outer: _Binding | None,
    ) -> None:
        self.envelope = envelope
        self.consumer = consumer
        self.extra = extra
        self.outer = outer

    def values(self) -> dict[str, Any]:
        """The keys to put on a line: the outer binding's, overridden by this one's."""
        values = self.outer.values() if self.outer is not None else {}
        values["event_id"] = self.envelope.event_id
        for key in ("trace_id", "event_type", "tenant_id"):
            value = getattr(self.envelope, key, None)
            if value is not None:
                values[key] = value
        if self.consumer is not None:
            values["consumer"] = self.consumer
        if self.extra:
            values.update({k: v for k, v in self.extra.items() if v is not None})
        return values


#: The event being handled by the current task: one context variable set per event, its keys
#: computed only when a line is actually logged (binding five structlog context variables per
#: event cost more than the rest of the middleware together).
_current_event: contextvars.ContextVar[_Binding | None] = contextvars.ContextVar(
    "aigc_hub_event", default=None
)

#: What :func:`enter_event` returns and :func:`leave_event` takes back.
EventToken = contextvars.Token[_Binding | None]


def _merge_event(
    _logger: Any, _method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    bound = _current_event.get()
    if bound is not None:
        for key, value in bound.values().items():
            event_dict.setdefault(key, value)
    return event_dict


def _shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        _merge_event,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.StackInfoRenderer(),
    ]


def configure_logging(
    level: str | int = "INFO", json: bool = True, stream: IO[str] | None = None
) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr): JSON lines, or console text.

    Replaces the handler a previous call installed and leaves other handlers alone; call it
    once at start-up, before the first log line (structlog caches loggers on first use).
    """
    shared = _shared_processors()
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = _OurHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """A structlog logger (``log.info("event", key=value)``); configured by configure_logging()."""
    return structlog.stdlib.get_logger(name)


def enter_event(envelope: EnvelopeLike, consumer: str | None = None, **extra: Any) -> EventToken:
    """Bind the envelope's ids to this task's log lines until :func:`leave_event`.

    The per-event path's form of :func:`bind_event`: no generator, and nothing is computed
    unless a line is logged. Pass the returned token to :func:`leave_event`, in a ``finally``.
    """
    return _current_event.set(_Binding(envelope, consumer, extra, _current_event.get()))


def leave_event(token: EventToken) -> None:
    """Restore the bindings that were current before the matching :func:`enter_event`."""
    _current_event.reset(token)


@contextlib.contextmanager
def bind_event(envelope: EnvelopeLike, consumer: str | None = None, **extra: Any) -> Iterator[None]:
    """Within the block, every log line of this task carries the envelope's ids.

    Binds ``event_id`` and, when set, ``trace_id``, ``event_type``, ``tenant_id``,
    ``consumer`` and ``extra``; restores the previous bindings on exit (nesting is safe).
    """
    token = enter_event(envelope, consumer, **extra)
    try:
        yield
    finally:
        leave_event(token)


def bind(**values: Any) -> None:
    """Bind ``values`` for the rest of the current task's context (e.g. ``consumer=``)."""
    structlog.contextvars.bind_contextvars(**values)


def clear() -> None:
    """Drop every binding of the current context."""
    structlog.contextvars.clear_contextvars()
