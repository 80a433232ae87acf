"""Where a failed record goes: parked for delayed redelivery, or the dead-letter queue.

``PermanentError`` goes to the DLQ at once. Anything else is parked as the head of its key
with the delayed policy's next due time (seed 002: 1 min doubling, 8 h cap, ±20 %, at most
7); when that policy gives up too, the record is dead-lettered with its reason headers and
the key's next parked record is released.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError, Retry
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.core.retry import RetryDecision, RetryPolicy
from aigc_hub.observability import metrics
from aigc_hub.pipeline import DeadLetterHook
from aigc_hub.reliability.dlq import DeadLetterDraft, DeadLetterStore
from aigc_hub.reliability.redelivery import ParkRequest, RedeliveryStore
from aigc_hub.runtime.context import HandlerContext

log = logging.getLogger(__name__)

#: The outcome of a redelivered copy that another run settled first (nothing was written).
STALE = HandlingOutcome.STALE


class FailureRouter:
    """Parks or dead-letters records whose handling failed for good in this delivery."""

    def __init__(
        self,
        engine: AsyncEngine,
        dlq: DeadLetterStore,
        redeliveries: RedeliveryStore,
        clock: Clock,
        delayed: RetryPolicy,
        *,
        on_parked: Callable[[str], None],
        on_released: Callable[[str], None],
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        self.engine = engine
        self.dlq = dlq
        self.redeliveries = redeliveries
        self.clock = clock
        self.delayed = delayed
        self.on_parked = on_parked
        self.on_released = on_released
        self.on_dead_letter = on_dead_letter

    async def give_up(
        self, ctx: HandlerContext, envelope: Envelope | None, error: BaseException
    ) -> HandlingOutcome:
        """Park or dead-letter ``ctx.record``: PARKED, RESCHEDULED, DEAD_LETTERED or STALE."""
        now = self.clock.now_ms()
        if not ctx.failures or ctx.failures[-1]["error_message"] != str(error)[:500]:
            ctx.note_failure(error)
        record = ctx.record
        head = ctx.redelivery
        key = envelope.key if envelope else (record.key or "")
        # redeliveries performed so far, this run included when it was one
        performed = (head.redeliveries if head else 0) + (0 if ctx.fresh else 1)
        next_try: RetryDecision | None
        if isinstance(error, Retry):  # flow control: wait as asked, count nothing
            next_try = RetryDecision(error.delay, performed)
            performed = head.redeliveries if head else 0
        elif isinstance(error, PermanentError):
            next_try = None
        else:
            next_try = self.delayed.decide(error, performed + 1)
        history = [*(head.history if head else []), *ctx.failures]
        first = int(history[0]["at"]) if history else now
        attempts = (head.attempts if head else 0) + ctx.attempt
        if next_try is not None:
            due_at = now + int(next_try.delay * 1000)
            async with self.engine.begin() as conn:
                if head is None:
                    await self.redeliveries.park(
                        conn,
                        ParkRequest(
                            consumer=ctx.consumer,
                            key=key,
                            event_id=envelope.event_id if envelope else None,
                            topic=record.topic,
                            partition=record.partition,
                            offset=record.offset,
                            value=record.value,
                            headers=record.headers,
                            attempts=attempts,
                            due_at=due_at,
                            error_class=type(error).__name__,
                            error_message=str(error),
                            first_failure_at=first,
                            last_failure_at=now,
                            history=history,
                        ),
                    )
                elif not await self.redeliveries.reschedule(
                    conn,
                    head,
                    due_at=due_at,
                    attempts=attempts,
                    redeliveries=performed,
                    error_class=type(error).__name__,
                    error_message=str(error),
                    first_failure_at=first,
                    last_failure_at=now,
                    history=history,
                ):
                    return STALE
            metrics.RETRIES.labels(ctx.consumer, "delayed").inc()
            self.on_parked(key)
            return HandlingOutcome.PARKED if head is None else HandlingOutcome.RESCHEDULED

        draft = DeadLetterDraft(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            consumer=ctx.consumer,
            pipeline=ctx.pipeline,
            value=_replayable(record.value, envelope),
            headers=record.headers,
            error_class=type(error).__name__,
            error_message=str(error),
            attempts=attempts,
            first_failure_at=first,
            last_failure_at=now,
            envelope=envelope,
            history=history,
        )
        still_parked: bool | None = False
        async with self.engine.begin() as conn:
            if head is not None:
                still_parked = await self.redeliveries.finish_head(conn, head, now)
                if still_parked is None:
                    return STALE  # another run settled this head: no second dead letter
            await self.dlq.add(conn, draft)
            if self.on_dead_letter is not None and envelope is not None:
                await self.on_dead_letter(conn, envelope, error)
        metrics.DEAD_LETTERS.labels(ctx.consumer, record.topic, type(error).__name__).inc()
        log.warning(
            "dead-lettered %s/%s@%s for %s after %d attempts: %s",
            record.topic,
            record.partition,
            record.offset,
            ctx.consumer,
            attempts,
            error,
        )
        if head is not None and not still_parked:
            self.on_released(key)
        elif head is not None:
            self.on_parked(key)
        return HandlingOutcome.DEAD_LETTERED


def _replayable(value: bytes, envelope: Envelope | None) -> bytes:
    """What a dead letter keeps: the record's bytes as sent, except a record decoded from
    another wire format (Avro from an outside producer) keeps its envelope as JSON, so the
    dead-letter store (which reads JSON envelopes only) can replay it after a fix."""
    if envelope is not None and not value.lstrip().startswith(b"{"):
        return envelope.to_bytes()
    return value
