"""WebSocket connections under the HTTP limits (tms.http.websocket): an upgrade whose handshake
the app does not complete within the head deadline is cut off, an upgraded socket outlives
the HTTP protocol's body deadline (the connection is the WebSocket protocol's from the upgrade),
and a client that sends pings and never reads the pongs is no longer read, then closed."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidMessage
from websockets.frames import Frame, Opcode

from tms.http import websocket as websocket_module
from tms.http.protocol import ConnectionLimits, GuardedHttpProtocol
from tms.http.websocket import MAX_FRAGMENTS, WRITE_HIGH_BYTES, uvicorn_options

pytestmark = pytest.mark.anyio
LIMITS = ConnectionLimits(head_seconds=0.5, body_seconds=0.5, max_connections=50, rate_seconds=0.5)
MiB = 1024 * 1024


async def never_accepts(websocket: WebSocket) -> None:
    await asyncio.sleep(3)


async def echoes(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        await websocket.send_text(await websocket.receive_text())


@pytest.fixture(scope="module")
def running() -> Iterator[uvicorn.Server]:
    app = Starlette(
        routes=[WebSocketRoute("/slow", never_accepts), WebSocketRoute("/echo", echoes)]
    )
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        http=GuardedHttpProtocol.with_limits(LIMITS),
        **uvicorn_options(LIMITS, 1024),
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    while not running.started:
        time.sleep(0.02)
    yield running
    running.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def server(running: uvicorn.Server) -> str:
    port = running.servers[0].sockets[0].getsockname()[1]
    return f"ws://127.0.0.1:{port}"


async def test_a_handshake_never_completed_is_cut_off(server: str) -> None:
    started = time.monotonic()
    with pytest.raises((InvalidHandshake, InvalidMessage, EOFError, OSError)):
        async with connect(f"{server}/slow", open_timeout=10):
            pass
    assert time.monotonic() - started < 5


async def test_an_upgraded_socket_outlives_the_http_deadlines(server: str) -> None:
    async with connect(f"{server}/echo") as ws:
        await asyncio.sleep(1.5)  # three times the body deadline
        await ws.send("still here")
        assert await ws.recv() == "still here"


def upgraded(server: str) -> socket.socket:
    """A raw socket past its WebSocket handshake, with small kernel buffers both ways, so that
    what it does not read is soon the server's to hold."""
    host, port = server.removeprefix("ws://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connect: fixed
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    sock.settimeout(5)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /echo HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def test_a_client_that_pings_and_never_reads_is_no_longer_read_then_closed(
    running: uvicorn.Server, server: str
) -> None:
    """Before, every ping was read and its pong buffered for a client that never read them:
    256 MB of pings held 245 MB of pongs until it left. Now the server stops reading it once
    its pongs are past the write buffer's bound, and drops it when it still does not read."""
    connections = running.server_state.connections  # uvicorn's: HTTP and WebSocket ones
    peak = 0
    done = threading.Event()

    def sample() -> None:  # the server's unsent bytes, on every socket it holds
        nonlocal peak
        while not done.is_set():
            try:
                held = [c.transport.get_write_buffer_size() for c in list(connections)]
            except RuntimeError:  # changed while listed
                continue
            peak = max([peak, *held])
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    pings = Frame(Opcode.PING, b"p" * 125).serialize(mask=True, extensions=[]) * 512
    sock = upgraded(server)
    sent, closed, started = 0, False, time.monotonic()
    try:
        with sock:
            sock.settimeout(1)
            pending = memoryview(pings)
            while time.monotonic() - started < 10 and sent < 256 * MiB:
                try:
                    n = sock.send(pending)
                except TimeoutError:  # not read: wait for the close
                    continue
                except OSError:  # reset: closed
                    closed = True
                    break
                sent += n
                pending = pending[n:] or memoryview(pings)  # whole frames, one after another
    finally:
        done.set()
        sampler.join(5)
    assert closed, f"still open after {time.monotonic() - started:.1f} s, {sent:,} bytes sent"
    assert peak <= WRITE_HIGH_BYTES + MiB, f"{peak:,} bytes of pongs held"


def test_a_message_in_too_many_fragments_is_closed_saying_why(server: str) -> None:
    """Each fragment costs the server a frame's memory beyond its bytes: a message in thousands
    of one-byte fragments would cost many times its size."""
    sock = upgraded(server)
    with sock:
        first = Frame(Opcode.TEXT, b"x", fin=False).serialize(mask=True, extensions=[])
        more = Frame(Opcode.CONT, b"x", fin=False).serialize(mask=True, extensions=[])
        with contextlib.suppress(OSError):  # closed before it all went
            sock.sendall(first + more * (MAX_FRAGMENTS + 10))
        answer = b""
        while len(answer) < 4 and (chunk := sock.recv(4096)):
            answer += chunk
    code = int.from_bytes(answer[2:4], "big")
    assert answer[0] == 0x88 and code == 1009, answer[:80]  # a close frame: message too big
    assert b"fragments" in answer


@pytest.fixture(scope="module")
def patient() -> Iterator[str]:
    """An echo server that gives a message 30 s to end, at any rate: only the bytes decide."""
    limits = ConnectionLimits(body_seconds=30, rate_seconds=30, body_min_rate=0, max_connections=50)
    app = Starlette(routes=[WebSocketRoute("/echo", echoes)])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        http=GuardedHttpProtocol.with_limits(limits),
        **uvicorn_options(limits, MiB),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"ws://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_unfinished_messages_are_capped_in_bytes_across_sockets(
    patient: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All sockets' unfinished messages together hold at most `PARTIAL_BYTES` (1 MiB here):
    two sockets each send part of a 1,000,000-byte message; past the cap, the one holding the
    most is closed saying why, and the other ends its message and gets its echo."""
    monkeypatch.setattr(websocket_module, "PARTIAL_BYTES", MiB)
    payload = b"x" * 1_000_000
    frame = Frame(Opcode.TEXT, payload).serialize(mask=True, extensions=[])
    big, small = upgraded(patient), upgraded(patient)
    with big, small:
        big.sendall(frame[:700_000])  # under the cap
        small.sendall(frame[:500_000])  # 1,200,000 in all: over it, the big one the most
        answer = b""
        while len(answer) < 4 and (chunk := big.recv(4096)):
            answer += chunk
        assert answer[0] == 0x88, answer[:80]  # a close frame
        assert int.from_bytes(answer[2:4], "big") == 1008
        assert b"unfinished messages held 1 MiB" in answer
        small.sendall(frame[500_000:])
        echoed = b""
        while len(echoed) < len(payload) + 4:
            chunk = small.recv(1 << 20)
            assert chunk, "closed"
            echoed += chunk
        assert echoed.endswith(payload)
