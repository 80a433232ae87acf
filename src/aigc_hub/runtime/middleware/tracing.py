"""Tracing middleware: each run is a consumer span under the producer's trace, and every log
line written during it carries the event's ids (trace id, event id, consumer)."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.observability import logging as hub_logging
from aigc_hub.observability import tracing
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next


class Tracing:
    """Open a consumer span (a no-op without OpenTelemetry) and bind the event to the logs."""

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Run the rest of the chain inside the span and the log binding."""
        with (
            tracing.consumer_span(
                f"{ctx.record.topic} process",
                ctx.record.headers,
                attributes={"messaging.consumer.group.name": ctx.consumer},
            ),
            hub_logging.bind_event(envelope, consumer=ctx.consumer),
        ):
            return await call_next(envelope, ctx)
