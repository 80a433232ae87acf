"""Grouped service calls: concurrent callers' short write transactions share one commit.

A service call that only touches the database (its rows and their outbox rows; no network
call, no file, nothing outside the transaction) can run through :class:`GroupedCalls`. Calls
that arrive while a group is running wait for the next group; each group runs every call in
ONE transaction. First optimistically, with no savepoints; when a call raises, the group is
rolled back, the failing call gets its exception (it ran after the calls before it, as in any
order of the group), and the other calls run again, each inside its own SAVEPOINT, so only a
call that fails rolls back. A call therefore may run twice: its work must be a function of
the connection alone.

Rows a call inserts through :func:`insert_rows` (the outbox writer does) are collected during
the optimistic run and inserted at its end, one statement per table for the whole group; a
call must not read back such rows inside its work.

Each caller returns only after its group committed, so a returned call is as durable as one
with its own transaction. What grouping saves is the BEGIN and COMMIT per call: on SQLite the
writer lock and a WAL sync each, on PostgreSQL a round trip and a WAL flush each. Batches
form on their own, without a timer: under light load a group holds one call and adds no
wait; under load, everything that arrived while the previous group ran.

Like any commit, a caller cancelled while it waits may still have its work committed.
Never call :meth:`GroupedCalls.run` from inside a work: it would wait for its own group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from aigc_hub.observability import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A service call's database work; it may run twice (see the module docstring).
Work = Callable[[AsyncConnection], Awaitable[T]]


#: ``conn.info`` key of the rows staged by the calls of an optimistic group run.
_STAGED = "aigc_hub.grouped.staged"

# Built once per table: constructing an Insert costs more than looking it up.
_inserts: dict[sa.Table, sa.Insert] = {}


async def insert_rows(conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table`` in ``conn``'s transaction: at once, or, inside a grouped
    call, together with the group's other rows of ``table`` when the group's calls are done."""
    staged: dict[sa.Table, list[dict[str, Any]]] | None = conn.info.get(_STAGED)
    if staged is not None:
        staged.setdefault(table, []).extend(rows)
        return
    statement = _inserts.get(table)
    if statement is None:
        statement = _inserts[table] = table.insert()
    await conn.execute(statement, rows)


class _CallFailed(Exception):
    """The optimistic run failed: in call ``index``, or (``None``) inserting the staged rows."""

    def __init__(self, index: int | None, error: Exception) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


@dataclass
class _Call:
    work: Work[Any]
    future: asyncio.Future[Any]


class GroupedCalls:
    """Runs service calls in shared transactions; ``run`` returns once its call committed."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_batch: int = 64,
        max_groups: int = 1,
        after_commit: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.max_batch = max_batch
        #: Groups in flight at once: 1 where the database has one writer (SQLite); a few
        #: where transactions run side by side (PostgreSQL).
        self.max_groups = max_groups
        self.after_commit = after_commit
        self._pending: list[_Call] = []
        self._running = 0
        # The loop keeps only weak references to tasks: the runners are held here.
        self._runners: set[asyncio.Task[None]] = set()
        self.groups = 0

    async def run(self, work: Work[T]) -> T:
        """Run ``work(conn)`` in the next group's transaction and return its result.

        Raises what ``work`` raised (its own writes rolled back alone), or what the group's
        BEGIN or COMMIT raised (nothing of the group was written).
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append(_Call(work, future))
        if self._running < self.max_groups:
            # The runner takes the batch when it starts, one loop turn later: the callers
            # ready in this turn join it.
            self._running += 1
            runner = asyncio.get_running_loop().create_task(self._runner(), name="grouped-calls")
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)
        return await future

    async def _runner(self) -> None:
        try:
            while self._pending:
                batch = [c for c in self._pending[: self.max_batch] if not c.future.done()]
                del self._pending[: self.max_batch]
                if batch:
                    await self._commit(batch)
        finally:
            self._running -= 1

    async def _commit(self, batch: list[_Call]) -> None:
        results: dict[int, tuple[bool, Any]] = {}
        try:
            try:
                async with self.engine.begin() as conn:
                    results = dict(enumerate(await _run_optimistic(conn, batch)))
            except _CallFailed as failed:
                # The failing call's error is its answer: it ran once, after the calls before
                # it, as it would in a redo. The others run again, each in its own savepoint.
                results = {} if failed.index is None else {failed.index: (False, failed.error)}
                rest = [i for i in range(len(batch)) if i not in results]
                if rest:
                    async with self.engine.begin() as conn:
                        for i in rest:
                            results[i] = await _run_isolated(conn, batch[i])
        except Exception as exc:
            # BEGIN or COMMIT failed: no call of the group was written.
            log.warning("grouped commit of %d service calls failed: %r", len(batch), exc)
            results = {i: (False, exc) for i in range(len(batch))}
        except BaseException as exc:
            # A crash (a failpoint's) or a cancellation ends the group unwritten, as the
            # process's end would; its callers see it. A crash leaves the runner serving.
            cancelled = isinstance(exc, asyncio.CancelledError)
            for call in batch:
                if call.future.done():
                    continue
                if cancelled:
                    call.future.cancel()
                else:
                    call.future.set_exception(exc)
            if cancelled:
                raise
            return
        self.groups += 1
        metrics.GROUPED_CALLS.observe(len(batch))
        if self.after_commit is not None and any(ok for ok, _ in results.values()):
            self.after_commit()
        for i, call in enumerate(batch):
            ok, value = results[i]
            if call.future.done():
                continue
            if ok:
                call.future.set_result(value)
            else:
                call.future.set_exception(value)


async def _run_isolated(conn: AsyncConnection, call: _Call) -> tuple[bool, Any]:
    try:
        async with conn.begin_nested():
            return True, await call.work(conn)
    except Exception as exc:  # this call's own failure; the others go on
        return False, exc


async def _run_optimistic(conn: AsyncConnection, batch: list[_Call]) -> list[tuple[bool, Any]]:
    # The staging dict lives on the pooled connection: always taken off again.
    staged: dict[sa.Table, list[dict[str, Any]]] = {}
    conn.info[_STAGED] = staged
    try:
        results: list[tuple[bool, Any]] = []
        for i, call in enumerate(batch):
            try:
                results.append((True, await call.work(conn)))
            except Exception as exc:
                raise _CallFailed(i, exc) from exc
    finally:
        del conn.info[_STAGED]
    try:
        for table, rows in staged.items():
            await insert_rows(conn, table, rows)
    except Exception as exc:  # e.g. a duplicate key: the isolated run finds whose
        raise _CallFailed(None, exc) from exc
    return results
