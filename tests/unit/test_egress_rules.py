"""The egress guard's pure rules: the address table, the one URL parse, the policy."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from aigc_hub.egress import EgressPolicy, EgressRefused, refused_address_class, urls


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("8.8.8.8", None),
        ("93.184.215.14", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("127.200.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.31.255.255", "private"),
        ("172.32.0.1", None),
        ("192.168.0.1", "private"),
        ("169.254.0.1", "link_local"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("100.64.0.1", "cgnat"),
        ("100.127.255.255", "cgnat"),
        ("100.128.0.1", None),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("192.0.0.8", "reserved"),
        ("198.51.100.1", "reserved"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link_local"),
        ("fe80::1%eth0", "link_local"),
        ("fc00::1", "private"),
        ("fec0::1", "private"),
        ("ff02::1", "multicast"),
        ("fd00:ec2::254", "metadata"),
        ("fd20:ce::254", "metadata"),
        ("2001:db8::1", "reserved"),
        ("100::1", "reserved"),
        ("4000::1", "reserved"),  # outside global unicast 2000::/3
        # IPv4 inside IPv6: judged by the IPv4 address
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:8.8.8.8", None),
        ("::ffff:0:a00:1", "private"),  # IPv4-translated (SIIT)
        ("::127.0.0.1", "loopback"),  # IPv4-compatible
        ("::100.64.0.1", "cgnat"),
        ("::8.8.8.8", "reserved"),  # compatible form is deprecated whatever it carries
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 well-known prefix
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("64:ff9b::808:808", None),
        ("64:ff9b:1:7f00:1::", "loopback"),  # local-use NAT64, /48 layout
        ("64:ff9b:1:0:7f:0:100:0", "loopback"),  # /64 layout
        ("64:ff9b:1::808:808", "reserved"),  # local-use: never global
        ("2002:7f00:1::", "loopback"),  # 6to4
        ("2002:a9fe:a9fe::1", "metadata"),
        ("2002:808:808::1", None),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # Teredo client 127.0.0.1
        ("2001:0:a00:1::", "private"),  # Teredo server 10.0.0.1
        ("2001:0:808:808::f7f7:f7f7", None),  # server and client 8.8.8.8
    ],
)
def test_address_classes(address: str, expected: str | None) -> None:
    assert refused_address_class(ip_address(address)) == expected


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTPS://CDN.Example.COM:443/a/b?x=1#frag", "https://cdn.example.com/a/b?x=1"),
        ("http://cdn.example.com.", "http://cdn.example.com/"),
        ("http://2130706433/", "http://127.0.0.1/"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("http://0177.0.0.01/", "http://127.0.0.1/"),
        ("http://127.1:8080/", "http://127.0.0.1:8080/"),
        ("http://[::FFFF:127.0.0.1]/", "http://[::ffff:7f00:1]/"),
        ("http://cafe.be/", "http://cafe.be/"),  # hex letters only, but a name
    ],
)
def test_urls_parse_to_one_canonical_form(url: str, canonical: str) -> None:
    assert urls.parse(url).url == canonical


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("javascript:alert(1)", "scheme"),
        ("//cdn.example.com/x", "scheme"),
        ("http://u@cdn.example.com/", "userinfo"),
        ("http://@cdn.example.com/", "userinfo"),
        ("http://cdn.example.com:0/", "port"),
        ("http://cdn.example.com:/", "port"),
        ("http://cdn.example.com:70000/", "port"),
        ("http://1.2.3.4.5/", "host"),
        ("http://256.0.0.1/", "host"),
        ("http://0x/", "host"),
        ("http://[::1%25lo]/", "host"),
        ("http://[not-v6]/", "url"),
        ("http://exa mple.com/", "url"),
        ("http://exämple.com/", "url"),
        ("http://cdn.example.com/\x00", "url"),
        ("http://under_score%2e.com/", "host"),
        ("http:///path", "host"),
    ],
)
def test_urls_refuse_what_no_policy_can_lift(url: str, code: str) -> None:
    with pytest.raises(EgressRefused) as info:
        urls.parse(url)
    assert info.value.code == code


def test_origin_patterns_match_scheme_port_and_host_or_subdomains() -> None:
    exact, wild = urls.pattern("https://cdn.test"), urls.pattern("https://*.cdn.test:8443")
    assert exact.matches(urls.parse("https://CDN.test./x"))
    assert not exact.matches(urls.parse("http://cdn.test/x"))
    assert not exact.matches(urls.parse("https://cdn.test:444/x"))
    assert not exact.matches(urls.parse("https://a.cdn.test/x"))
    assert wild.matches(urls.parse("https://a.b.cdn.test:8443/x"))
    assert not wild.matches(urls.parse("https://cdn.test:8443/x"))
    assert not wild.matches(urls.parse("https://evilcdn.test:8443/x"))
    assert not wild.matches(urls.parse("https://a.cdn.test/x"))


def test_policy_ports_are_the_allowed_set_or_an_exact_origin_named() -> None:
    policy = EgressPolicy(
        max_bytes=1,
        deadline_s=1,
        allowed_origins=frozenset({"https://cdn.test:8443", "https://*.cdn.test:9443"}),
    )
    policy.check(urls.parse("https://cdn.test:8443/x"), hop=0)
    with pytest.raises(EgressRefused) as info:
        policy.check(urls.parse("https://a.cdn.test:9443/x"), hop=2)  # patterns name no port
    assert (info.value.code, info.value.hop) == ("port", 2)
    with pytest.raises(EgressRefused, match="origin"):
        policy.check(urls.parse("https://other.test/x"), hop=0)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_bytes": -1},
        {"deadline_s": 0},
        {"max_redirects": -1},
        {"allowed_origins": frozenset({"ftp://cdn.test"})},
        {"trusted_origins": frozenset({"http://127.0.0.1:8100/path"})},
        {"trusted_origins": frozenset({"http://*.internal"})},
    ],
)
def test_a_policy_that_cannot_work_is_refused_when_made(bad: dict[str, object]) -> None:
    values: dict[str, object] = {"max_bytes": 1, "deadline_s": 1.0, **bad}
    with pytest.raises(ValueError):
        EgressPolicy(**values)  # type: ignore[arg-type]
