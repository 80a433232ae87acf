"""A real server for browser tests: a hub and its HTTP app under uvicorn on a loopback port.

The hub, its engine and uvicorn live in one background thread with its own event loop (an
async engine is never shared between loops); the test thread talks to them through
:meth:`ConsoleServer.call`. Chromium is the system's (``/usr/bin/chromium``), driven by the
``playwright`` package: a browser is never downloaded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import uvicorn

from aigc_hub import tenancy
from aigc_hub.blobs.base import BlobStore
from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.base import Broker
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.reliability.replay_jobs import ReplayJobs
from tests.support.hubs import hub_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

T = TypeVar("T")


class ConsoleServer:
    """Serves ``create_app(hub)`` on 127.0.0.1 and runs the relay and ``groups`` meanwhile.

    ``groups=None`` runs every consumer group, ``[]`` none (the relay still publishes, so
    messages pile up as lag). ``blobs`` is the hub's blob store (None: the hub has none);
    ``scan`` runs the scanners too (polls of providers are scheduled by one).
    """

    def __init__(
        self,
        db_url: str,
        pipelines: Sequence[Pipeline],
        *,
        groups: Sequence[str] | None = None,
        blobs: BlobStore | None = None,
        scan: bool = False,
        broker: Broker | None = None,
    ) -> None:
        self.db_url = db_url
        self.broker = broker
        self.scan = scan
        self.blobs = blobs
        self.pipelines = pipelines
        self.groups = groups
        self.url = ""
        self.admin_key = ""
        self.hub: Hub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="console-server", daemon=True)

    def __enter__(self) -> ConsoleServer:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise RuntimeError("the console server did not start") from self._error
        if not self.url:
            raise TimeoutError("the console server did not start in time")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def call(self, fn: Callable[[Hub], Awaitable[T]], timeout: float = 60) -> T:
        """Run ``fn(hub)`` on the server's loop and return its result."""
        assert self._loop is not None and self.hub is not None
        hub = self.hub

        async def run() -> T:
            return await fn(hub)

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the thread that waits in __enter__
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        broker = self.broker or MemoryBroker()
        async with hub_for(self.db_url, broker, self.pipelines, blobs=self.blobs) as hub:
            self.hub = hub
            self.admin_key = await tenancy.create_admin_key(hub.engine)
            app = create_app(hub)
            app.state.replay_jobs = ReplayJobs(hub.engine, hub.dlq, hub.clock, rate_per_s=20)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            config = uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on")
            server = uvicorn.Server(config)
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            work_stop = asyncio.Event()
            working = asyncio.create_task(hub.run(work_stop, self.groups, scan=self.scan))
            for _ in range(3000):  # uvicorn offers a flag, not an event: poll it, bounded
                if server.started or serving.done():
                    break
                await asyncio.sleep(0.01)
            if not server.started:  # reported by __enter__, never a URL that does not answer
                serving.cancel()
                working.cancel()
                raise RuntimeError("uvicorn did not start within 30 s")
            self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            self._ready.set()
            await self._stop.wait()
            server.should_exit = True
            await serving
            work_stop.set()
            await working
            sock.close()


def launch(playwright: Any) -> Any:
    """The system Chromium, headless, with nothing that calls outside hosts."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def log_in(page: Any, server: ConsoleServer, key: str | None = None) -> None:
    """Log the page's context in to the console with the server's admin key (or ``key``)."""
    page.goto(f"{server.url}/console/login")
    page.get_by_test_id("login-key").fill(server.admin_key if key is None else key)
    page.get_by_test_id("login-submit").click()
    page.wait_for_load_state()
