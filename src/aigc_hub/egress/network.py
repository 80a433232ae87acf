"""An httpcore network backend that connects only to addresses already checked.

httpcore asks its backend to ``connect_tcp(host, port)`` with the URL's host name; the
default backend would resolve that name again. This one is made for one hop, knows the host
and port that hop may reach and the addresses the policy accepted for it, and dials those
addresses. TLS is then started by httpcore with ``server_hostname`` = the URL's host, so the
certificate is still verified against the name, not the address.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv6Address

import httpcore


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials ``addresses`` (in order, the first that answers) for ``host:port`` only."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: Sequence[IPv4Address | IPv6Address],
        dialer: httpcore.AsyncNetworkBackend,
    ) -> None:
        self.host, self.port = host, port
        self.addresses = tuple(addresses)
        self.dialer = dialer

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """A connection to one of the checked addresses; ConnectError for anything else."""
        if (host, port) != (self.host, self.port) or not self.addresses:
            raise httpcore.ConnectError(f"{host}:{port} was not checked for this hop")
        last: Exception | None = None
        for address in self.addresses:
            try:
                return await self.dialer.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: a fetch goes over TCP to a checked address."""
        raise httpcore.ConnectError("unix sockets are not egress")

    async def sleep(self, seconds: float) -> None:
        """Delegated (httpcore sleeps between connect retries; we ask for none)."""
        await self.dialer.sleep(seconds)
