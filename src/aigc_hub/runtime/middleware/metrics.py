"""Metrics middleware: duration of every run and its errors, by consumer group."""

from __future__ import annotations

import time

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.observability import metrics
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next


class Metrics:
    """Observe handler duration and count errors per class."""

    def __init__(self) -> None:
        self._seconds = metrics.Children(metrics.HANDLER_SECONDS)

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Time the rest of the chain."""
        started = time.perf_counter()
        try:
            return await call_next(envelope, ctx)
        except Retry:
            raise
        except Exception as exc:
            metrics.HANDLER_ERRORS.labels(ctx.consumer, type(exc).__name__).inc()
            raise
        finally:
            self._seconds(ctx.consumer).observe(time.perf_counter() - started)
