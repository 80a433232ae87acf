"""Group commit: many finished events' short transactions become one database commit.

Each submitted :class:`Outcome` carries an inbox mark, the handler's staged writes and the
events it emits. The committer gathers up to ``max_batch`` outcomes (waiting at most
``max_wait`` seconds after the first), then in ONE transaction: marks the inbox for all of
them in one statement, runs each fresh outcome's writes inside its own SAVEPOINT (a failing
one rolls back alone and its mark is removed; the others commit), and inserts every emitted
event into the outbox in one statement. Duplicates (mark already present) apply nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import Executable

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import RetryableError
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.observability import metrics
from aigc_hub.reliability import inbox
from aigc_hub.reliability.outbox import OutboxWriter, Routed
from aigc_hub.runtime.context import RowInsert, Write

log = logging.getLogger(__name__)

#: Bookkeeping that runs in the commit transaction whether or not the event was a duplicate.
Always = Callable[[AsyncConnection], Awaitable[None]]


class CommitStatus(enum.Enum):
    """What the commit did with an outcome."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"


@dataclass
class Outcome:
    """One event's result, to be committed atomically with its inbox mark."""

    consumer: str
    event_id: str
    writes: Sequence[Write] = ()
    emits: Sequence[Envelope | Routed] = ()
    #: Stored in the inbox mark's ``result_code`` (APPLIED or NO_OP).
    result_code: HandlingOutcome = HandlingOutcome.APPLIED
    always: Sequence[Always] = ()
    future: asyncio.Future[CommitStatus] | None = field(default=None, repr=False)


class _WriteFailed(Exception):
    """An outcome's writes failed during an optimistic (savepoint-free) batch."""


class CommitFailed(RetryableError):
    """The group commit transaction failed; the outcome was not applied."""


class Committer:
    """Batches outcomes into few transactions; ``submit`` returns once the outcome is durable."""

    def __init__(
        self,
        engine: AsyncEngine,
        outbox: OutboxWriter,
        clock: Clock,
        *,
        max_batch: int = 256,
        max_wait: float = 0.002,
        on_emitted: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.outbox = outbox
        self.clock = clock
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.on_emitted = on_emitted
        self._pending: list[Outcome] = []
        #: Set when the first outcome arrives and when a batch is full.
        self._arrived = asyncio.Event()
        #: Set while nothing is pending or being committed (what close() waits for).
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0

    async def submit(self, outcome: Outcome) -> CommitStatus:
        """Queue ``outcome`` for the next group commit and wait for its result.

        Raises the exception of the outcome's own writes (rolled back alone), or
        :class:`CommitFailed` when the whole transaction failed.
        """
        self._ensure_running()
        future: asyncio.Future[CommitStatus] = asyncio.get_running_loop().create_future()
        outcome.future = future
        pending = self._pending
        pending.append(outcome)
        if len(pending) == 1 or len(pending) >= self.max_batch:
            self._arrived.set()
        self._idle.clear()
        return await future

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="committer")

    async def close(self) -> None:
        """Stop after committing what is queued."""
        if self._task is not None:
            await self._idle.wait()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        last_size = 1
        while True:
            if not self._pending:
                self._idle.set()
                self._arrived.clear()
                await self._arrived.wait()
                continue
            # Adaptive, like Nagle: under light load (last batch was a single outcome) commit
            # at once; under load wait up to max_wait after the first so a batch can fill.
            # Outcomes queue in a list and a timer bounds the wait: no task per wait.
            if last_size > 1 and len(self._pending) < self.max_batch:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.max_wait):
                        while len(self._pending) < self.max_batch:
                            self._arrived.clear()
                            await self._arrived.wait()
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            await self._commit(batch)
            last_size = len(batch)

    async def _commit(self, batch: list[Outcome]) -> None:
        results: dict[int, CommitStatus | BaseException] = {}
        emitted = False
        try:
            try:
                # Optimistic: no savepoints. Almost every batch commits this way.
                async with self.engine.begin() as conn:
                    emitted = await self._apply(conn, batch, results, isolate=False)
            except _WriteFailed:
                # One outcome's writes failed: redo the batch isolating each in a savepoint,
                # so only that outcome rolls back and the others still commit.
                results.clear()
                async with self.engine.begin() as conn:
                    emitted = await self._apply(conn, batch, results, isolate=True)
        except Exception as exc:
            log.warning("group commit of %d outcomes failed: %r", len(batch), exc)
            failure = CommitFailed(f"commit failed: {type(exc).__name__}: {exc}")
            results = {i: failure for i in range(len(batch))}
            emitted = False
        self.commits += 1
        metrics.COMMIT_BATCH.observe(len(batch))
        if emitted and self.on_emitted is not None:
            self.on_emitted()
        for i, outcome in enumerate(batch):
            fut = outcome.future
            if fut is None or fut.done():
                continue
            result = results[i]
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    async def _apply(
        self,
        conn: AsyncConnection,
        batch: list[Outcome],
        results: dict[int, CommitStatus | BaseException],
        *,
        isolate: bool,
    ) -> bool:
        now = self.clock.now_ms()
        fresh: set[tuple[str, str]] = set()
        by_consumer: dict[str, dict[str, str]] = {}
        for o in batch:
            # A second copy in the same batch is a duplicate: the first one's code is stored.
            by_consumer.setdefault(o.consumer, {}).setdefault(o.event_id, o.result_code)
        for consumer, codes in by_consumer.items():
            marked = await inbox.mark(conn, consumer, list(codes), now, codes)
            fresh |= {(consumer, e) for e in marked}
        emits: list[Envelope | Routed] = []
        bulk: dict[tuple[object, ...], tuple[RowInsert, list[dict[str, object]]]] = {}
        for i, o in enumerate(batch):
            for hook in o.always:
                await hook(conn)
            key = (o.consumer, o.event_id)
            if key not in fresh:
                results[i] = CommitStatus.DUPLICATE
                continue
            fresh.discard(key)  # a second copy in the same batch is a duplicate
            if not o.writes:
                emits.extend(o.emits)
                results[i] = CommitStatus.APPLIED
                continue
            if not isolate and all(isinstance(w, RowInsert) for w in o.writes):
                for w in o.writes:
                    assert isinstance(w, RowInsert)
                    shape = (w.table.name, w.ignore_conflict, tuple(sorted(w.values)))
                    bulk.setdefault(shape, (w, []))[1].append(dict(w.values))
                extra = []
            elif not isolate:
                try:
                    extra = await _run_writes(conn, o.writes)
                except Exception as exc:
                    raise _WriteFailed from exc
            else:
                try:
                    async with conn.begin_nested():
                        extra = await _run_writes(conn, o.writes)
                except Exception as exc:  # the outcome's own failure; the others go on
                    await inbox.unmark(conn, o.consumer, o.event_id)
                    results[i] = exc
                    continue
            emits.extend(o.emits)
            emits.extend(extra)
            results[i] = CommitStatus.APPLIED
        for first, rows in bulk.values():
            try:
                await conn.execute(first.statement(conn), rows)
            except Exception as exc:
                raise _WriteFailed from exc
        await self.outbox.add(conn, emits)
        return bool(emits)


async def _run_writes(conn: AsyncConnection, writes: Sequence[Write]) -> list[Envelope | Routed]:
    extra: list[Envelope | Routed] = []
    for change in writes:
        if isinstance(change, RowInsert):
            await conn.execute(change.statement(conn), [dict(change.values)])
        elif isinstance(change, Executable):
            await conn.execute(change)
        else:
            more = await change(conn)
            if more:
                extra.extend(more)
    return extra
