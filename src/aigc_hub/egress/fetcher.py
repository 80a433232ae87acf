"""The guarded egress fetcher: one way for the hub to download a URL it did not choose.

Built on httpcore (the transport under httpx, already a dependency, maintained by the httpx
team) rather than on httpx itself, for two reasons: its network backend is a public seam
(:mod:`.network` dials only the addresses this module checked), and it has no notion of
proxies from the environment at all, so ``HTTP_PROXY`` and friends cannot route a fetch
(httpx would need ``trust_env=False`` remembered at every call site). Redirects are not
httpcore's business either: this module follows them by hand, each hop parsed, checked,
resolved and checked again.

Per hop: parse (:mod:`.urls`) → scheme/user info/host → origin allowlist and port
(:class:`.EgressPolicy`) → resolve once → every address checked (:mod:`.addresses`) unless
the exact origin is trusted → connect to a checked address → a 3xx is the next hop, a
non-2xx is :class:`.EgressHTTPError`, a 2xx body streams to a temporary file beside ``dest``
under the byte cap, hashed on the way, and is renamed onto ``dest`` only when complete.
One ``asyncio.timeout`` bounds the whole fetch, resolution to last byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Final
from urllib.parse import urljoin

import certifi  # installed with httpx, which requires it
import httpcore

from aigc_hub.egress import addresses, urls
from aigc_hub.egress.errors import (
    EgressConnectionError,
    EgressHTTPError,
    EgressRefused,
    EgressTimeout,
)
from aigc_hub.egress.network import PinnedBackend
from aigc_hub.egress.policy import EgressPolicy
from aigc_hub.egress.resolver import Resolver, system_resolver
from aigc_hub.media.sniff import SNIFF_BYTES

#: Bytes kept from the start of the body for sniffing its type.
HEAD_BYTES: Final = SNIFF_BYTES
REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
#: Dropped when a redirect leaves the origin: they were meant for the first one only.
_ORIGIN_BOUND_HEADERS: Final = frozenset({"authorization", "cookie", "proxy-authorization"})
_USER_AGENT: Final = "aigc-hub-egress"


@dataclass(frozen=True)
class Fetched:
    """A completed download: the file, its size and sha256, what the server called it."""

    path: Path
    size: int
    sha256: str
    content_type: str | None
    final_url: str  # after redirects
    head: bytes  # the first HEAD_BYTES bytes (fewer if the body is shorter)


class EgressFetcher:
    """Downloads URLs under an :class:`.EgressPolicy`; safe to share between tasks.

    ``resolver`` maps a host name to addresses (default: the system's ``getaddrinfo``);
    ``dialer`` opens a TCP connection to an already-checked address (default: httpcore's
    AnyIO backend; tests may route it to a loopback canary); ``ssl_context`` verifies
    servers (default: the certifi CA bundle, host names checked).
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        dialer: httpcore.AsyncNetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.policy = policy
        self._resolve = resolver or system_resolver
        self._dialer = dialer or httpcore.AnyIOBackend()
        self._ssl = ssl_context or ssl.create_default_context(cafile=certifi.where())

    async def fetch_to_file(
        self,
        url: str,
        dest: Path,
        *,
        policy: EgressPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Fetched:
        """Stream ``url`` to ``dest`` under ``policy`` (default: the fetcher's).

        Raises EgressRefused (``code`` names the rule; ``hop`` > 0 for a redirect's target),
        EgressTimeout, EgressConnectionError or EgressHTTPError (``status``). Whatever
        fails, nothing is left at ``dest`` or beside it; an existing ``dest`` is replaced
        only by a complete download.
        """
        policy = policy or self.policy
        part = dest.with_name(f".{dest.name}.part")
        try:
            async with asyncio.timeout(policy.deadline_s):
                return await self._fetch(url, dest, part, policy, dict(headers or {}))
        except TimeoutError:
            raise EgressTimeout(f"egress: not done within {policy.deadline_s} s") from None
        finally:
            # after a success ``part`` is already renamed and this does nothing
            part.unlink(missing_ok=True)

    async def aclose(self) -> None:
        """Nothing is pooled between fetches (each hop has its own connection), so nothing
        stays open; kept so owners can close a fetcher like any other client."""

    # -- one fetch -------------------------------------------------------------------------

    async def _fetch(
        self, url: str, dest: Path, part: Path, policy: EgressPolicy, headers: dict[str, str]
    ) -> Fetched:
        first: urls.Target | None = None
        for hop in range(policy.max_redirects + 1):
            target = urls.parse(url, hop=hop)
            policy.check(target, hop=hop)
            first = first or target
            if target.origin != first.origin:
                headers = {
                    k: v for k, v in headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS
                }
            checked = await self._checked_addresses(target, policy, hop)
            async with self._request(target, checked, policy, headers) as response:
                if response.status in REDIRECTS and _header(response, "location"):
                    if hop == policy.max_redirects:
                        break
                    url = urljoin(target.url, _header(response, "location") or "")
                    continue
                if not 200 <= response.status < 300:
                    raise EgressHTTPError(response.status, target.url)
                return await self._save(response, target, dest, part, policy)
        raise EgressRefused(
            "redirect", f"more than {policy.max_redirects} redirects", hop=policy.max_redirects
        )

    async def _checked_addresses(
        self, target: urls.Target, policy: EgressPolicy, hop: int
    ) -> list[IPv4Address | IPv6Address]:
        """The target's addresses, each one allowed (or the origin trusted); refused before
        any connection otherwise. Resolved once: these are the addresses dialled."""
        if target.ip is not None:
            found: Sequence[IPv4Address | IPv6Address] = [target.ip]
        else:
            try:
                found = await self._resolve(target.host, target.port)
            except OSError as exc:
                message = f"egress: {target.host} did not resolve: {exc}"
                raise EgressConnectionError(message) from None
            if not found:
                raise EgressConnectionError(f"egress: {target.host} has no address")
        if not policy.trusts(target):
            for ip in found:
                why = addresses.refused_address_class(ip)
                if why:
                    raise EgressRefused(
                        "address", f"{target.host} resolves to a {why} address", hop=hop
                    )
        return list(found)

    @asynccontextmanager
    async def _request(
        self,
        target: urls.Target,
        checked: Sequence[IPv4Address | IPv6Address],
        policy: EgressPolicy,
        headers: Mapping[str, str],
    ) -> AsyncIterator[httpcore.Response]:
        """One GET on a connection of its own to one of ``checked``; closed on exit."""
        pool = httpcore.AsyncConnectionPool(
            ssl_context=self._ssl,
            max_connections=1,
            retries=0,
            network_backend=PinnedBackend(target.host, target.port, checked, self._dialer),
        )
        sent = [
            ("Host", target.authority),
            ("User-Agent", _USER_AGENT),
            ("Accept", "*/*"),
            ("Accept-Encoding", "identity"),  # the bytes stored are the bytes served
            *((k, v) for k, v in headers.items() if k.lower() not in ("host", "accept-encoding")),
        ]
        request_url = httpcore.URL(
            scheme=target.scheme.encode(),
            host=target.host.encode(),
            port=target.port,
            target=target.path.encode(),
        )
        timeouts = {
            "connect": policy.connect_timeout_s,
            "read": policy.idle_timeout_s,
            "write": policy.idle_timeout_s,
            "pool": policy.connect_timeout_s,
        }
        try:
            async with pool.stream(
                "GET", request_url, headers=sent, extensions={"timeout": timeouts}
            ) as response:
                yield response
        except httpcore.TimeoutException as exc:
            raise EgressTimeout(f"egress: {type(exc).__name__} from {target.origin}") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise EgressConnectionError(
                f"egress: {type(exc).__name__} with {target.origin}: {exc}"
            ) from None
        finally:
            await pool.aclose()

    async def _save(
        self,
        response: httpcore.Response,
        target: urls.Target,
        dest: Path,
        part: Path,
        policy: EgressPolicy,
    ) -> Fetched:
        """Stream the body to ``part`` (byte cap, sha256, head), then rename it to ``dest``."""
        declared = _header(response, "content-length") or ""
        if declared.strip().isdigit() and int(declared) > policy.max_bytes:
            raise EgressRefused("too_large", f"declared {declared} bytes > {policy.max_bytes}")
        digest, size, head = hashlib.sha256(), 0, b""
        await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
        with part.open("wb") as out:  # opening is quick; the writes go to a thread
            async for chunk in response.aiter_stream():
                size += len(chunk)
                if size > policy.max_bytes:
                    raise EgressRefused("too_large", f"body passed {policy.max_bytes} bytes")
                digest.update(chunk)
                if len(head) < HEAD_BYTES:
                    head += chunk[: HEAD_BYTES - len(head)]
                await asyncio.to_thread(out.write, chunk)
        # not in a thread on purpose: a rename awaited could be cancelled by the deadline
        # after it happened, and the caller would be told "failed" with the file in place
        os.replace(part, dest)
        return Fetched(
            dest, size, digest.hexdigest(), _header(response, "content-type"), target.url, head
        )


def _header(response: httpcore.Response, name: str) -> str | None:
    wanted = name.encode()
    for key, value in response.headers:
        if key.lower() == wanted:
            return value.decode("latin-1").strip() or None
    return None
