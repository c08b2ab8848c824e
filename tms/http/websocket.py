"""WebSocket connections under the same limits as HTTP ones (`tms.http.protocol`), and the bounds
uvicorn's WebSocket protocol lacks.

uvicorn hands a connection that asks to upgrade to its WebSocket protocol, which counts it among
the server's connections but knows none of our limits. This subclass adds them:

- the handshake (the app accepting) must complete within `head_seconds` of the upgrade;
- it counts, as it did as an HTTP connection, in the registry the HTTP protocol keeps
  (`tms.http.protocol.Connections`): towards its address's cap and the server's, and among the
  WebSocket connections, which hold at most `limits.websockets` (the rest of the server's cap is
  kept for HTTP). It counts by its address, and by its key once the app says which
  (`authenticated(pubkey)`), so that at the cap one of the crowd gives way (`tms.http.crowds`),
  the longest idle of it first: a connection the app calls idle (no subscription: `idle(True)`);
  a socket that cannot get in is answered `503` with `Retry-After`;
- writes: a client that does not read what it is sent (pongs to its pings included: each ping
  is answered, and measured before this, 256 MB of pings from a client that never read held
  245 MB) fills the transport's buffer. Past `WRITE_HIGH_BYTES` the connection stops being read
  (no more pings, no more messages) until the buffer drains below `WRITE_LOW_BYTES`; and if it
  drains slower than `body_min_rate` (at least a byte a second), judged every `rate_seconds`,
  the connection is dropped;
- a message begun and not ended (a frame not all arrived, or fragments without the last) must
  end within `body_seconds` of reading time (time the server itself holds reading back, the app
  busy with the previous message or the client not reading, does not count) and keep up
  `body_min_rate` over each `rate_seconds`, as a request body must; it may have at most
  `MAX_FRAGMENTS` fragments; and all the sockets' unfinished messages together hold at most
  `PARTIAL_BYTES` (the socket holding the most is closed first). Before this, a 16 MiB fragment
  that never ended held 16.6 MB for as long as its sender answered pings;
- the app may `abort()` a connection whose client stopped reading: a polite close would wait
  for the client to read it, and its unread bytes would hold the socket meanwhile;
- the app may `send_texts(texts)`: several text messages framed at once and written in one
  system call, where ASGI's `websocket.send` writes each message on its own. A relay sends
  many small messages at once (a batch's events to each of its subscribers, a group's OKs):
  one write per message was the largest cost of fanning events out; and `drained()`, until
  the kernel has taken what was written, so that the app counts the bytes until then.

`abort`, `idle`, `authenticated`, `send_texts` and `drained` reach the app through the scope's
extensions, under `EXTENSION`. The client's message size is capped by uvicorn (`ws_max_size`, a
little above what the relay accepts, so that a message just over the relay's limit is answered
with a NOTICE rather than a close); pings every 20 s (uvicorn's default) find peers that went
away without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from uvicorn._types import ASGIReceiveEvent
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
MiB: Final = 1024 * 1024
SLACK_BYTES: Final = MiB  # above the app's own limit, so that it can answer
WRITE_HIGH_BYTES: Final = 64 * 1024  # unsent bytes past which the client is no longer read
WRITE_LOW_BYTES: Final = 16 * 1024  # and below which it is read again
MAX_FRAGMENTS: Final = 4096  # of one message: each costs a frame's memory beyond its bytes
PARTIAL_BYTES: Final = 256 * MiB  # unfinished messages, all sockets of the process together
CLOSE_SECONDS: Final = 1.0  # a socket closed for its messages gets this long to read why
MESSAGE_TOO_BIG: Final = 1009
POLICY_VIOLATION: Final = 1008
BUSY_TEXT: Final = b"too many WebSocket connections from this client's address: try later\n"
BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 10\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
    % (len(BUSY_TEXT), BUSY_TEXT)
)


class _Lent:
    """What the app may do to its connection."""

    def __init__(self, protocol: GuardedWebSocketProtocol) -> None:
        self._protocol = protocol

    def abort(self) -> None:
        self._protocol.abort()

    def idle(self, flag: bool) -> None:
        self._protocol.set_idle(flag)

    def authenticated(self, pubkey: str | None) -> None:
        """The connection authenticated as `pubkey`: it counts as that key at the cap."""
        self._protocol.set_key(pubkey)

    def waiting(self) -> bool:
        """Whether a message (or the disconnection) is read already and waits for the app: its
        `receive` returns at once."""
        return not self._protocol.queue.empty()

    async def send_texts(self, texts: Sequence[str]) -> None:
        await self._protocol.send_texts(texts)

    async def drained(self) -> None:
        await self._protocol.drained()


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
        self.key: str | None = None  # the key it authenticated as, once the app says
        self.opened = time.monotonic()
        self._refused = False
        self._write_paused = False  # reading stopped until the client reads what it was sent
        self._drain_check: asyncio.TimerHandle | None = None
        self._drain_mark = 0  # unsent bytes at the last check
        self._drain_since = 0.0
        self._message_check: asyncio.TimerHandle | None = None
        self._window_started = 0.0  # the unfinished message's current window
        self._window_bytes = 0
        self._message_spent = 0.0  # reading time the unfinished message has had

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedWebSocketProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_BYTES, low=WRITE_LOW_BYTES)
        # The HTTP connection it was counted as until the upgrade (its address was within
        # its cap then) gave its place up: this one takes it, within the sockets' share.
        peer = self.client[0] if self.client else None
        if peer is not None and not is_trusted(peer, self.limits.uncapped):
            self.address = budget_of(peer)
        registry = self._all
        if registry.sockets_held() >= self.limits.websockets:
            victim, why = registry.victim(registry.sockets, self.address, time.monotonic())
            if victim is None and registry.elsewhere("sockets") and self._light(registry):
                # The crowd is on the other workers: in, and they close their excess.
                registry.notice("let a WebSocket in over the limit: the crowd is another worker's")
            elif victim is None:
                registry.notice("refused a WebSocket: the sockets' share is full of its crowd")
                self._refused = True
                self.connections.discard(self)  # as a victim is: not counted from here
                self.transport.write(BUSY)
                self.transport.close()
                return
            else:
                registry.notice(f"closed {why}, at the WebSocket limit")
                victim.close_for(f"the WebSocket limit was reached and it was {why}")
        registry.add(self, idle=False, socket=True)
        registry.keep_within(self.limits.websockets)  # under workers: their share, together
        seconds = self.limits.head_seconds
        self._deadline = self.loop.call_later(seconds, self._handshake_expired, seconds)

    def _light(self, registry: Connections) -> bool:
        """Whether this connection's address, with every worker, holds fewer than half the
        sockets' share: let in over the share when this worker has none of the crowd to close
        (one address holding more is its own crowd, and is refused, as one worker refuses it)."""
        return self.address is None or registry.held_by(self.address) * 2 < self.limits.websockets

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self.handshake_initiated and not self.transport.is_closing():
            self._track_message(len(data))

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the app runs with it: it has not started yet
            scope["extensions"][EXTENSION] = _Lent(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._stop_checks()
        self._all.remove(self)
        self.connections.add(self)  # uvicorn's own removes it: it may have been let go already
        super().connection_lost(exc)

    def _handshake_expired(self, seconds: float) -> None:
        self._deadline = None
        if not self.handshake_complete:
            self.close_for(f"no WebSocket handshake within {seconds:g} s")

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _stop_checks(self) -> None:
        for check in (self._drain_check, self._message_check):
            if check is not None:
                check.cancel()
        self._drain_check = self._message_check = None

    # --- a client that does not read ----------------------------------------------------------

    def pause_writing(self) -> None:
        """The unsent bytes passed `WRITE_HIGH_BYTES`: read nothing more (each ping read is a
        pong to send) until the client reads, and check that it does."""
        super().pause_writing()
        if self._write_paused or self.disconnected:
            return
        self._write_paused = True
        self.transport.pause_reading()
        self._drain_mark = self.transport.get_write_buffer_size()
        self._drain_since = time.monotonic()
        self._drain_check = self.loop.call_later(self.limits.rate_seconds, self._check_drain)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_paused = False
        if self._drain_check is not None:
            self._drain_check.cancel()
            self._drain_check = None
        if not self.read_paused and not self.disconnected:  # not held for the app either
            self.transport.resume_reading()

    async def receive(self) -> ASGIReceiveEvent:
        """uvicorn's, which resumes reading once the app has taken every message: not while
        the client has not read what it was sent."""
        message = await super().receive()
        if self._write_paused and not self.disconnected:
            self.transport.pause_reading()
        return message

    def _check_drain(self) -> None:
        self._drain_check = None
        if not self._write_paused or self.disconnected:
            return
        now = time.monotonic()
        size = self.transport.get_write_buffer_size()
        elapsed = now - self._drain_since
        drained = self._drain_mark - size
        wanted = max(1, self.limits.body_min_rate)
        if drained < wanted * elapsed:
            self._all.notice("closed a WebSocket whose client does not read")
            self.close_for(
                f"it read {max(0, drained):,} bytes in {elapsed:.1f} s with {size:,} unsent, "
                f"under the minimum of {wanted:,} bytes/s"
            )
            return
        self._drain_mark, self._drain_since = size, now
        self._drain_check = self.loop.call_later(self.limits.rate_seconds, self._check_drain)

    # --- a message that does not end ----------------------------------------------------------

    def _track_message(self, received: int) -> None:
        """After reading: what the unfinished message (a frame begun, or fragments without the
        last) holds, in this socket's count and the process's, and its clock."""
        held = (self.conn.current_size or 0) + len(self.conn.reader.buffer)
        registry = self._all
        registry.partial_bytes += held - registry.partial.get(self, 0)
        if held:
            registry.partial[self] = held
            if self._message_check is None:  # a message begins
                self._window_started, self._window_bytes = time.monotonic(), 0
                self._message_spent = 0.0
                self._arm_message_check()
            else:
                self._window_bytes += received
        else:
            registry.partial.pop(self, None)
            if self._message_check is not None:  # it ended
                self._message_check.cancel()
                self._message_check = None
        if len(self.frames) > MAX_FRAGMENTS:
            self.fail_for(MESSAGE_TOO_BIG, f"a message in more than {MAX_FRAGMENTS:,} fragments")
        elif registry.partial_bytes > PARTIAL_BYTES:
            largest = max(registry.partial, key=registry.partial.__getitem__)
            registry.notice("closed the socket holding the most of a message, at the process's")
            assert isinstance(largest, GuardedWebSocketProtocol)
            largest.fail_for(
                POLICY_VIOLATION,
                f"unfinished messages held {PARTIAL_BYTES // MiB} MiB, this one the most: "
                "send it again later",
            )

    def _arm_message_check(self) -> None:
        left = self.limits.body_seconds - self._message_spent
        seconds = max(0.01, min(self.limits.rate_seconds, left))
        self._message_check = self.loop.call_later(seconds, self._check_message)

    def _held_back(self) -> bool:
        """Whether the server, not the client, is why the message is not arriving: the app
        has not taken the previous one, or the client's unread bytes stopped the reading
        (which `_check_drain` judges)."""
        return self.read_paused or self._write_paused

    def _check_message(self) -> None:
        self._message_check = None
        if self.disconnected or self.transport.is_closing():
            return
        now = time.monotonic()
        elapsed = now - self._window_started
        if not self._held_back():
            self._message_spent += elapsed
            limit, rate = self.limits.body_seconds, self.limits.body_min_rate
            if self._message_spent >= limit - 0.005:
                self._all.notice("closed a WebSocket message not ended in time")
                self.fail_for(POLICY_VIOLATION, f"a message not ended within {limit:g} s")
                return
            if rate and self._window_bytes < rate * elapsed:
                self._all.notice("closed a WebSocket message slower than the minimum rate")
                self.fail_for(
                    POLICY_VIOLATION,
                    f"a message coming at {self._window_bytes / elapsed:,.0f} bytes/s, under "
                    f"the minimum of {rate:,}",
                )
                return
        self._window_started, self._window_bytes = now, 0
        self._arm_message_check()

    def fail_for(self, code: int, why: str) -> None:
        """Closed for what its client sent: a close frame saying why, given `CLOSE_SECONDS`
        to go out (the client may not read), and out of the counts at once."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("closing the WebSocket connection of %s: %s", client, why)
        self._all.remove(self)
        self._stop_checks()
        if self.disconnected or self.transport.is_closing():
            return
        with contextlib.suppress(InvalidState):
            self.conn.fail(code, why[:120])
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()
        self.loop.call_later(CLOSE_SECONDS, self.transport.abort)

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

    async def drained(self) -> None:
        """Until the transport's buffer is under `WRITE_HIGH_BYTES` again (the kernel has
        taken what was written), or the connection is gone: what the app counts until then
        (`tms.relay.outbox`) includes what a client leaves unread in this process. One stored
        message of 1.9 MB per socket that never read was once held outside every budget."""
        await self.writable.wait()

    def abort(self) -> None:
        if not self.disconnected:
            self.transport.abort()

    def set_idle(self, flag: bool) -> None:
        if flag and not self.disconnected and self in self._all.sockets:
            self._all.idle[self] = None  # to the end: the latest idle
        else:
            self._all.idle.pop(self, None)

    def set_key(self, pubkey: str | None) -> None:
        if self.disconnected:
            return
        self._all.sockets.set_key(self, pubkey)

    def close_for(self, why: str) -> None:
        """Closed to make room, or for a handshake that never came, or a client that does not
        read (the HTTP protocol's caps call this on the longest idle connection)."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("closing the WebSocket connection of %s: %s", client, why)
        self._all.remove(self)
        self._stop_checks()
        self.connections.discard(self)  # not counted by the next connection, in this same turn
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
