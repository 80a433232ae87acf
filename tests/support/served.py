"""A real uvicorn server for an app, on a free loopback port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx
import uvicorn
from fastapi import FastAPI

from aigc_hub.bootstrap import Hub
from aigc_hub.settings import API_KEEP_ALIVE_S
from aigc_hub.tenancy import create_admin_key, create_tenant


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


class ServedHub:
    """A started hub whose API is served at ``api_url``: keys for it and clients of it.

    Test stacks (avcc, documents) derive from it and add their pipeline's state."""

    hub: Hub
    api_url: str

    async def tenant(self, name: str) -> str:
        """A new tenant's API key."""
        _tenant, key = await create_tenant(self.hub.engine, name)
        return key

    async def admin(self) -> str:
        """A new admin key."""
        return await create_admin_key(self.hub.engine)

    def client(self, key: str | None = None, timeout_s: float = 60.0) -> httpx.AsyncClient:
        """An HTTP client of the API, with ``key`` when given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(
            base_url=self.api_url, headers=headers, trust_env=False, timeout=timeout_s
        )
