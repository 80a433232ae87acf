"""What a handler gets besides its envelope: the record, the payload, and a place for writes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import Executable

from aigc_hub.core.clock import Clock
from aigc_hub.core.envelope import Envelope
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


@dataclass
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
    result_code: str = "ok"
    redelivery: Parked | None = None
    deferrals: int = 0
    #: The hub running this consumer (pipelines find their per-hub state on it); None in
    #: handler unit tests that build a context by hand.
    hub: Any = None

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
