"""The fetcher's address policy, case by case and against Python's `ipaddress` at random."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.errors import FetchError
from tms.fetch.addresses import (
    NAT64,
    IPAddress,
    classify,
    describe,
    normalize_host,
    parse_exemptions,
    port_refusal,
)

CASES = {
    # IPv4
    "0.0.0.0": "unspecified",
    "0.1.2.3": "unspecified",
    "10.0.0.1": "private",
    "10.255.255.255": "private",
    "100.64.0.1": "shared (CGNAT)",
    "100.127.255.254": "shared (CGNAT)",
    "100.100.100.200": "shared (CGNAT)",  # Alibaba Cloud metadata
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "169.254.0.1": "link-local",
    "169.254.169.254": "link-local",  # AWS, GCP, Azure metadata
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.0.0.1": "reserved",
    "192.0.0.192": "reserved",  # Oracle Cloud metadata
    "192.0.2.1": "documentation",
    "192.88.99.1": "reserved",
    "192.168.0.1": "private",
    "198.18.0.1": "benchmarking",
    "198.19.255.255": "benchmarking",
    "198.51.100.7": "documentation",
    "203.0.113.9": "documentation",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.254": "reserved",
    "255.255.255.255": "broadcast",
    # IPv6
    "::": "unspecified",
    "::1": "loopback",
    "::ffff:127.0.0.1": "IPv4-mapped",
    "::ffff:8.8.8.8": "IPv4-mapped",  # refused whatever it embeds
    "::127.0.0.1": "IPv4-compatible",
    "::8.8.8.8": "IPv4-compatible",
    "::ffff:0:7f00:1": "reserved",  # IPv4-translated (SIIT)
    "64:ff9b::7f00:1": "NAT64-embedded loopback",
    "64:ff9b::a9fe:a9fe": "NAT64-embedded link-local",
    "64:ff9b::a00:1": "NAT64-embedded private",
    "64:ff9b:1::a00:1": "NAT64 local-use",
    "64:ff9b:1::808:808": "NAT64 local-use",
    "100::1": "discard-only",
    "2001::1": "Teredo",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2": "Teredo",
    "2001:2::1": "reserved",
    "2001:20::1": "reserved",
    "2001:db8::1": "documentation",
    "2002:7f00:1::1": "6to4",
    "2002:808:808::1": "6to4",  # refused whatever it embeds
    "3fff::1": "documentation",
    "fc00::1": "unique-local",
    "fd00:ec2::254": "unique-local",  # AWS metadata over IPv6
    "fe80::1": "link-local",
    "fe80::1%eth0": "link-local",
    "febf::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "ff0e::1": "multicast",
    "4000::1": "reserved",  # outside global unicast 2000::/3
    "1::1": "reserved",
    # public
    "1.1.1.1": None,
    "8.8.8.8": None,
    "93.184.215.14": None,
    "100.63.255.255": None,
    "100.128.0.0": None,
    "172.15.255.255": None,
    "172.32.0.0": None,
    "192.0.3.1": None,
    "198.20.0.1": None,
    "223.255.255.255": None,
    "2606:4700:4700::1111": None,
    "2a00:1450:4001:82b::200e": None,
    "2001:4860:4860::8888": None,
    "64:ff9b::808:808": None,  # NAT64 (DNS64) of 8.8.8.8
}


@pytest.mark.parametrize(("text", "label"), CASES.items())
def test_classification(text: str, label: str | None) -> None:
    address = ip_address(text)
    assert classify(address) == label


@pytest.mark.parametrize(
    ("label", "phrase"),
    [
        ("private", "a private address"),
        ("unspecified", "an unspecified address"),
        ("unique-local", "a unique-local address"),
        ("IPv4-mapped", "an IPv4-mapped address"),
        ("NAT64-embedded loopback", "a NAT64-embedded loopback address"),
        ("shared (CGNAT)", "a shared (CGNAT) address"),
    ],
)
def test_describe(label: str, phrase: str) -> None:
    assert describe(label) == phrase


# --- against Python's ipaddress ---------------------------------------------------------------

# Where this policy deliberately refuses what `ipaddress.is_global` accepts (in some Python
# version): IETF protocol assignments, the deprecated 6to4 relay and prefix, the new IPv6
# documentation prefix. Multicast, reserved and site-local are refused by the reference too.
STRICTER: list[IPv4Network | IPv6Network] = [
    IPv4Network("192.0.0.0/24"),
    IPv4Network("192.88.99.0/24"),
    IPv6Network("2001::/23"),
    IPv6Network("2002::/16"),
    IPv6Network("3fff::/20"),
]


def reference_is_public(ip: IPAddress) -> bool:
    """`ipaddress`'s verdict, with the documented differences."""
    if isinstance(ip, IPv6Address) and ip in NAT64:
        return reference_is_public(IPv4Address(int(ip) & 0xFFFF_FFFF))  # judged by what it embeds
    if any(ip in net for net in STRICTER if net.version == ip.version):
        return False
    site_local = isinstance(ip, IPv6Address) and ip.is_site_local
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or site_local)


V4_NETS = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "255.255.255.0/24", "100.0.0.0/8", "172.0.0.0/8", "192.0.0.0/16", "198.0.0.0/8",
]  # fmt: skip
V6_NETS = [
    "::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
    "2001::/32", "2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20", "2000::/3", "fc00::/7",
    "fe80::/10", "fec0::/10", "ff00::/8", "::/8", "4000::/2", "2001::/16",
]  # fmt: skip

v4_addresses = st.one_of(
    st.ip_addresses(v=4), st.sampled_from(V4_NETS).flatmap(lambda n: st.ip_addresses(network=n))
)
v6_addresses = st.one_of(
    st.ip_addresses(v=6),
    st.sampled_from(V6_NETS).flatmap(lambda n: st.ip_addresses(network=n)),
    v4_addresses.map(lambda v4: IPv6Address(int(NAT64[0]) | int(v4))),  # DNS64 of any IPv4
)


@settings(max_examples=500)
@given(st.one_of(v4_addresses, v6_addresses))
def test_agrees_with_ipaddress(ip: IPAddress) -> None:
    assert (classify(ip) is None) == reference_is_public(ip)


@settings(max_examples=500)
@given(st.one_of(v4_addresses, v6_addresses))
def test_never_more_permissive_than_ipaddress(ip: IPAddress) -> None:
    if classify(ip) is None:  # public: the fetcher may connect
        assert ip.is_global
        assert not ip.is_private and not ip.is_multicast and not ip.is_loopback
        assert not ip.is_link_local and not ip.is_unspecified


# --- ports and the test-only allow list -------------------------------------------------------


@pytest.mark.parametrize("port", [80, 443, 8080, 8443, 3000, 65535])
def test_web_ports_are_allowed(port: int) -> None:
    assert port_refusal(port) is None


@pytest.mark.parametrize("port", [1, 21, 22, 25, 53, 110, 143, 587, 6667, 10080])
def test_bad_ports_are_refused(port: int) -> None:
    assert port_refusal(port) == (f"port {port} is not for the web (browsers block it too)")


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_non_ports_are_refused(port: int) -> None:
    assert port_refusal(port) == f"port {port} is not a TCP port"


@pytest.mark.parametrize(
    ("value", "pairs"),
    [
        ("", set()),
        ("  ", set()),
        ("127.0.0.1:8080", {("127.0.0.1", 8080)}),
        (" 127.0.0.1:1 , LocalHost:2 ", {("127.0.0.1", 1), ("localhost", 2)}),
        ("[::1]:8080", {("::1", 8080)}),
        ("[0:0::1]:8080", {("::1", 8080)}),
    ],
)
def test_exemptions_parse(value: str, pairs: set[tuple[str, int]]) -> None:
    assert parse_exemptions(value) == pairs


@pytest.mark.parametrize(
    "value",
    [
        "127.0.0.1",
        "127.0.0.1:",
        ":8080",
        "127.0.0.1:http",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:8080,",
        "::1:8080",
        "[::1:8080",
        "127.0.0.1:\uff18\uff10",  # fullwidth digits
    ],
)
def test_malformed_exemptions_are_refused(value: str) -> None:
    with pytest.raises(FetchError, match=r"^TMS_FETCH_ALLOW: .* is not a host:port pair"):
        parse_exemptions(value)


@pytest.mark.parametrize(
    ("host", "normal"),
    [
        ("LocalHost", "localhost"),
        ("[::1]", "::1"),
        ("0:0::1", "::1"),
        ("example.org.", "example.org"),
    ],
)
def test_normalize_host(host: str, normal: str) -> None:
    assert normalize_host(host) == normal
