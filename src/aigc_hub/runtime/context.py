"""What a handler gets besides its envelope: the record, the payload, and a place for writes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import Executable

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.outcomes import HandlingOutcome
from aigc_hub.messaging.base import Record
from aigc_hub.reliability.outbox import Routed
from aigc_hub.reliability.redelivery import Parked
from aigc_hub.store.dialects import dialect_of
from aigc_hub.store.engine import reader


@dataclass(frozen=True)
class RowInsert:
    """Insert one row; the committer sends many of these as one executemany per table."""

    table: sa.Table
    values: Mapping[str, Any]
    ignore_conflict: bool = False

    def statement(self, conn: AsyncConnection) -> Any:
        """The INSERT (``ON CONFLICT DO NOTHING`` when asked) without values."""
        if self.ignore_conflict:
            return dialect_of(conn).insert(self.table).on_conflict_do_nothing()
        return self.table.insert()


#: A fact change run inside the runtime's transaction: a row insert, a statement, or a
#: function of the connection that may return more events (e.g. only if a transition won).
Write = (
    RowInsert | Executable | Callable[[AsyncConnection], Awaitable[list[Envelope | Routed] | None]]
)

M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")


class Checkpoint(Protocol):
    """Runs ``fn(conn)`` now in its own short transaction (see :func:`checkpoint`)."""

    async def __call__(self, reason: str, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Commit what ``fn`` writes before returning its result."""
        ...


async def checkpoint(
    engine: AsyncEngine,
    reason: str,
    fn: Callable[[AsyncConnection], Awaitable[T]],
    *,
    committed: Callable[[], None] | None = None,
) -> T:
    """Run ``fn(conn)`` in its own transaction and commit it now; ``committed`` runs after.

    The one exception to "a handler changes facts only by staged writes and returned
    events": an intent that must be durable *before* an outside call (a provider submit,
    a slot lease), so that a crash or a redelivery after the call can tell it may have
    happened. ``reason`` says which intent; it must not be empty. Everything else a handler
    changes is staged and commits atomically with its inbox mark.
    """
    if not reason.strip():
        raise ValueError("a checkpoint must say why it cannot wait for the commit")
    async with engine.begin() as conn:
        result = await fn(conn)
    if committed is not None:
        committed()  # e.g. wake the relay: the checkpoint may have written outbox rows
    return result


@dataclass(slots=True)
class HandlerContext:
    """Per-delivery context. Writes staged here commit with the inbox mark, atomically."""

    consumer: str
    pipeline: str
    record: Record
    engine: AsyncEngine
    clock: Clock
    payload: pydantic.BaseModel | None = None
    attempt: int = 1
    writes: list[Write] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: How the runtime finished with the record (set after the commit or the give-up).
    outcome: HandlingOutcome | None = None
    redelivery: Parked | None = None
    deferrals: int = 0
    #: Run after a checkpoint commits (the runtime wakes the relay there); None in unit tests.
    on_checkpoint: Callable[[], None] | None = None
    #: Checkpoints committed during this delivery (their changes count as applied).
    checkpoints: int = 0

    @property
    def fresh(self) -> bool:
        """True for a first delivery (or a parked record never tried): in-process retries apply."""
        return self.redelivery is None or self.redelivery.attempts == 0

    def write(self, change: Write) -> None:
        """Stage a fact change; it runs in the commit transaction, after the inbox mark."""
        self.writes.append(change)

    def insert(self, table: sa.Table, *, ignore_conflict: bool = False, **values: Any) -> None:
        """Stage a one-row insert (batched with other events' inserts into the same table)."""
        self.writes.append(RowInsert(table, values, ignore_conflict))

    async def checkpoint(self, reason: str, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Commit ``fn(conn)`` now, before an outside call; the only write outside the staging.

        See :func:`checkpoint`: use it solely to record an intent that must survive a crash
        during the outside call that follows; stage every other change with :meth:`write`.
        """
        result = await checkpoint(self.engine, reason, fn, committed=self.on_checkpoint)
        self.checkpoints += 1
        return result

    def payload_as(self, model: type[M]) -> M:
        """The validated payload as ``model``; TypeError if the registry decoded another type."""
        if not isinstance(self.payload, model):
            raise TypeError(f"payload is {type(self.payload).__name__}, not {model.__name__}")
        return self.payload

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only connection for the handler's look-ups (never holds the write lock)."""
        async with reader(self.engine) as conn:
            yield conn

    def note_failure(self, error: BaseException) -> None:
        """Remember a failed try for the dead-letter history."""
        self.failures.append(
            {
                "at": self.clock.now_ms(),
                "attempt": self.attempt,
                "error_class": type(error).__name__,
                "error_message": str(error)[:500],
            }
        )
