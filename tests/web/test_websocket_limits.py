"""WebSocket connections under the HTTP limits (tms.http.websocket): an upgrade whose handshake
the app does not complete within the head deadline is cut off, and an upgraded socket outlives
the HTTP protocol's body deadline (the connection is the WebSocket protocol's from the upgrade)."""

from __future__ import annotations

import asyncio
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

from tms.http.protocol import ConnectionLimits, GuardedHttpProtocol
from tms.http.websocket import uvicorn_options

pytestmark = pytest.mark.anyio
LIMITS = ConnectionLimits(head_seconds=0.5, body_seconds=0.5, max_connections=50)


async def never_accepts(websocket: WebSocket) -> None:
    await asyncio.sleep(3)


async def echoes(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        await websocket.send_text(await websocket.receive_text())


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
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
    port = running.servers[0].sockets[0].getsockname()[1]
    yield f"ws://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(10)


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
