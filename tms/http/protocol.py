"""HTTP/1.1 for a server on the public internet: uvicorn's protocol, with the limits it lacks.

uvicorn closes idle keep-alive connections, but nothing else: a client that sends its headers or
its body a byte at a time holds a connection (and a file descriptor) for as long as it likes, and
nothing caps how many it holds. Measured before this module, 21,000 slow connections used up the
process's 20,000 descriptors and `/healthz` failed until the clients left. uvicorn has no setting
for either, so its protocol is extended here (uvicorn stays: everything else it does is right):

- a request's head (request line and headers) must arrive within `head_seconds` of the
  connection opening or of the previous response, and be at most `MAX_HEAD_BYTES`;
- its body within `body_seconds` of the head;
- at most `max_connections` connections are held. One more closes the one idle the longest (no
  request in progress: between requests, or still sending its head), so a flood of slow
  connections cannot lock anyone out; only when every connection is busy with a request is the
  new one refused.

A connection past a limit is closed; a request already being served learns it from the ASGI
`http.disconnect` message, as it would from a client that hung up. Behind a reverse proxy these
are a second line; docs/operating.md lists the proxy settings that go with them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 64 * 1024  # request line and headers; a NIP-98 header is at most 16 KiB


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    head_seconds: float = 10.0
    body_seconds: float = 60.0
    max_connections: int = 1000


class GuardedHttpProtocol(HttpToolsProtocol):
    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head = True  # waiting for, or reading, a request's head
        self._in_body = False  # reading a request's body (it may outlast the response)
        self._head_bytes = 0

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits})

    # --- the connection cap ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        idle = self._idle
        if len(self.connections) > self.limits.max_connections:
            oldest = next(iter(idle), None)
            if oldest is None:
                log.warning("refusing a connection: all %d are busy", len(self.connections) - 1)
                self.transport.close()
                return
            oldest._close("the connection limit was reached and it was the longest idle")
        idle[self] = None
        self._arm(self.limits.head_seconds, "its request's head")

    @property
    def _idle(self) -> dict[GuardedHttpProtocol, None]:
        """This server's connections with no request in progress, longest idle first."""
        registry: dict[GuardedHttpProtocol, None] | None = getattr(
            self.server_state, "tms_idle", None
        )
        if registry is None:
            registry = {}
            self.server_state.tms_idle = registry  # type: ignore[attr-defined]
        return registry

    # --- deadlines ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        was_in_head = self._in_head
        super().data_received(data)
        # The head is not complete yet: this all went into it. A chunk that began in a body (its
        # end, then perhaps the next head's start) is not counted: the next one is.
        if was_in_head and self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._close(f"a request head over {MAX_HEAD_BYTES:,} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        if self._deadline is None:
            self._arm(self.limits.head_seconds, "its request's head")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body = True
        self._head_bytes = 0
        self._idle.pop(self, None)
        super().on_headers_complete()
        self._arm(self.limits.body_seconds, "its request's body")

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_body = False
        super().on_message_complete()
        if self.cycle.response_complete:  # answered before its body ended (a 413, a 429...)
            self._await_next()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._in_body:
            self._await_next()
        # Otherwise the rest of the body is still coming: uvicorn drops it, it is not counted as
        # the next request's head, and its deadline stands; its end makes the connection idle.

    def _await_next(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        if not self.transport.is_closing() and not self.pipeline:
            self._idle[self] = None  # to the end: it is the latest idle
            self._arm(self.limits.head_seconds + self.timeout_keep_alive, "a new request")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._idle.pop(self, None)
        super().connection_lost(exc)

    def _arm(self, seconds: float, waiting_for: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, seconds, waiting_for)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, seconds: float, waiting_for: str) -> None:
        self._deadline = None
        self._close(f"no {waiting_for} within {seconds:g} s")

    def _close(self, why: str) -> None:
        if not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("closing the connection of %s: %s", client, why)
            self.transport.close()
