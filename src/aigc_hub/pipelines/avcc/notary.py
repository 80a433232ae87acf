"""chain-svc's batching: statements handled at the same time share one chain transaction.

Each ``avcc-chain`` handler submits its work's statement and waits for its place. Statements
gather while the previous batch is on its way; a batch leaves when one of them is urgent (an
O-level work: the seed's seconds-level fast path), when it is full, or when the oldest has
waited ``window_s``. One batch at a time per process: the chain's own ordering (the log's
serialized appends, the account's nonces) makes more pointless.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from .adapters.base import Chain, Notarized
from .statements import Statement


@dataclass
class _Waiting:
    statement: Statement
    done: asyncio.Future[Notarized]
    #: The loop's time when it arrived: the window counts from the oldest waiter's arrival.
    arrived: float = field(default_factory=lambda: asyncio.get_running_loop().time())


@dataclass
class Notary:
    """Submits statements to ``chain`` in batches (see the module docstring)."""

    chain: Chain
    window_s: float
    max_batch: int
    batches: int = 0
    _waiting: list[_Waiting] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: asyncio.Task[None] | None = None

    async def notarize(self, statement: Statement) -> Notarized:
        """The statement's place on the chain, once its batch is confirmed."""
        done: asyncio.Future[Notarized] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(statement, done))
        if statement.urgent or len(self._waiting) >= self.max_batch:
            self._wake.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="avcc-notary")
        return await done

    async def _run(self) -> None:
        while self._waiting:
            if not self._wake.is_set():
                waited = asyncio.get_running_loop().time() - self._waiting[0].arrived
                # A timeout here is the batch window closing, not a failure.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.0, self.window_s - waited))
            self._wake.clear()
            batch = self._waiting[: self.max_batch]
            del self._waiting[: self.max_batch]
            if any(w.statement.urgent for w in self._waiting) or len(self._waiting) >= (
                self.max_batch
            ):
                self._wake.set()
            await self._submit(batch)

    async def _submit(self, batch: list[_Waiting]) -> None:
        live = [w for w in batch if not w.done.cancelled()]
        if not live:
            return
        self.batches += 1
        try:
            placed = await self.chain.notarize([w.statement for w in live])
        except Exception as exc:  # every waiter gets the failure; its handler retries
            for w in live:
                if not w.done.done():
                    w.done.set_exception(exc)
            return
        for w, place in zip(live, placed, strict=True):
            if not w.done.done():
                w.done.set_result(place)

    async def close(self) -> None:
        """Stop the batch loop (waiters still pending are cancelled)."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for w in self._waiting:
            w.done.cancel()
        self._waiting.clear()
