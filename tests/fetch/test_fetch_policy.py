"""The fetcher's refusals: schemes, credentials, ports, non-public addresses, redirects, TLS.

Refusals of the address policy must happen before any connection: the `connections` fixture
records every connection attempt, and hosts that really are the test server under another
spelling prove it from the server's side too (it never sees the request).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import httpcore
import pytest
import trustme
from fetch_routes import PLAIN_TEXT, ROUTES
from fetch_site import Site

from tms.errors import FetchError
from tms.fetch import transport
from tms.fetch.addresses import IPAddress
from tms.fetch.client import fetch_url


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with Site(ROUTES) as running:
        yield running


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may send a DNS query: only localhost and numeric spellings are resolved."""
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "localhost" and not re.fullmatch(r"[0-9a-fA-Fx.:]+", str(host)):
            raise AssertionError(f"a test tried to resolve {host!r}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection the fetcher opens, recorded; real connections still go through."""
    attempts: list[tuple[str, int]] = []
    real = httpcore.AnyIOBackend.connect_tcp

    async def recording(
        self: httpcore.AnyIOBackend, host: str, port: int, *args: Any, **kwargs: Any
    ) -> httpcore.AsyncNetworkStream:
        attempts.append((host, port))
        return await real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", recording)
    return attempts


def refusal(url: str, allow: str = "", **options: Any) -> str:
    with pytest.raises(FetchError) as caught:
        asyncio.run(fetch_url(url, allow=allow, **options))
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- URL rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "ftp://example.org/paper.pdf",
            "refused: ftp://example.org/paper.pdf is not an http or https URL",
        ),
        ("file:///etc/passwd", "refused: file:///etc/passwd is not an http or https URL"),
        ("javascript:alert(1)", "refused: javascript:alert(1) is not an http or https URL"),
        ("data:text/plain,hello", "refused: data:text/plain,hello is not an http or https URL"),
        (
            "gopher://127.0.0.1:6379/_INFO",
            "refused: gopher://127.0.0.1:6379/_INFO is not an http or https URL",
        ),
        ("example.org/paper", "refused: example.org/paper is not an http or https URL"),
        ("http:///etc/passwd", "refused: http:///etc/passwd has no host"),
        ("https://", "refused: https:// has no host"),
        (
            "http://user:secret@example.org/",
            "refused: URLs with a user name or password are not fetched",
        ),
        (
            "http://example.org:25/",
            "refused: http://example.org:25/: port 25 is not for the web (browsers block it too)",
        ),
        (
            "http://example.org:6667/",
            "refused: http://example.org:6667/: "
            "port 6667 is not for the web (browsers block it too)",
        ),
        ("http://example.org:0/", "refused: http://example.org:0/: port 0 is not a TCP port"),
        (
            "http://example.org:70000/",
            "refused: http://example.org:70000/: port 70000 is not a TCP port",
        ),
        (
            "http://0177.0.0.1/",
            "refused: http://0177.0.0.1/ is not a valid URL (Invalid IPv4 address: '0177.0.0.1')",
        ),
    ],
)
def test_url_rules(url: str, message: str, connections: list[tuple[str, int]]) -> None:
    assert refusal(url) == message
    assert connections == []


# --- addresses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("localhost", "localhost resolves to a loopback address (127.0.0.1)"),
        ("2130706433", "2130706433 resolves to a loopback address (127.0.0.1)"),
        ("0x7f.1", "0x7f.1 resolves to a loopback address (127.0.0.1)"),
        ("0x7f000001", "0x7f000001 resolves to a loopback address (127.0.0.1)"),
        ("017700000001", "017700000001 resolves to a loopback address (127.0.0.1)"),
        ("127.1", "127.1 resolves to a loopback address (127.0.0.1)"),
        ("0", "0 resolves to an unspecified address (0.0.0.0)"),
        ("0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1 is an IPv4-mapped address"),
    ],
)
def test_this_server_under_other_spellings_is_refused(
    site: Site, host: str, message: str, connections: list[tuple[str, int]]
) -> None:
    """Each host reaches the test server, which is exempt only as 127.0.0.1 (or not at all)."""
    allow = "" if host == "127.0.0.1" else site.allow
    before = len(site.requests)
    assert refusal(site.url("/notes.txt", host=host), allow) == f"refused: {message}"
    assert connections == []
    assert len(site.requests) == before


@pytest.mark.parametrize(
    ("host", "what"),
    [
        ("10.0.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("192.168.1.1", "a private address"),
        ("169.254.169.254", "a link-local address"),  # AWS, GCP and Azure metadata
        ("100.100.100.200", "a shared (CGNAT) address"),  # Alibaba Cloud metadata
        ("100.64.0.1", "a shared (CGNAT) address"),
        ("192.0.0.192", "a reserved address"),  # Oracle Cloud metadata
        ("198.18.0.1", "a benchmarking address"),
        ("192.0.2.10", "a documentation address"),
        ("224.0.0.1", "a multicast address"),
        ("240.0.0.1", "a reserved address"),
        ("255.255.255.255", "a broadcast address"),
        ("[::]", "an unspecified address"),
        ("[::1]", "a loopback address"),
        ("[fe80::1]", "a link-local address"),
        ("[fd00:ec2::254]", "a unique-local address"),  # AWS metadata over IPv6
        ("[fec0::1]", "a site-local address"),
        ("[ff02::1]", "a multicast address"),
        ("[::127.0.0.1]", "an IPv4-compatible address"),
        ("[64:ff9b::a9fe:a9fe]", "a NAT64-embedded link-local address"),
        ("[64:ff9b:1::a00:1]", "a NAT64 local-use address"),
        ("[2002:7f00:1::1]", "a 6to4 address"),
        ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "a Teredo address"),
        ("[2001:db8::1]", "a documentation address"),
        ("[100::1]", "a discard-only address"),
    ],
)
def test_non_public_addresses_are_refused_without_connecting(
    host: str, what: str, connections: list[tuple[str, int]]
) -> None:
    bare = host.strip("[]")
    assert refusal(f"http://{host}/latest/meta-data/") == f"refused: {bare} is {what}"
    assert connections == []


def test_exemption_is_for_that_host_and_port_only(
    site: Site, connections: list[tuple[str, int]]
) -> None:
    other_port = f"127.0.0.1:{site.port + 1 if site.port < 65535 else site.port - 1}"
    assert refusal(site.url("/notes.txt"), other_port) == "refused: 127.0.0.1 is a loopback address"
    assert refusal(site.url("/notes.txt"), f"localhost:{site.port}") == (
        "refused: 127.0.0.1 is a loopback address"
    )
    assert connections == []


def test_malformed_allow_list_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMS_FETCH_ALLOW", "127.0.0.1")
    with pytest.raises(FetchError, match=r"^TMS_FETCH_ALLOW: '127.0.0.1' is not a host:port"):
        asyncio.run(fetch_url("http://127.0.0.1:8080/"))


# --- redirects ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/to-private", "refused: 10.0.0.1 is a private address (a redirect from {})"),
        ("/to-metadata", "refused: 169.254.169.254 is a link-local address (a redirect from {})"),
        ("/to-ipv6-loopback", "refused: ::1 is a loopback address (a redirect from {})"),
        (
            "/to-localhost",
            "refused: localhost resolves to a loopback address (127.0.0.1) (a redirect from {})",
        ),
        (
            "/to-decimal",
            "refused: 2130706433 resolves to a loopback address (127.0.0.1) (a redirect from {})",
        ),
        (
            "/to-file",
            "refused: file:///etc/passwd is not an http or https URL (a redirect from {})",
        ),
        (
            "/to-ftp",
            "refused: ftp://example.org/paper.pdf is not an http or https URL (a redirect from {})",
        ),
        (
            "/to-smtp",
            "refused: http://example.org:25/: port 25 is not for the web (browsers block it too) "
            "(a redirect from {})",
        ),
    ],
)
def test_redirects_out_of_the_allowed_server_are_refused(
    site: Site, path: str, message: str, connections: list[tuple[str, int]]
) -> None:
    assert refusal(site.url(path), site.allow) == message.format(site.url(path))
    assert connections == [("127.0.0.1", site.port)]  # only the allowed server was contacted
    assert site.requests[-1] == path  # the server under another name never saw the redirect


# --- resolution: every address checked, the checked one connected to ------------------------


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> list[tuple[str, int]]:
    from ipaddress import ip_address

    lookups: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[IPAddress]:
        lookups.append((host, port))
        return [ip_address(a) for a in answers]

    monkeypatch.setattr(transport, "resolve", resolve)
    return lookups


def test_a_name_with_any_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, connections: list[tuple[str, int]]
) -> None:
    fake_dns(monkeypatch, ["93.184.215.14", "10.0.0.1"])
    assert refusal("http://evidence.test/") == (
        "refused: evidence.test resolves to a private address (10.0.0.1)"
    )
    assert connections == []


def test_the_connection_goes_to_the_checked_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One lookup per connection, and the socket is opened to the address it returned."""
    lookups = fake_dns(monkeypatch, ["93.184.215.14"])
    opened: list[tuple[str, int]] = []

    async def no_network(
        self: httpcore.AnyIOBackend, host: str, port: int, *args: Any, **kwargs: Any
    ) -> httpcore.AsyncNetworkStream:
        opened.append((host, port))
        raise httpcore.ConnectError("no network in tests")

    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", no_network)
    assert refusal("https://evidence.test/paper") == (
        "fetch failed: could not connect to evidence.test:443 (no network in tests)"
    )
    assert lookups == [("evidence.test", 443)]
    assert opened == [("93.184.215.14", 443)]


def test_nothing_listening(connections: list[tuple[str, int]]) -> None:
    with Site({}) as closed:
        port = closed.port
    message = refusal(f"http://127.0.0.1:{port}/", f"127.0.0.1:{port}")
    assert message.startswith(f"fetch failed: could not connect to 127.0.0.1:{port} (")
    assert connections == [("127.0.0.1", port)]


# --- TLS: connected to the checked address, verified against the host name -----------------


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a certificate for "localhost", client context trusting its CA)."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def test_https_checks_the_certificate_against_the_host_name(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], connections: list[tuple[str, int]]
) -> None:
    server, client = tls
    with Site(ROUTES, tls=server) as secure:
        allow = f"localhost:{secure.port},127.0.0.1:{secure.port}"
        url = secure.url("/notes.txt", host="localhost")
        result = asyncio.run(fetch_url(url, allow=allow, ssl_context=client))
        assert result["text"] == PLAIN_TEXT
        assert connections[-1] == ("127.0.0.1", secure.port)  # the address, not the name
        # The same server by address: its certificate names localhost only.
        assert "certificate verify failed" in refusal(
            secure.url("/notes.txt"), allow, ssl_context=client
        )
        # Without our CA: the default trust store does not know this certificate.
        assert "certificate verify failed" in refusal(url, allow)
