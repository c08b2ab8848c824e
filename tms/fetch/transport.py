"""The fetcher's way onto the network: every address vetted where the socket is opened.

Checking a URL's host before handing it to an HTTP client is not enough: the client would look
the name up again, and a name that answered with a public address the first time may answer
with 127.0.0.1 the second (DNS rebinding). So the check lives inside the connection itself.
`VettedTransport` is httpx's transport without proxies, over an httpcore pool whose network
backend resolves the host once (`resolve`: getaddrinfo, so `2130706433`, `0x7f.1` and `127.1`
mean what libc makes of them), refuses it if *any* address it resolves to is not public
(`tms.fetch.addresses.classify`), and connects to one of those checked addresses, never through
a second lookup. TLS still checks the certificate against the host name, sent as SNI.
Unix sockets are never opened.

A refusal here is an `AddressRefused`, the one `FetchError` that the fetch (`tms.fetch.client`)
names as coming from a redirect when it does; the refusal log files it as SSRF.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from ipaddress import ip_address

import httpcore
import httpx

from tms.errors import FetchError, FetchRefused, Refusal, one_line
from tms.fetch.addresses import IPAddress, classify, describe, normalize_host


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to, in the resolver's order (getaddrinfo, off the loop)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"fetch failed: cannot resolve {host} ({one_line(exc)})") from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ip_address(str(info[4][0]))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchError(f"fetch failed: cannot resolve {host} (no addresses)")
    return addresses


class AddressRefused(FetchRefused):
    """The host resolves to an address the policy refuses: what an attacker probing for
    internal services meets, so the refusal log files it as SSRF."""

    refusal = Refusal.SSRF


class VettedTransport(httpx.AsyncBaseTransport):
    """httpx's transport, minus proxies, over an httpcore pool that uses `_VettedBackend`.

    `exempt` holds the `(host, port)` pairs spared the address policy (TMS_FETCH_ALLOW, for
    tests); `ssl_context` replaces certifi's authorities when given.
    """

    def __init__(
        self, exempt: frozenset[tuple[str, int]], ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or _default_tls(),
            network_backend=_VettedBackend(exempt),
            http1=True,
            http2=False,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._pool.handle_async_request(
            httpcore.Request(
                method=request.method,
                url=httpcore.URL(
                    scheme=request.url.raw_scheme,
                    host=request.url.raw_host,
                    port=request.url.port,
                    target=request.url.raw_path,
                ),
                headers=request.headers.raw,
                content=request.stream,
                extensions=request.extensions,
            )
        )
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """certifi's authorities, verification on; built once (loading them takes a while)."""
    return httpx.create_ssl_context(trust_env=False)


class _VettedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, check every address, then connect to a checked one: no second DNS lookup."""

    def __init__(self, exempt: frozenset[tuple[str, int]]) -> None:
        self._exempt = exempt
        self._network = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve(host, port)
        if (normalize_host(host), port) not in self._exempt:
            for address in addresses:
                label = classify(address)
                if label is None:
                    continue
                if str(address) == normalize_host(host):  # the URL names the address itself
                    raise AddressRefused(f"refused: {host} is {describe(label)}")
                raise AddressRefused(f"refused: {host} resolves to {describe(label)} ({address})")
        failure = httpcore.ConnectError(f"{host} has no address")
        for address in addresses:
            try:
                return await self._network.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc  # try the next checked address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise FetchRefused("refused: Unix sockets are never fetched").refused_as(Refusal.SSRF)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    """httpcore's response body as httpx wants it, closed with the response."""

    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()
