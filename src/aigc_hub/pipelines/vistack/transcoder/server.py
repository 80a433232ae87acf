"""Running the transcoder: a grpc.aio server around :class:`TranscoderService`.

:func:`start` binds and starts it (port 0 picks a free one: tests read ``port``);
:func:`serve` runs it until ``stop`` is set, then stops taking calls and gives running ones
``grace_s`` to finish (a worker whose call is cut retries it: the transcode is idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from aigc_hub.core.errors import ConfigurationError

from . import transcoder_pb2_grpc as pb_grpc
from .service import TranscoderService

#: Keepalives so a long call over an idle connection is neither dropped by a middlebox nor
#: kept for a peer that vanished.
OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
)


@dataclass
class RunningTranscoder:
    """A started server: where it listens and the service it runs."""

    server: grpc.aio.Server
    host: str
    port: int
    service: TranscoderService

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def stop(self, grace_s: float = 5.0) -> None:
        await self.server.stop(grace_s)


async def start(
    service: TranscoderService,
    listen: str,
    interceptors: tuple[grpc.aio.ServerInterceptor[object, object], ...] = (),
) -> RunningTranscoder:
    """Bind ``listen`` (``host:port``) and start serving ``service``."""
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit():
        raise ConfigurationError(f"listen address {listen!r}: expected host:port")
    server = grpc.aio.server(interceptors=interceptors, options=OPTIONS)
    pb_grpc.add_TranscoderServicer_to_server(service, server)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise ConfigurationError(f"cannot listen on {listen}: {exc}") from None
    await server.start()
    return RunningTranscoder(server, host, port, service)


async def serve(
    service: TranscoderService,
    listen: str,
    stop: asyncio.Event,
    *,
    on_listening: Callable[[str], None] = lambda address: None,
    grace_s: float = 30.0,
) -> None:
    """Serve until ``stop`` is set, then drain for up to ``grace_s`` seconds."""
    running = await start(service, listen)
    on_listening(running.address)
    try:
        await stop.wait()
    finally:
        await running.stop(grace_s)
