"""The egress guard against real loopback servers (seed 004 §3.3.3-8, §3.11 SSRF row).

Nothing here mocks the network: the servers are asyncio TCP servers on 127.0.0.1 speaking
HTTP/1.1, and the fetcher talks to them through real sockets. Two seams are injected, both
below the guard: a resolver that maps test host names to an address of each class, and a
dialer that sends every connection the guard lets through to the loopback canary (so a
failing guard shows up as a canary hit, and no test traffic ever leaves loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path

import httpcore
import pytest

from aigc_hub.egress import (
    EgressConnectionError,
    EgressFetcher,
    EgressHTTPError,
    EgressPolicy,
    EgressRefused,
    EgressTimeout,
)
from aigc_hub.pipelines.generation.adapters.base import OutputAsset, ProviderError, RetryClass
from aigc_hub.pipelines.generation.adapters.fal import FalAdapter
from aigc_hub.pipelines.generation.adapters.fetch import OutputFetch
from aigc_hub.pipelines.generation.adapters.local import LocalProviderAdapter

IP = IPv4Address | IPv6Address
Writer = asyncio.StreamWriter
Reader = asyncio.StreamReader
#: A route: the request's path and headers, the connection to answer on (and to read from).
Handler = Callable[[str, dict[str, str], Writer, Reader], Awaitable[None]]
BODY = bytes(range(256)) * 40  # 10 KiB, not all one byte: a wrong offset changes the hash


# --- loopback servers ---------------------------------------------------------------------


@dataclass
class Server:
    """An HTTP/1.1 server on 127.0.0.1 counting every connection it accepts."""

    routes: dict[str, Handler] = field(default_factory=dict)
    hits: int = 0
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits += 1
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            line, *rest = head.decode("latin-1").split("\r\n")
            path = line.split(" ")[1]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest) if k
            }
            self.seen.append((path, headers))
            handler = self.routes.get(path.split("?")[0], not_found)
            await handler(path, headers, writer, reader)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(routes: dict[str, Handler] | None = None) -> AsyncIterator[Server]:
    server = Server(routes=dict(routes or {}))
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server
        listener.close()


async def answer(
    writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes = b""
) -> None:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    writer.write("\r\n".join(lines).encode() + body)
    await writer.drain()


async def not_found(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
    await answer(writer, 404, {"Content-Length": "0"})


async def ok(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
    await answer(writer, 200, {"Content-Length": str(len(BODY)), "Content-Type": "video/mp4"}, BODY)


def redirect_to(location: str, status: int = 302) -> Handler:
    async def handler(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
        await answer(writer, status, {"Location": location, "Content-Length": "0"})

    return handler


def status(code: int) -> Handler:
    async def handler(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
        await answer(writer, code, {"Content-Length": "0"})

    return handler


async def drip(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
    """A byte every 20 ms of a declared megabyte: never idle long, never done."""
    await answer(writer, 200, {"Content-Length": str(1 << 20)})
    for _ in range(1 << 20):
        writer.write(b"x")
        await writer.drain()
        await asyncio.sleep(0.02)


async def endless(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
    """Chunked 64 KiB pieces, with no end (bounded at 1 GiB so a broken cap cannot hang)."""
    await answer(writer, 200, {"Transfer-Encoding": "chunked"})
    piece = b"%x\r\n%s\r\n" % (65536, b"y" * 65536)
    for _ in range(1 << 14):
        writer.write(piece)
        await writer.drain()


async def declares_a_terabyte(
    path: str, headers: dict[str, str], writer: Writer, reader: Reader
) -> None:
    """Headers saying 1 TB, then nothing until the client hangs up (a client that read the
    body would wait for its deadline); bounded in case it never does."""
    await answer(writer, 200, {"Content-Length": str(10**12)})
    await asyncio.wait_for(reader.read(), 30)


# --- injected seams -----------------------------------------------------------------------


class Names:
    """A resolver from a table; counts the look-ups it answers."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[IP]:
        self.calls.append((host, port))
        if host not in self.table:
            raise OSError(f"no such test name {host}")
        return [ip_address(a) for a in self.table[host]]


class ToLoopback(httpcore.AsyncNetworkBackend):
    """A dialer that records the (address, port) it is asked for and connects to one loopback
    port instead: whatever the guard lets through lands on that server."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dialled: list[tuple[str, int]] = []
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append((host, port))
        return await self.inner.connect_tcp("127.0.0.1", self.port, timeout)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def policy(**overrides: object) -> EgressPolicy:
    values: dict[str, object] = {"max_bytes": 1 << 20, "deadline_s": 10.0}
    values.update(overrides)
    return EgressPolicy(**values)  # type: ignore[arg-type]


def nothing_at(dest: Path) -> bool:
    return not dest.exists() and not any(dest.parent.glob(f".{dest.name}*"))


# --- every address class is refused before connecting -------------------------------------

REFUSED = {
    "loopback": "127.0.0.1",
    "loopback-other": "127.255.0.9",
    "private-10": "10.1.2.3",
    "private-172": "172.16.5.4",
    "private-192": "192.168.1.1",
    "link_local": "169.254.10.10",
    "cgnat": "100.64.0.1",
    "multicast": "224.0.0.251",
    "reserved": "240.0.0.1",
    "documentation": "192.0.2.7",
    "benchmarking": "198.18.0.1",
    "unspecified": "0.0.0.0",
    "this-network": "0.1.2.3",
    "broadcast": "255.255.255.255",
    "metadata": "169.254.169.254",
    "metadata-ecs": "169.254.170.2",
    "v6-loopback": "::1",
    "v6-unspecified": "::",
    "v6-link_local": "fe80::1",
    "v6-ula": "fd12:3456::1",
    "v6-multicast": "ff02::1",
    "v6-documentation": "2001:db8::1",
    "v6-metadata-aws": "fd00:ec2::254",
    "mapped-loopback": "::ffff:127.0.0.1",
    "mapped-metadata": "::ffff:169.254.169.254",
    "mapped-private": "::ffff:10.0.0.1",
    "compatible-loopback": "::127.0.0.1",
    "compatible-private": "::192.168.0.1",
    "compatible-public": "::8.8.8.8",  # a deprecated form: refused whatever it carries
    "translated-loopback": "::ffff:0:7f00:1",
    "nat64-loopback": "64:ff9b::7f00:1",
    "nat64-metadata": "64:ff9b::a9fe:a9fe",
    "nat64-local-loopback": "64:ff9b:1:7f00:1::",
    "nat64-local-public-96": "64:ff9b:1::808:808",  # local-use prefix: never global
    "6to4-loopback": "2002:7f00:1::1",
    "6to4-private": "2002:a00:1::1",
    "teredo-client-loopback": "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "teredo-server-private": "2001:0:a00:1::1",
}


@pytest.mark.parametrize("address", REFUSED.values(), ids=REFUSED.keys())
async def test_every_refused_address_class_is_refused_before_connecting(
    address: str, tmp_path: Path
) -> None:
    async with serving({"/out.mp4": ok}) as canary:
        names = Names({"cdn.test": [address]})
        dialer = ToLoopback(canary.port)
        fetcher = EgressFetcher(policy(), resolver=names, dialer=dialer)
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file("http://cdn.test/out.mp4", tmp_path / "o.mp4")
    assert (info.value.code, info.value.hop) == ("address", 0)
    assert dialer.dialled == [] and canary.hits == 0
    assert nothing_at(tmp_path / "o.mp4")


async def test_one_refused_address_among_public_ones_refuses_the_host(tmp_path: Path) -> None:
    async with serving({"/out.mp4": ok}) as canary:
        names = Names({"cdn.test": ["93.184.215.14", "2606:2800:21f::1", "10.0.0.7"]})
        dialer = ToLoopback(canary.port)
        with pytest.raises(EgressRefused, match="private"):
            await EgressFetcher(policy(), resolver=names, dialer=dialer).fetch_to_file(
                "http://cdn.test/out.mp4", tmp_path / "o.mp4"
            )
    assert dialer.dialled == [] and canary.hits == 0


async def test_a_public_host_is_dialled_at_the_address_checked_and_resolved_once(
    tmp_path: Path,
) -> None:
    async with serving({"/out.mp4": ok}) as server:
        names = Names({"cdn.test": ["93.184.215.14"]})
        dialer = ToLoopback(server.port)
        fetcher = EgressFetcher(policy(allowed_origins=frozenset({"http://cdn.test"})),
                                resolver=names, dialer=dialer)  # fmt: skip
        got = await fetcher.fetch_to_file("http://cdn.test/out.mp4?sig=1", tmp_path / "o.mp4")
    assert names.calls == [("cdn.test", 80)]
    assert dialer.dialled == [("93.184.215.14", 80)]
    assert server.seen[0][0] == "/out.mp4?sig=1" and server.seen[0][1]["host"] == "cdn.test"
    assert got.path.read_bytes() == BODY and got.size == len(BODY)
    assert got.sha256 == hashlib.sha256(BODY).hexdigest() and got.head == BODY[:64]
    assert (got.content_type, got.final_url) == ("video/mp4", "http://cdn.test/out.mp4?sig=1")
    assert nothing_at(tmp_path / ".o.mp4.part")


async def test_an_allowed_origin_that_resolves_to_a_private_address_is_refused(
    tmp_path: Path,
) -> None:
    async with serving({"/out.mp4": ok}) as canary:
        names = Names({"cdn.test": ["192.168.0.10"]})
        dialer = ToLoopback(canary.port)
        fetcher = EgressFetcher(policy(allowed_origins=frozenset({"http://cdn.test"})),
                                resolver=names, dialer=dialer)  # fmt: skip
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file("http://cdn.test/out.mp4", tmp_path / "o.mp4")
        with pytest.raises(EgressRefused) as other:
            await fetcher.fetch_to_file("http://other.test/out.mp4", tmp_path / "o.mp4")
    assert (info.value.code, other.value.code) == ("address", "origin")
    assert names.calls == [("cdn.test", 80)]  # the other origin was never looked up
    assert canary.hits == 0


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("file:///etc/passwd", "scheme"),
        ("ftp://cdn.test/out.mp4", "scheme"),
        ("gopher://cdn.test:70/_x", "scheme"),
        ("http://cdn.test:8080/out.mp4", "port"),
        ("http://cdn.test:22/out.mp4", "port"),
        ("http://user:pass@cdn.test/out.mp4", "userinfo"),
        ("http://a@cdn.test/out.mp4", "userinfo"),
        ("http://cdn.test\\@evil.test/out.mp4", "userinfo"),
        ("http://999.0.0.1/out.mp4", "host"),
        ("http://[fe80::1%25eth0]/out.mp4", "host"),
        ("http://cdn.test/out .mp4", "url"),
    ],
)
async def test_scheme_port_user_info_and_malformed_hosts_are_refused_before_lookup(
    url: str, code: str, tmp_path: Path
) -> None:
    async with serving() as canary:
        names = Names({"cdn.test": ["93.184.215.14"]})
        fetcher = EgressFetcher(policy(), resolver=names, dialer=ToLoopback(canary.port))
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file(url, tmp_path / "o.mp4")
    assert info.value.code == code
    assert names.calls == [] and canary.hits == 0


# --- odd spellings of loopback, through the system resolver and real sockets ---------------

ODD = [
    "http://2130706433:{port}/",
    "http://0x7f000001:{port}/",
    "http://0x7f.1:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://127.1:{port}/",
    "http://127.0.1:{port}/",
    "http://127.0.0.1.:{port}/",
    "http://[::1]:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://[::ffff:7f00:1]:{port}/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/",
    "http://[::127.0.0.1]:{port}/",
    "http://localhost:{port}/",
    "http://LOCALHOST.:{port}/",
    "http://0:{port}/",
    "http://0.0.0.0:{port}/",
    "http://a@127.0.0.1:{port}/",
    "http://127.0.0.1:{port}@cdn.test/",
]


@pytest.mark.parametrize("spelling", ODD)
async def test_odd_spellings_of_loopback_are_refused_and_the_canary_counts_nothing(
    spelling: str, tmp_path: Path
) -> None:
    async with serving({"/": ok}) as canary:
        allow_port = policy(allowed_ports=frozenset({canary.port}))
        with pytest.raises(EgressRefused) as info:
            await EgressFetcher(allow_port).fetch_to_file(
                spelling.format(port=canary.port), tmp_path / "o"
            )
    assert info.value.code in ("address", "userinfo")
    assert canary.hits == 0 and nothing_at(tmp_path / "o")


# --- trusted origins --------------------------------------------------------------------


async def test_a_trusted_origin_is_fetched_and_only_that_exact_origin(tmp_path: Path) -> None:
    async with serving({"/out.mp4": ok}) as server, serving({"/out.mp4": ok}) as canary:
        trusted = policy(trusted_origins=frozenset({server.origin}))
        fetcher = EgressFetcher(trusted)
        got = await fetcher.fetch_to_file(f"{server.origin}/out.mp4", tmp_path / "o.mp4")
        assert got.sha256 == hashlib.sha256(BODY).hexdigest()
        others = [
            f"http://localhost:{server.port}/out.mp4",  # same socket, another origin
            f"http://127.0.0.2:{server.port}/out.mp4",
            f"{canary.origin}/out.mp4",  # same host, another port
        ]
        for url in others:
            with pytest.raises(EgressRefused):
                await fetcher.fetch_to_file(url, tmp_path / "x.mp4")
    assert server.hits == 1 and canary.hits == 0


def test_trusted_origins_take_no_wildcards_and_entries_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="exact"):
        policy(trusted_origins=frozenset({"http://*.local.test"}))
    with pytest.raises(ValueError, match="not an origin"):
        policy(allowed_origins=frozenset({"https://cdn.test/path"}))


# --- redirects --------------------------------------------------------------------------


async def test_no_redirect_to_a_refused_address_is_followed(tmp_path: Path) -> None:
    async with serving() as canary, serving() as server:
        server.routes["/to-canary"] = redirect_to(f"{canary.origin}/")
        server.routes["/to-metadata"] = redirect_to("http://169.254.169.254/latest/meta-data/")
        server.routes["/to-numeric"] = redirect_to(f"http://2130706433:{canary.port}/")
        server.routes["/to-file"] = redirect_to("file:///etc/passwd", 307)
        server.routes["/to-userinfo"] = redirect_to(f"http://x@127.0.0.1:{canary.port}/", 308)
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       allowed_ports=frozenset({80, canary.port})))  # fmt: skip
        codes = {}
        for path in ("/to-canary", "/to-metadata", "/to-numeric", "/to-file", "/to-userinfo"):
            with pytest.raises(EgressRefused) as info:
                await fetcher.fetch_to_file(server.origin + path, tmp_path / "o")
            codes[path] = (info.value.code, info.value.hop)
    assert codes == {
        "/to-canary": ("address", 1),
        "/to-metadata": ("address", 1),
        "/to-numeric": ("address", 1),
        "/to-file": ("scheme", 1),
        "/to-userinfo": ("userinfo", 1),
    }
    assert canary.hits == 0 and server.hits == 5 and nothing_at(tmp_path / "o")


async def test_a_redirect_off_the_allowlist_is_refused(tmp_path: Path) -> None:
    async with serving() as server:
        server.routes["/out.mp4"] = redirect_to("http://elsewhere.test/out.mp4")
        names = Names({"cdn.test": ["93.184.215.14"], "elsewhere.test": ["93.184.215.15"]})
        dialer = ToLoopback(server.port)
        fetcher = EgressFetcher(policy(allowed_origins=frozenset({"http://cdn.test"})),
                                resolver=names, dialer=dialer)  # fmt: skip
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file("http://cdn.test/out.mp4", tmp_path / "o")
    assert (info.value.code, info.value.hop) == ("origin", 1)
    assert names.calls == [("cdn.test", 80)] and len(dialer.dialled) == 1


async def test_redirects_on_allowed_ground_are_followed_and_each_hop_resolved_anew(
    tmp_path: Path,
) -> None:
    async with serving({"/final.mp4": ok}) as server:
        server.routes["/a"] = redirect_to("/b", 301)
        server.routes["/b"] = redirect_to("http://v2.cdn.test/final.mp4", 303)
        names = Names({"cdn.test": ["93.184.215.14"], "v2.cdn.test": ["93.184.215.15"]})
        dialer = ToLoopback(server.port)
        allowed = frozenset({"http://cdn.test", "http://*.cdn.test"})
        fetcher = EgressFetcher(policy(allowed_origins=allowed), resolver=names, dialer=dialer)
        got = await fetcher.fetch_to_file(
            "http://cdn.test/a", tmp_path / "o", headers={"Authorization": "Bearer s3cret"}
        )
    assert got.final_url == "http://v2.cdn.test/final.mp4" and got.path.read_bytes() == BODY
    assert dialer.dialled == [("93.184.215.14", 80)] * 2 + [("93.184.215.15", 80)]
    assert [c[0] for c in names.calls] == ["cdn.test", "cdn.test", "v2.cdn.test"]
    sent = {path: headers for path, headers in server.seen}
    assert sent["/b"]["authorization"] == "Bearer s3cret"  # same origin: kept
    assert "authorization" not in sent["/final.mp4"]  # another origin: dropped


async def test_too_many_redirects_are_refused(tmp_path: Path) -> None:
    async with serving() as server:
        server.routes["/loop"] = redirect_to("/loop")
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       max_redirects=3))  # fmt: skip
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file(f"{server.origin}/loop", tmp_path / "o")
    assert (info.value.code, info.value.hop) == ("redirect", 3)
    assert server.hits == 4 and nothing_at(tmp_path / "o")


# --- proxies from the environment --------------------------------------------------------

PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy"]  # fmt: skip


async def test_proxy_variables_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with serving({"/out.mp4": ok}) as server, serving() as proxy:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, proxy.origin)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(name, "")  # nothing exempt: a proxy-minded client would use it
        names = Names({"cdn.test": ["93.184.215.14"]})
        public = EgressFetcher(policy(), resolver=names, dialer=ToLoopback(server.port))
        local = EgressFetcher(policy(trusted_origins=frozenset({server.origin})))
        await public.fetch_to_file("http://cdn.test/out.mp4", tmp_path / "a")
        await local.fetch_to_file(f"{server.origin}/out.mp4", tmp_path / "b")
    assert proxy.hits == 0 and server.hits == 2
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == BODY


# --- bodies: deadline, cap, declared length, status --------------------------------------


async def test_a_slow_drip_stops_at_the_deadline_and_leaves_nothing(tmp_path: Path) -> None:
    async with serving({"/drip": drip}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       deadline_s=0.6, idle_timeout_s=5.0))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(EgressTimeout):
            await fetcher.fetch_to_file(f"{server.origin}/drip", tmp_path / "o")
        took = time.monotonic() - started
    assert 0.6 <= took < 3.0  # the total deadline, not the (longer) idle timeout
    assert nothing_at(tmp_path / "o")


async def test_an_endless_body_stops_at_the_byte_cap_and_leaves_nothing(tmp_path: Path) -> None:
    async with serving({"/endless": endless}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       max_bytes=1 << 20, deadline_s=30.0))  # fmt: skip
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file(f"{server.origin}/endless", tmp_path / "o")
    assert info.value.code == "too_large"
    assert nothing_at(tmp_path / "o")


async def test_a_declared_length_above_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    async with serving({"/big": declares_a_terabyte}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       deadline_s=30.0, idle_timeout_s=30.0))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(EgressRefused) as info:
            await fetcher.fetch_to_file(f"{server.origin}/big", tmp_path / "o")
    # the body never comes: a client that tried to read it would still be waiting
    assert info.value.code == "too_large" and time.monotonic() - started < 10
    assert nothing_at(tmp_path / "o")


@pytest.mark.parametrize("code", [403, 410, 404, 500, 503])
async def test_a_non_2xx_answer_is_an_http_error_with_its_status(code: int, tmp_path: Path) -> None:
    async with serving({"/out.mp4": status(code)}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin})))
        with pytest.raises(EgressHTTPError) as info:
            await fetcher.fetch_to_file(f"{server.origin}/out.mp4?sig=secret", tmp_path / "o")
    assert info.value.status == code
    assert "secret" not in str(info.value)  # a signed URL's query stays out of messages
    assert nothing_at(tmp_path / "o")


async def test_a_failed_fetch_leaves_an_existing_file_as_it_was(tmp_path: Path) -> None:
    dest = tmp_path / "o.mp4"
    dest.write_bytes(b"earlier")
    async with serving({"/endless": endless}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin}),
                                       max_bytes=100_000))  # fmt: skip
        with pytest.raises(EgressRefused):
            await fetcher.fetch_to_file(f"{server.origin}/endless", dest)
    assert dest.read_bytes() == b"earlier" and nothing_at(tmp_path / ".o.mp4.part")


# --- the generation adapters on the guarded egress ----------------------------------------


async def test_the_local_adapter_follows_a_redirect_within_its_origin_and_no_further(
    tmp_path: Path,
) -> None:
    async with serving({"/final.mp4": ok}) as provider, serving() as canary:
        provider.routes["/moved.mp4"] = redirect_to("/final.mp4", 307)
        provider.routes["/away.mp4"] = redirect_to(f"{canary.origin}/x.mp4")
        provider.routes["/gone.mp4"] = status(410)
        adapter = LocalProviderAdapter(provider.origin)
        try:
            got = await adapter.fetch_output(
                OutputAsset(url=f"{provider.origin}/moved.mp4"), tmp_path / "a.mp4", max_bytes=10**6
            )
            outcomes = {}
            for path in ("/away.mp4", "/gone.mp4"):
                with pytest.raises(ProviderError) as info:
                    await adapter.fetch_output(
                        OutputAsset(url=provider.origin + path), tmp_path / "b.mp4", max_bytes=10**6
                    )
                outcomes[path] = (info.value.code, info.value.retry_class)
        finally:
            await adapter.close()
    assert got.sha256 == hashlib.sha256(BODY).hexdigest() and got.size_bytes == len(BODY)
    assert outcomes == {
        "/away.mp4": ("output_redirect_refused", RetryClass.PERMANENT),
        "/gone.mp4": ("output_expired", RetryClass.RETRYABLE),
    }
    assert canary.hits == 0 and nothing_at(tmp_path / "b.mp4")


async def test_a_hosted_vendor_does_not_trust_a_loopback_delivery_host_unless_told(
    tmp_path: Path,
) -> None:
    async with serving({"/out.mp4": ok}) as fake:
        asset = OutputAsset(url=f"{fake.origin}/out.mp4")
        untrusted = FalAdapter(fake.origin, "k", output_hosts=[fake.origin])
        trusted = FalAdapter(fake.origin, "k", output_hosts=[fake.origin],
                             output=OutputFetch(trusted_origins=(fake.origin,)))  # fmt: skip
        try:
            with pytest.raises(ProviderError) as info:
                await untrusted.fetch_output(asset, tmp_path / "a.mp4", max_bytes=10**6)
            assert fake.hits == 0
            got = await trusted.fetch_output(asset, tmp_path / "b.mp4", max_bytes=10**6)
        finally:
            await untrusted.close()
            await trusted.close()
    assert (info.value.code, info.value.retry_class) == ("output_url_refused", "permanent")
    assert got.size_bytes == len(BODY) and fake.hits == 1


async def cut_short(path: str, headers: dict[str, str], writer: Writer, reader: Reader) -> None:
    await answer(writer, 200, {"Content-Length": str(len(BODY))}, BODY[:1000])


async def test_a_body_cut_short_is_a_retryable_error_and_leaves_nothing(tmp_path: Path) -> None:
    async with serving({"/cut": cut_short}) as server:
        fetcher = EgressFetcher(policy(trusted_origins=frozenset({server.origin})))
        with pytest.raises(EgressConnectionError):
            await fetcher.fetch_to_file(f"{server.origin}/cut", tmp_path / "o")
    assert nothing_at(tmp_path / "o")


# --- TLS: the connection goes to the checked address, the certificate is checked by name ---


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not found: it makes the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=cdn.test",
         "-addext", "subjectAltName=DNS:cdn.test"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_tls_verifies_the_host_name_while_connecting_to_the_checked_address(
    tls_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, key = tls_files
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(cert))
    server = Server(routes={"/out.mp4": ok})
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_tls)
    async with listener:
        dialer = ToLoopback(listener.sockets[0].getsockname()[1])
        names = Names({"cdn.test": ["93.184.215.14"], "other.test": ["93.184.215.14"]})
        fetcher = EgressFetcher(policy(), resolver=names, dialer=dialer, ssl_context=client_tls)
        got = await fetcher.fetch_to_file("https://cdn.test/out.mp4", tmp_path / "a")
        with pytest.raises(EgressConnectionError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
            await fetcher.fetch_to_file("https://other.test/out.mp4", tmp_path / "b")
    assert got.sha256 == hashlib.sha256(BODY).hexdigest()
    assert dialer.dialled == [("93.184.215.14", 443)] * 2
    assert nothing_at(tmp_path / "b")
