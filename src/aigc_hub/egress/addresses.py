"""Which IP addresses a fetch may connect to (seed 004 §3.11, the SSRF row).

The rule is a table, not ``ipaddress``'s ``is_global``: that property changed between Python
patch releases, and it calls ``::127.0.0.1``, ``64:ff9b::7f00:1`` and ``2002:7f00:1::``
global although each reaches 127.0.0.1. Every IPv6 form that carries an IPv4 address
(mapped, compatible, translated, NAT64, 6to4, Teredo) is judged by that IPv4 address too.
Anything left that ``ipaddress`` does not call global is refused as ``reserved``.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

IPAddress = IPv4Address | IPv6Address

#: Cloud instance-metadata endpoints: a fetch there hands out the machine's credentials.
METADATA = frozenset(
    {
        IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
        IPv4Address("169.254.170.2"),  # AWS ECS task metadata
        IPv4Address("169.254.169.123"),  # AWS time sync
        IPv4Address("100.100.100.200"),  # Alibaba Cloud
        IPv6Address("fd00:ec2::254"),  # AWS over IPv6
        IPv6Address("fd00:ec2::123"),  # AWS time sync over IPv6
        IPv6Address("fd20:ce::254"),  # GCP over IPv6
    }
)


def _nets(cls: str, *cidrs: str) -> list[tuple[str, IPv4Network | IPv6Network]]:
    return [(cls, ip_network(c)) for c in cidrs]


# First match wins: broadcast before 240/4, named classes before the catch-all "reserved".
_V4 = [
    *_nets("unspecified", "0.0.0.0/8"),
    *_nets("loopback", "127.0.0.0/8"),
    *_nets("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_nets("link_local", "169.254.0.0/16"),
    *_nets("cgnat", "100.64.0.0/10"),
    *_nets("multicast", "224.0.0.0/4"),
    *_nets("broadcast", "255.255.255.255/32"),
    *_nets(
        "reserved",
        "240.0.0.0/4",  # future use
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "198.51.100.0/24",
        "203.0.113.0/24",
        "198.18.0.0/15",  # benchmarking
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.31.196.0/24",  # AS112
        "192.175.48.0/24",
        "192.52.193.0/24",  # AMT
    ),
]
_V6 = [
    *_nets("unspecified", "::/128"),
    *_nets("loopback", "::1/128"),
    *_nets("link_local", "fe80::/10"),
    *_nets("private", "fc00::/7", "fec0::/10"),  # unique local; site-local (deprecated)
    *_nets("multicast", "ff00::/8"),
    *_nets(
        "reserved",
        "100::/64",  # discard-only
        "2001:db8::/32",  # documentation
        "3fff::/20",
        "2001:2::/48",  # benchmarking
        "2001:10::/28",  # ORCHID
        "2001:20::/28",  # ORCHIDv2
        "5f00::/16",  # SRv6 SIDs
    ),
]
_GLOBAL_UNICAST = IPv6Network("2000::/3")
_MAPPED = IPv6Network("::ffff:0:0/96")
_TRANSLATED = IPv6Network("::ffff:0:0:0/96")  # SIIT, RFC 2765
_COMPATIBLE = IPv6Network("::/96")  # deprecated (RFC 4291)
_NAT64 = IPv6Network("64:ff9b::/96")  # well-known prefix (RFC 6052)
_NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")  # local use (RFC 8215)
_6TO4 = IPv6Network("2002::/16")
_TEREDO = IPv6Network("2001::/32")


def refused_address_class(ip: IPv4Address | IPv6Address) -> str | None:
    """Why a fetch must not connect to ``ip`` ("loopback", "private", "link_local", "cgnat",
    "multicast", "broadcast", "reserved", "unspecified", "metadata"), or None if it may.

    For an IPv6 address carrying an IPv4 address, the IPv4 address's class is answered.
    """
    if isinstance(ip, IPv6Address) and ip.scope_id is not None:
        ip = IPv6Address(str(ip).split("%", 1)[0])  # the zone does not change where it goes
    if ip in METADATA:
        return "metadata"
    if isinstance(ip, IPv4Address):
        return _first(ip, _V4) or (None if ip.is_global else "reserved")
    named = _first(ip, _V6)
    if named:
        return named
    embedded = list(_embedded(ip))
    if embedded:
        classes = [c for c in map(refused_address_class, embedded) if c]
        telling = next((c for c in classes if c != "unspecified"), None)
        if telling:
            return telling
        if ip in _COMPATIBLE or ip in _NAT64_LOCAL:
            # dead or local-only forms; in the local prefix, a layout not in use reads as
            # 0.x.x.x padding, which says nothing about the address
            return "reserved"
        return classes[0] if classes else None  # a public IPv4 behind a form in use: fine
    if ip not in _GLOBAL_UNICAST or not ip.is_global:
        return "reserved"
    return None


def _first(ip: IPAddress, table: list[tuple[str, IPv4Network | IPv6Network]]) -> str | None:
    return next((cls for cls, net in table if ip in net), None)


def _embedded(ip: IPv6Address) -> Iterator[IPv4Address]:
    """Every IPv4 address ``ip`` carries, in any of the forms that can carry one."""
    value = int(ip)
    low32 = IPv4Address(value & 0xFFFFFFFF)
    if ip in _MAPPED or ip in _TRANSLATED or ip in _COMPATIBLE or ip in _NAT64:
        yield low32
    elif ip in _NAT64_LOCAL:
        # RFC 6052 §2.2: where the IPv4 bits sit depends on the prefix length the site chose
        # (/48, /56, /64 or /96 inside this /48), and bits 64-71 are skipped: try each
        raw = ip.packed
        layouts = (raw[6:8] + raw[9:11], raw[7:8] + raw[9:12], raw[9:13], raw[12:16])
        # all zero is the padding of a layout not in use, not an address someone wrote
        yield from (IPv4Address(v4) for v4 in layouts if any(v4))
    elif ip in _6TO4:
        yield IPv4Address((value >> 80) & 0xFFFFFFFF)
    elif ip in _TEREDO:
        yield IPv4Address((value >> 64) & 0xFFFFFFFF)  # the Teredo server
        yield IPv4Address(~value & 0xFFFFFFFF)  # the client, stored inverted
