"""Peers that lie: a body that never ends, one that trickles, one that declares too much. Each
call ends by its byte cap or its deadline, whatever the peer does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from tms.fetch.bounded import PeerError, request

pytestmark = pytest.mark.anyio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _serve(handler: Handler) -> AsyncIterator[str]:
    """A peer on 127.0.0.1 answering every connection with `handler`; its connections are
    cancelled and closed when the test is done with it."""
    tasks: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)  # type: ignore[arg-type]
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await handler(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        for writer in writers:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        await server.wait_closed()


async def _endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        writer.write(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
        await writer.drain()


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    with contextlib.suppress(Exception):
        for _ in range(100):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.2)


async def _declares(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\nabc")
    with contextlib.suppress(Exception):
        await writer.drain()
        await asyncio.sleep(5)


async def _honest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n12")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize(
    ("handler", "said"),
    [
        (_endless, "went past 1,000,000 bytes"),
        (_trickle, "no complete answer within 1 s"),
        (_declares, "declares 3,000,000,000 bytes"),
    ],
)
async def test_a_lying_peer_costs_a_bounded_read(handler: Handler, said: str) -> None:
    async with _serve(handler) as url, httpx.AsyncClient() as client:
        started = asyncio.get_running_loop().time()
        with pytest.raises(PeerError, match=said):
            await request(client, "GET", url, max_bytes=1_000_000, deadline=1)
        assert asyncio.get_running_loop().time() - started < 3


async def test_an_honest_answer_comes_back_whole() -> None:
    async with _serve(_honest) as url, httpx.AsyncClient() as client:
        answer = await request(client, "POST", url, max_bytes=10, deadline=5, content=b"x")
    assert (answer.status, answer.body, answer.text) == (409, b"12", "12")
