"""One parse of a URL into what the fetch will do with it, refusing what it must not do.

Parsers disagree on odd URLs (``http://a\\@b``, ``http://0x7f.1``), so an allowlist checked
on one parser's answer can be walked around if another parser makes the request. Here one
parse decides everything: the origin checked, the address resolved, the ``Host`` header and
the request target sent. A host written as a number in any spelling ``inet_aton`` accepts
(``2130706433``, ``0x7f.1``, ``127.1``) is that IPv4 address, never a name to look up, so
the address check sees what the connection would reach; user info is refused outright.
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from urllib.parse import urlsplit

from aigc_hub.egress.errors import EgressRefused

IPAddress = IPv4Address | IPv6Address
DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMERIC_CHARS = re.compile(r"[0-9a-fx.]+")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\uffff]")  # whitespace, controls, anything not ASCII


@dataclass(frozen=True)
class Target:
    """A URL the policy can judge: canonical scheme, host and port, and the request target."""

    scheme: str  # "http" | "https"
    host: str  # lowercase ASCII, no trailing dot; an IP address in its canonical form
    port: int
    path: str  # path and query, as sent ("/" at least)
    ip: IPAddress | None  # the host, when it is an address

    @property
    def authority(self) -> str:
        """``host[:port]`` as the ``Host`` header says it (default port left out)."""
        host = f"[{self.host}]" if isinstance(self.ip, IPv6Address) else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``, canonical: equal origins give equal strings."""
        return f"{self.scheme}://{self.authority}"

    @property
    def url(self) -> str:
        """The URL as it will be requested."""
        return self.origin + self.path


def parse(url: str, *, hop: int = 0) -> Target:
    """``url`` as a :class:`Target`; EgressRefused ``url``, ``scheme``, ``userinfo``, ``host``
    or ``port`` when it is malformed or breaks a rule no policy can lift."""

    def refuse(code: str, message: str) -> EgressRefused:
        return EgressRefused(code, message, hop=hop, url=url)

    if _UNSAFE.search(url):
        raise refuse("url", "the URL holds whitespace, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise refuse("port" if "port" in str(exc).lower() else "url", str(exc)) from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise refuse("scheme", f"only http and https are fetched, not {scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise refuse("userinfo", "the URL carries user info (user:password@host)")
    if "\\" in parts.netloc:
        raise refuse("host", "a backslash in the authority")
    host, ip = _host(parts.netloc, parts.hostname or "", refuse)
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise refuse("port", "port 0 or an empty port")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port or DEFAULT_PORTS[scheme], path, ip)


def _host(
    netloc: str, hostname: str, fail: Callable[[str, str], EgressRefused]
) -> tuple[str, IPAddress | None]:
    if "[" in netloc:
        try:
            if "%" in hostname:
                raise ValueError("zone index")
            return str(IPv6Address(hostname)), IPv6Address(hostname)
        except ValueError:
            raise fail("host", "a bracketed host that is not a plain IPv6 address") from None
    host = hostname.lower()
    host = host[:-1] if host.endswith(".") else host
    if not host:
        raise fail("host", "no host")
    if _NUMERIC_CHARS.fullmatch(host):
        try:
            ip = IPv4Address(socket.inet_aton(host))
        except OSError:
            if _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
                # WHATWG: a host ending in a number is an IPv4 address or invalid, never a name
                raise fail("host", "a numeric host that is not an IPv4 address") from None
        else:
            return str(ip), ip
    if not _NAME.fullmatch(host) or len(host) > 253:
        raise fail("host", "the host is not a valid name")
    return host, None


@dataclass(frozen=True)
class OriginPattern:
    """An allowlist entry: an exact origin, or ``scheme://*.domain[:port]`` for subdomains."""

    scheme: str
    host: str
    port: int
    subdomains: bool

    def matches(self, target: Target) -> bool:
        """Same scheme and port, and the same host (or a subdomain of it, for ``*.``)."""
        if (target.scheme, target.port) != (self.scheme, self.port):
            return False
        if self.subdomains:
            return target.ip is None and target.host.endswith("." + self.host)
        return target.host == self.host


@functools.lru_cache(maxsize=512)
def pattern(entry: str) -> OriginPattern:
    """The configured origin ``entry`` as a pattern; ValueError if it is not one."""
    subdomains = "://*." in entry
    try:
        target = parse(entry.replace("://*.", "://", 1))
    except EgressRefused as exc:
        raise ValueError(f"not an origin: {entry!r} ({exc})") from None
    if target.path != "/" or (subdomains and target.ip is not None):
        raise ValueError(f"not an origin: {entry!r}")
    return OriginPattern(target.scheme, target.host, target.port, subdomains)
