"""Tracing middleware: each run is a consumer span under the producer's trace, and every log
line written during it carries the event's ids (trace id, event id, consumer)."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.observability import logging as hub_logging
from aigc_hub.observability import tracing
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next


class Tracing:
    """Open a consumer span (only when an OpenTelemetry SDK is set) and bind the event to the
    logs (computed only if a line is logged), so the common no-SDK path costs two context
    variable writes per event."""

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Run the rest of the chain inside the span and the log binding."""
        token = hub_logging.enter_event(envelope, ctx.consumer)
        try:
            if not tracing.sdk_configured():
                return await call_next(envelope, ctx)
            with tracing.consumer_span(
                f"{ctx.record.topic} process",
                ctx.record.headers,
                attributes={"messaging.consumer.group.name": ctx.consumer},
            ):
                return await call_next(envelope, ctx)
        finally:
            hub_logging.leave_event(token)
