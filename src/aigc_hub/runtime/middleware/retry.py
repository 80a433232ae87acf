"""Retry middleware: in-process retries with back-off; ``Retry(delay)`` is flow control.

Only a fresh delivery gets in-process retries (seed 000: 1 s, 2 s, 4 s, at most 3); a delayed
redelivery runs once and, if it fails, goes back to the dead-letter middleware, which parks
it again or dead-letters it. Every wait uses the clock seam, so tests never sleep.
"""

from __future__ import annotations

from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import Retry
from aigc_hub.core.retry import RetryPolicy
from aigc_hub.observability import metrics
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.runtime.middleware import Next

#: A ``Retry`` asking for a longer wait than this parks the key instead of holding a slot.
MAX_INLINE_DEFER_S = 30.0


class RetryInProcess:
    """Retry failing runs of one delivery according to ``policy``."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    async def __call__(
        self, call_next: Next, envelope: Envelope, ctx: HandlerContext
    ) -> list[Envelope]:
        """Run the rest of the chain until it succeeds or the policy gives up (then re-raise)."""
        failures = 0
        while True:
            try:
                return await call_next(envelope, ctx)
            except Retry as flow:
                if flow.delay > MAX_INLINE_DEFER_S:
                    raise
                ctx.deferrals += 1
                await ctx.clock.sleep(flow.delay)
            except Exception as exc:
                ctx.note_failure(exc)
                failures += 1
                decision = self.policy.decide(exc, failures) if ctx.fresh else None
                if decision is None:
                    raise
                metrics.RETRIES.labels(ctx.consumer, "in_process").inc()
                await ctx.clock.sleep(decision.delay)
            ctx.attempt += 1
