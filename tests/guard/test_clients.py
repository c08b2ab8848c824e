"""The client's address: the peer's, unless the peer is a trusted proxy; then the nearest
address in X-Forwarded-For that is not one (pure: no server)."""

from __future__ import annotations

import contextlib
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import ConfigError
from tms.guard.clients import client_address, parse_networks

PROXIES = parse_networks("TMS_TRUSTED_PROXIES", "10.0.0.0/8, ::1, 127.0.0.1")


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_address("203.0.113.9", ["198.51.100.1"], ()) == "203.0.113.9"


def test_a_peer_that_is_no_trusted_proxy_cannot_name_another_client() -> None:
    assert client_address("203.0.113.9", ["198.51.100.1"], PROXIES) == "203.0.113.9"


def test_a_trusted_proxy_names_the_client() -> None:
    assert client_address("10.0.0.2", ["198.51.100.1"], PROXIES) == "198.51.100.1"
    assert client_address("::1", ["2001:db8::7"], PROXIES) == "2001:db8::7"


def test_a_forged_header_behind_an_appending_proxy_names_the_true_client() -> None:
    # The client wrote "1.2.3.4"; the proxy appended the address it saw.
    assert client_address("10.0.0.2", ["1.2.3.4, 198.51.100.1"], PROXIES) == "198.51.100.1"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right() -> None:
    headers = ["198.51.100.1, 10.1.1.1", "10.2.2.2"]  # two header lines, read in order
    assert client_address("10.0.0.2", headers, PROXIES) == "198.51.100.1"


def test_ports_and_brackets_as_proxies_write_them() -> None:
    assert client_address("10.0.0.2", ["198.51.100.1:5555"], PROXIES) == "198.51.100.1"
    assert client_address("10.0.0.2", ["[2001:db8::7]:443"], PROXIES) == "2001:db8::7"


def test_garbage_stops_the_walk_at_the_nearest_address_read() -> None:
    assert client_address("10.0.0.2", ["unknown, 198.51.100.1"], PROXIES) == "198.51.100.1"
    assert client_address("10.0.0.2", ["198.51.100.1, unknown"], PROXIES) == "10.0.0.2"
    assert client_address("10.0.0.2", [], PROXIES) == "10.0.0.2"


def test_the_setting_names_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match=r"TMS_TRUSTED_PROXIES.*'nginx'"):
        parse_networks("TMS_TRUSTED_PROXIES", "10.0.0.0/8, nginx")
    assert parse_networks("TMS_TRUSTED_PROXIES", " , ") == ()


@given(
    peer=st.ip_addresses().map(str),
    header=st.lists(st.ip_addresses().map(str) | st.text(max_size=20), max_size=5).map(", ".join),
)
def test_any_header_gives_the_peer_or_an_address_it_names(peer: str, header: str) -> None:
    found = client_address(peer, [header], PROXIES)
    named = [ipaddress.ip_address(a) for a in _addresses(header)]
    assert found == peer or (found is not None and ipaddress.ip_address(found) in named)


def _addresses(header: str) -> list[str]:
    found = []
    for hop in header.split(","):
        with contextlib.suppress(ValueError):
            found.append(str(ipaddress.ip_address(hop.strip())))
    return found
