"""A raw server-sent-events reader for tests: frames with their comments, nothing hidden."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Frame:
    """One SSE frame (lines up to a blank line): fields and comment lines."""

    event: str | None = None
    id: str | None = None
    data: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        """``data`` parsed as JSON."""
        assert self.data is not None
        return json.loads(self.data)


class FrameReader:
    """Reads frames from a streaming httpx response.

    A task pumps lines into a queue, so a timed-out wait never cancels (and so ends) the
    response's line iterator. Close it with :meth:`aclose` or by closing the response.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._pump = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for line in self.response.aiter_lines():
                self._queue.put_nowait(line)
        except httpx.HTTPError:
            pass
        finally:
            self._queue.put_nowait(None)

    async def aclose(self) -> None:
        """Stop the pump."""
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump

    async def next(self, timeout: float = 10.0) -> Frame:
        """The next frame; TimeoutError when none completes in time, EOFError at the end."""
        frame = Frame()
        async with asyncio.timeout(timeout):
            while (line := await self._queue.get()) is not None:
                if line == "":
                    return frame
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "":
                    frame.comments.append(value)
                elif name == "data":
                    frame.data = value if frame.data is None else f"{frame.data}\n{value}"
                elif name == "event":
                    frame.event = value
                elif name == "id":
                    frame.id = value
                elif name == "retry":
                    frame.retry = int(value)
        self._queue.put_nowait(None)  # stay at the end for later calls
        raise EOFError("the stream ended")

    async def next_event(self, timeout: float = 10.0) -> Frame:
        """The next frame that is an event (skips heartbeat and other comment frames)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = await self.next(max(0.0, deadline - loop.time()))
            if frame.event is not None or frame.data is not None:
                return frame

    async def events_within(self, seconds: float) -> list[Frame]:
        """Every event frame that arrives within ``seconds`` (the stream may stay open)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        found: list[Frame] = []
        while (left := deadline - loop.time()) > 0:
            try:
                found.append(await self.next_event(left))
            except (TimeoutError, EOFError):
                break
        return found
