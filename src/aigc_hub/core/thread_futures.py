"""Waiting on a worker thread's future from asyncio, with a deadline, without cancelling it
for the other waiters.

A model loaded once on a worker thread is awaited by every caller that arrives while it
loads. ``asyncio.wrap_future`` would pass one waiter's timeout (or cancellation) on to the
shared future and fail every other waiter with ``CancelledError``; here a waiter that gives
up only stops listening.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_shared(
    work: concurrent.futures.Future[T],
    timeout_s: float,
    unavailable: Callable[[str], Exception],
) -> T:
    """``work``'s result, or its exception; ``unavailable(why)`` raised when it was cancelled
    or is not done within ``timeout_s`` (the future itself runs on). ``why`` reads after
    the step's name: "was cancelled", "took longer than 10 s"."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()

    def copy(done: concurrent.futures.Future[T]) -> None:
        if waiter.done():
            return
        if done.cancelled():
            waiter.set_exception(unavailable("was cancelled"))
        elif (exc := done.exception()) is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(done.result())

    def relay(done: concurrent.futures.Future[T]) -> None:
        # The waiter's loop may be gone by the time a slow step ends; nobody listens then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(copy, done)

    work.add_done_callback(relay)
    try:
        # asyncio.timeout, not wait_for: the deadline must not swallow an outer cancellation.
        async with asyncio.timeout(timeout_s):
            return await waiter
    except TimeoutError:
        raise unavailable(f"took longer than {timeout_s:g} s") from None
