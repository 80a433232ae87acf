"""The hub's HTTP API as a process for the HTTP benchmarks, with the per-tenant limit raised.

``aigc-hub api`` serves ``create_app(hub)`` with the per-tenant limit of its settings
(``AIGC_HUB_API_RATE_PER_S``, default 20 requests/s), which would make a load test measure the
limiter's refusals. This launcher is the same thing with ``--rate-limit`` requests/s (and
burst) per tenant: the limiter still runs on every request, only its budget is raised.
With ``--dispatch`` the process also runs what ``aigc-hub up`` runs beside the API (relay,
every consumer group, scanners, lag monitor); without it, it is API-only like ``aigc-hub api``.

Everything else comes from the ``AIGC_HUB_*`` environment (database, broker, Redis, generation
settings). The database must already be migrated. SIGTERM or SIGINT stops it.

    python bench/apiserver.py --port 8000 --rate-limit 100000 [--dispatch]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import uvicorn

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.interfaces.http.limits import Limits
from aigc_hub.observability.logging import configure_logging
from aigc_hub.pipelines.generation.up import embedded_provider
from aigc_hub.settings import Settings


class _Server(uvicorn.Server):
    # Signals set our stop event (as under ``aigc-hub up``); uvicorn must not take them.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM/SIGINT; the hub's parts run beside the API with ``--dispatch``."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_json)
    hub = Hub.from_settings(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    api_url = f"http://127.0.0.1:{args.port}"
    try:
        # Gives the hub the generation settings (providers, slots) as ``aigc-hub up`` does,
        # before start builds the state from them; with AIGC_HUB_GEN_RUN_LOCAL_PROVIDER=false
        # it serves no provider of its own.
        async with embedded_provider(hub, settings.data_dir / "provider", api_url=api_url):
            await hub.start()
            limits = Limits(rate_per_s=args.rate_limit, burst=args.rate_limit)
            config = uvicorn.Config(
                create_app(hub, limits=limits),
                host="127.0.0.1",
                port=args.port,
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=5,
            )
            server = _Server(config)
            serving = asyncio.create_task(server.serve(), name="http")
            parts = []
            if args.dispatch:
                parts.append(asyncio.create_task(hub.run(stop, scan=True, lag=True), name="hub"))
            await stop.wait()
            server.should_exit = True
            await serving
            await asyncio.gather(*parts)
    finally:
        await hub.close()


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    ap.add_argument(
        "--rate-limit", type=float, default=100_000.0, help="requests/s (and burst) per tenant"
    )
    ap.add_argument(
        "--dispatch",
        action="store_true",
        help="also run the relay, all consumer groups, scanners and the lag monitor",
    )
    return ap.parse_args()


if __name__ == "__main__":
    asyncio.run(serve(parse()))
