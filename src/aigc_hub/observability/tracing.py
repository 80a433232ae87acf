"""W3C trace context across the broker, and consumer spans when OpenTelemetry is installed.

The trace context rides in the ``traceparent`` header (``messaging/headers.py`` builds it for
every envelope with a trace id). :func:`inject` and :func:`extract` need nothing but this
module. :func:`consumer_span` and :func:`current_ids` use OpenTelemetry only when the ``otel``
extra is installed; it is imported lazily, and without it they do nothing, so code calls them
unconditionally.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
import secrets
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, NamedTuple

from aigc_hub.messaging import headers as hub_headers

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import Attributes

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
INSTRUMENTATION_NAME = "aigc_hub"


class TraceParent(NamedTuple):
    """A parsed, valid ``traceparent``: 32-hex trace id, 16-hex parent span id, flags byte."""

    trace_id: str
    span_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        """The caller's sampling decision (flag bit 0)."""
        return bool(self.flags & 0x01)


def new_span_id() -> str:
    """A random, non-zero 16-hex span id."""
    return f"{secrets.randbelow(2**64 - 1) + 1:016x}"


def new_trace_id() -> str:
    """A random, non-zero 32-hex trace id."""
    return f"{secrets.randbelow(2**128 - 1) + 1:032x}"


def inject(
    headers: MutableMapping[str, str], trace_id: str, span_id: str
) -> MutableMapping[str, str]:
    """Set ``traceparent`` (sampled) in ``headers`` for the given ids; returns ``headers``.

    Ids are normalised as ``headers.traceparent()`` does: hex digits kept, padded or cut.
    """
    headers[hub_headers.TRACEPARENT] = hub_headers.traceparent(trace_id, span_id)
    return headers


def parse(value: str | None) -> TraceParent | None:
    """Parse one ``traceparent`` value by the W3C rules; None when absent or invalid."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    # Version ff is forbidden; version 00 has exactly four fields; later versions may add some.
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def extract_parent(headers: Mapping[str, str]) -> TraceParent | None:
    """The valid trace context in ``headers`` (key matched case-insensitively), or None."""
    value = headers.get(hub_headers.TRACEPARENT)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == hub_headers.TRACEPARENT), None)
    return parse(value)


def extract(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """``(trace_id, parent_span_id)`` from a valid ``traceparent`` in ``headers``, or None."""
    parent = extract_parent(headers)
    return None if parent is None else (parent.trace_id, parent.span_id)


@functools.cache
def otel_available() -> bool:
    """True when the OpenTelemetry API is importable (the ``otel`` extra)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:
        return False


#: When sdk_configured() last found no SDK (monotonic seconds); it asks again after a while.
_no_sdk_at: float | None = None
_sdk_seen = False
#: How long "no SDK" is believed: an SDK set later gets spans within this time.
NO_SDK_RECHECK_S = 1.0


def sdk_configured() -> bool:
    """True when OpenTelemetry is installed and a real (SDK) tracer provider is set globally.

    Asked per event, so it is cheap: OpenTelemetry's own check reads the environment on every
    call while no provider is set, so "no SDK" is believed for ``NO_SDK_RECHECK_S``. A global
    provider, once set, cannot be replaced, so the positive answer is kept for good.
    """
    global _no_sdk_at, _sdk_seen
    if _sdk_seen:
        return True
    now = time.monotonic()
    if _no_sdk_at is not None and now - _no_sdk_at < NO_SDK_RECHECK_S:
        return False
    if otel_available():
        from opentelemetry import trace

        _sdk_seen = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    _no_sdk_at = None if _sdk_seen else now
    return _sdk_seen


@contextlib.contextmanager
def consumer_span(
    name: str,
    headers: Mapping[str, str],
    *,
    attributes: Attributes = None,
    tracer_provider: TracerProvider | None = None,
) -> Iterator[Span | None]:
    """Run the block in a CONSUMER span, child of the trace context in ``headers``.

    Without a valid ``traceparent`` the span parents on the current context. Yields the span,
    or None (doing nothing) when OpenTelemetry is not installed. An exception in the block is
    recorded on the span and propagates. ``tracer_provider`` defaults to the global one.
    """
    if not otel_available():
        yield None
        return
    from opentelemetry import trace

    if tracer_provider is None and isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    ):
        # No SDK configured in this process: every span would be a no-op; skip the work.
        yield None
        return
    parent = extract_parent(headers)
    context = None
    if parent is not None:
        remote = trace.SpanContext(
            trace_id=int(parent.trace_id, 16),
            span_id=int(parent.span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(parent.flags),
        )
        context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
    with tracer.start_as_current_span(
        name, context=context, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the current OpenTelemetry span, to inject into new events.

    None when OpenTelemetry is not installed or no valid span is current.
    """
    if not otel_available():
        return None
    from opentelemetry import trace

    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"
