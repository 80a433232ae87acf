"""Host name → addresses. The fetcher resolves once per hop, checks every address, and
connects only to those (:mod:`.network`): a second lookup at connect time could answer
differently (DNS rebinding) and is never made."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address

#: ``await resolver(host, port)`` → the host's addresses; raise OSError when it has none.
Resolver = Callable[[str, int], Awaitable[Sequence[IPv4Address | IPv6Address]]]


async def system_resolver(host: str, port: int) -> list[IPv4Address | IPv6Address]:
    """The system's ``getaddrinfo`` (through the event loop's executor), TCP answers only,
    duplicates removed, in the order the system prefers."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    found: dict[IPv4Address | IPv6Address, None] = {}
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            found[ip_address(str(sockaddr[0]))] = None
    return list(found)
