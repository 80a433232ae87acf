"""Timeout middleware: a handler run that takes too long fails as retryable."""

from __future__ import annotations

import asyncio

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import RetryableError
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next


class HandlerTimeout(RetryableError):
    """The handler did not finish within its timeout."""


class Timeout:
    """Cancel a run after ``seconds`` (None = no limit) and raise :class:`HandlerTimeout`."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Run the rest of the chain under the time limit."""
        if self.seconds is None:
            return await call_next(envelope, ctx)
        # asyncio.timeout runs the chain in this task; wait_for would start a task per event.
        try:
            async with asyncio.timeout(self.seconds):
                return await call_next(envelope, ctx)
        except TimeoutError:
            raise HandlerTimeout(f"handler took longer than {self.seconds:g}s") from None
