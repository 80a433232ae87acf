"""Dead-letter middleware: a run that still fails is parked for later or dead-lettered."""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.failures import FailureRouter
from aigc_hub.runtime.middleware import Next


class DeadLetter:
    """Catch what the inner middleware gave up on and hand it to the :class:`FailureRouter`."""

    def __init__(self, router: FailureRouter) -> None:
        self.router = router

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Run the chain; on failure park or dead-letter the record and report no events."""
        try:
            return await call_next(envelope, ctx)
        except Exception as exc:
            ctx.outcome = await self.router.give_up(ctx, envelope, exc)
            return []
