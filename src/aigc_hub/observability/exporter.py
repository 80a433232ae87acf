"""A /metrics endpoint for processes without the HTTP API (`aigc-hub worker`, `relay`, `scan`).

prometheus-client's own WSGI server on a daemon thread: it serves the default registry (or
another one given) and never touches the asyncio loop, so a blocked loop still answers scrapes.
"""

from __future__ import annotations

import threading
from types import TracebackType
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server


class Exporter:
    """A running metrics server; ``close()`` stops it and frees the port (idempotent)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self._closed = False

    @property
    def host(self) -> str:
        """The address the server is bound to."""
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        """The bound port (the real one when started with port 0)."""
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        """Where to scrape, e.g. ``http://127.0.0.1:9464/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving, close the socket and wait up to ``timeout`` s for the thread."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)

    shutdown = close

    def __enter__(self) -> Exporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_exporter(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY
) -> Exporter:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread; port 0 picks one.

    Binds loopback by default: expose it wider only on purpose (``host="0.0.0.0"``).
    Raises OSError when the port is taken.
    """
    server, thread = start_http_server(port, addr=host, registry=registry)
    return Exporter(server, thread)
