"""One database transaction per business action, with work deferred until it commits."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncTransaction


class UnitOfWork:
    """``async with UnitOfWork(engine) as uow:`` — one transaction on ``uow.conn``.

    Commits when the block exits normally and rolls back when it raises (cancellation
    included). Callbacks registered with :meth:`on_commit` run, in order, only after the
    commit succeeded; none runs after a rollback or a failed commit. Single use, one task.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._tx: AsyncTransaction | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._used = False

    @property
    def conn(self) -> AsyncConnection:
        """The connection of the open transaction (only inside the ``async with`` block)."""
        if self._conn is None:
            raise RuntimeError("UnitOfWork.conn is only available inside 'async with'")
        return self._conn

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` after the transaction commits; dropped if it rolls back."""
        self._callbacks.append(callback)

    async def __aenter__(self) -> UnitOfWork:
        if self._used:
            raise RuntimeError("a UnitOfWork is single-use: create a new one")
        self._used = True
        conn = await self._engine.connect()
        try:
            self._tx = await conn.begin()
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, tx, self._conn, self._tx = self._conn, self._tx, None, None
        assert conn is not None and tx is not None
        try:
            if exc_type is not None:
                await tx.rollback()
                return
            await tx.commit()
        finally:
            await conn.close()
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        # The commit stands whatever a callback does: run them all, then re-raise the first error.
        callbacks, self._callbacks = self._callbacks, []
        first_error: Exception | None = None
        for callback in callbacks:
            try:
                callback()
            except Exception as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
