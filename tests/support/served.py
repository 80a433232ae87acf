"""A real uvicorn server for an app, on a free loopback port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI

from aigc_hub.settings import API_KEEP_ALIVE_S


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve(app: FastAPI, *, start_timeout: float = 10.0) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 for the block; yields its base URL.

    Open streams get one second after the block before the server cancels them.
    """
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=free_port(),
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=API_KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(start_timeout):
            while not server.started:
                if task.done():
                    task.result()  # raises why it could not start
                    raise RuntimeError("uvicorn stopped before it started")
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task
