"""WebSocket connections under the same limits as HTTP ones (`tms.http.protocol`).

uvicorn hands a connection that asks to upgrade to its WebSocket protocol, which counts it among
the server's connections but knows none of our limits. This subclass adds them:

- the handshake (the app accepting) must complete within `head_seconds` of the upgrade;
- it counts, as it did as an HTTP connection, in the registry the HTTP protocol keeps
  (`tms.http.protocol.Connections`): towards its address's cap and the server's; a connection
  the app calls idle (no subscription: `idle(True)`) is among the idle ones, so that at a cap
  the longest idle connection of either kind is closed to make room, never a busy one;
- the app may `abort()` a connection whose client stopped reading: a polite close would wait
  for the client to read it, and its unread bytes would hold the socket meanwhile;
- the app may `send_texts(texts)`: several text messages framed at once and written in one
  system call, where ASGI's `websocket.send` writes each message on its own. A relay sends
  many small messages at once (a batch's events to each of its subscribers, a group's OKs):
  one write per message was the largest cost of fanning events out.

`abort`, `idle` and `send_texts` reach the app through the scope's extensions, under
`EXTENSION`. The client's
message size is capped by uvicorn (`ws_max_size`, a little above what the relay accepts, so that
a message just over the relay's limit is answered with a NOTICE rather than a close); pings every
20 s (uvicorn's default) find peers that went away without a word.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from uvicorn.config import Config
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.exceptions import InvalidState
from websockets.http11 import Request

from tms.guard.clients import is_trusted
from tms.guard.rates import budget_of
from tms.http.protocol import ConnectionLimits, Connections, connections_of

log = logging.getLogger(__name__)

EXTENSION: Final = "tms.websocket"
SLACK_BYTES: Final = 1024 * 1024  # above the app's own limit, so that it can answer


class _Lent:
    """What the app may do to its connection."""

    def __init__(self, protocol: GuardedWebSocketProtocol) -> None:
        self._protocol = protocol

    def abort(self) -> None:
        self._protocol.abort()

    def idle(self, flag: bool) -> None:
        self._protocol.set_idle(flag)

    async def send_texts(self, texts: Sequence[str]) -> None:
        await self._protocol.send_texts(texts)


class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.server_state_ref = server_state  # the registry of connections lives there
        self._deadline: asyncio.TimerHandle | None = None
        self.address: str | None = None  # whose connection it counts as; None: not capped
        self.opened = time.monotonic()

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedWebSocketProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # The HTTP connection it was counted as until the upgrade (its address was within
        # its cap then) gave its place up: this one takes it.
        peer = self.client[0] if self.client else None
        if peer is not None and not is_trusted(peer, self.limits.uncapped):
            self.address = budget_of(peer)
        self._all.add(self, idle=False)
        seconds = self.limits.head_seconds
        self._deadline = self.loop.call_later(seconds, self._handshake_expired, seconds)

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the app runs with it: it has not started yet
            scope["extensions"][EXTENSION] = _Lent(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._all.remove(self)
        super().connection_lost(exc)

    def _handshake_expired(self, seconds: float) -> None:
        self._deadline = None
        if not self.handshake_complete:
            self.close_for(f"no WebSocket handshake within {seconds:g} s")

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # --- the app's levers, and the connection cap's -----------------------------------------

    async def send_texts(self, texts: Sequence[str]) -> None:
        """What ASGI's `websocket.send` does for each text, in one write: waits while the
        transport's buffer is full (the client reads slowly), and raises `ClientDisconnected`
        once the connection is gone or closing, as `send` does."""
        await self.writable.wait()
        if self.disconnected or self.close_sent or not self.handshake_complete:
            raise ClientDisconnected()
        try:
            for text in texts:
                self.conn.send_text(text.encode())
        except InvalidState:
            raise ClientDisconnected() from None
        self.transport.write(b"".join(self.conn.data_to_send()))

    def abort(self) -> None:
        if not self.disconnected:
            self.transport.abort()

    def set_idle(self, flag: bool) -> None:
        if flag and not self.disconnected:
            self._all.idle[self] = None  # to the end: the latest idle
        else:
            self._all.idle.pop(self, None)

    def close_for(self, why: str) -> None:
        """Closed to make room, or for a handshake that never came (the HTTP protocol's caps
        call this on the longest idle connection)."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("closing the WebSocket connection of %s: %s", client, why)
        self._all.remove(self)
        self.transport.abort()

    @property
    def _all(self) -> Connections:
        return connections_of(self.server_state_ref)


def uvicorn_options(limits: ConnectionLimits, max_message_bytes: int) -> dict[str, Any]:
    """What `uvicorn.Config` needs for WebSocket connections under these limits. No
    per-message compression: a live event goes to many subscribers, and compressing it once per
    connection would cost more CPU than the bytes are worth, and memory on every connection."""
    return {
        "ws": GuardedWebSocketProtocol.with_limits(limits),
        "ws_max_size": max_message_bytes + SLACK_BYTES,
        "ws_per_message_deflate": False,
    }
