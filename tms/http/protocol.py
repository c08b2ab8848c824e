"""HTTP/1.1 for a server on the public internet: uvicorn's protocol, with the limits it lacks.

uvicorn closes idle keep-alive connections, but nothing else: a client that sends its headers or
its body a byte at a time holds a connection (and a file descriptor) for as long as it likes, and
nothing caps how many it holds. Measured before this module, 21,000 slow connections used up the
process's 20,000 descriptors and `/healthz` failed until the clients left; later, 1,000
connections that sent their headers and then trickled a body counted as busy, were never evicted,
and locked every other client out for a minute. uvicorn has no setting for any of it, so its
protocol is extended here (uvicorn stays: everything else it does is right):

- a request's head (request line and headers) must arrive within `head_seconds` of the
  connection opening or of the previous response, and be at most `MAX_HEAD_BYTES`;
- its body within `body_seconds` of the head, and, judged over each `rate_seconds` after the
  first, at `body_min_rate` bytes a second at least (not while the server itself holds the body
  back: reading paused while the app catches up, or a `100 Continue` not yet sent);
- one client address (an IPv6 one by its /64) holds at most `per_address` connections; one more
  closes that address's longest idle connection, or is refused if none is idle. The trusted
  proxies (`TMS_TRUSTED_PROXIES`) are not capped: their clients are many, and the proxy caps them;
- at most `max_connections` connections are held, WebSocket ones at most `websockets` of them:
  the rest (`http_reserve`, a tenth unless set) is for HTTP, so that however many sockets are
  held, `/healthz` and MCP get in. One more connection at either cap closes one of the crowd:
  the heaviest connection of its pool (HTTP or WebSocket), a connection weighing as many as the
  connections of its address, or of its key (`tms.http.crowds`: the key a socket authenticated
  as), whichever is more. Of those, the longest idle (no request in progress, no subscription);
  else the slowest upload (the lowest rate among bodies past their first `rate_seconds`); else
  the oldest, when the new one's address holds fewer. Failing those, an idle connection of the
  new one's own address or of a trusted proxy; only then is the new connection refused: it is
  the crowd. So neither a flood of slow connections, nor one address's crowd, nor 1,000 sockets
  of a key spread over 1,000 addresses can lock out another client, `/healthz` included, and a
  crowd churns its own connections, not others'.

A connection past a limit is closed; a request already being served learns it from the ASGI
`http.disconnect` message, as it would from a client that hung up. Refusals and evictions are
logged a line at a time at most every `NOTICE_SECONDS`, with counts, so a flood cannot flood the
log. Behind a reverse proxy these are a second line; docs/operating.md lists the proxy settings
that go with them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol, cast

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from tms.config import Settings
from tms.guard import shared
from tms.guard.clients import Network, is_trusted
from tms.guard.rates import budget_of
from tms.http.crowds import Crowds

log = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 64 * 1024  # request line and headers; a NIP-98 header is at most 16 KiB
NOTICE_SECONDS: Final = 10.0  # one log line per kind of refusal or eviction at most this often
# Under `tms serve --workers N`: how often a worker looks whether the workers together hold more
# WebSocket connections than their share, and closes its part of the excess (`keep_within`).
TRIM_SECONDS: Final = 0.5


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    head_seconds: float = 10.0
    body_seconds: float = 60.0
    max_connections: int = 10_000
    per_address: int = 64  # connections one client address holds
    body_min_rate: int = 1024  # bytes a second a body must keep up, after its first window
    rate_seconds: float = 5.0  # the window the body's rate is judged over
    uncapped: tuple[Network, ...] = ()  # addresses with no per-address cap: the trusted proxies
    http_reserve: int | None = None  # connections WebSocket ones never take; None: a tenth

    @property
    def websockets(self) -> int:
        """WebSocket connections held at most: the cap less what is kept for HTTP."""
        reserve = self.http_reserve
        if reserve is None:
            reserve = max(1, self.max_connections // 10)
        return max(1, self.max_connections - reserve)

    @classmethod
    def of(cls, settings: Settings, max_connections: int | None = None) -> ConnectionLimits:
        """The limits `settings` set (`max_connections` instead of theirs, when given)."""
        return cls(
            head_seconds=settings.head_seconds,
            body_seconds=settings.body_seconds,
            max_connections=max_connections or settings.max_connections,
            per_address=settings.max_connections_per_address,
            body_min_rate=settings.body_min_rate,
            uncapped=settings.trusted_proxies,
            http_reserve=settings.http_reserve,
        )


class Held(Protocol):
    """A connection the limits count: an HTTP one, or a WebSocket one (`tms.http.websocket`)."""

    address: str | None  # whose connection it counts as; None: not capped
    key: str | None  # the key it authenticated as (a WebSocket one), once the app says
    opened: float  # `time.monotonic()` when it opened

    def close_for(self, why: str) -> None: ...


class Connections:
    """One server's connections, HTTP and WebSocket alike, as the limits need to see them."""

    def __init__(self) -> None:
        self.idle: dict[Held, None] = {}  # nothing in progress; longest first
        self.uploads: dict[GuardedHttpProtocol, None] = {}  # reading a request's body
        self.by_address: dict[str, dict[Held, None]] = {}  # oldest first
        self.http = Crowds()  # the HTTP connections, by address
        self.sockets = Crowds()  # the WebSocket ones, by address and key
        self.partial: dict[Held, int] = {}  # bytes of messages begun and not ended, by socket
        self.partial_bytes = 0  # their sum
        self.notices: Counter[str] = Counter()
        self.noticed = 0.0
        # Under `tms serve --workers N`: the counts the caps read are every worker's.
        self.worker = shared.current()
        self._trim: asyncio.TimerHandle | None = None

    def add(self, connection: Held, *, idle: bool = True, socket: bool = False) -> None:
        if idle:
            self.idle[connection] = None
        if connection.address is not None:
            self.by_address.setdefault(connection.address, {})[connection] = None
        pool = self.sockets if socket else self.http
        if connection not in pool:
            self._share(connection, socket, 1)
        pool.add(connection)

    def _share(self, connection: Held, socket: bool, change: int) -> None:
        """Tell the other workers that this one holds one connection more (or fewer)."""
        if self.worker is None:
            return
        counts, slot = self.worker.counts, self.worker.slot
        counts.add("connections", change, owner=slot)
        if socket:
            counts.add("sockets", change, owner=slot)
        if connection.address is not None:
            counts.add(f"address/{connection.address}", change, owner=slot)

    def elsewhere(self, what: str) -> int:
        """What the other workers hold of `what` ("connections", "sockets", "address/<a>")."""
        if self.worker is None:
            return 0
        return self.worker.counts.total(what, besides=self.worker.slot)

    def keep_within(self, websockets: int) -> None:
        """Under workers, each worker looks every `TRIM_SECONDS`, while it holds WebSocket
        connections, whether the workers together hold more than `websockets`: a worker with
        none of the crowd to close lets a light newcomer in over the share (`tms.http.websocket`),
        and the worker holding the heaviest crowd (by address or by key, as `tms.http.crowds`
        weighs them) closes the excess from it. A crowd thus pays at the cap whichever workers
        its sockets landed on, and a member's one socket is not closed for it."""
        if self.worker is None or self._trim is not None:
            return
        self._trim = asyncio.get_running_loop().call_later(
            TRIM_SECONDS, self._trim_excess, websockets
        )

    def _trim_excess(self, websockets: int) -> None:
        self._trim = None
        if self.worker is None:
            return
        counts, slot = self.worker.counts, self.worker.slot
        counts.put("heaviest", self.sockets.top, owner=slot)
        here = len(self.sockets)
        excess = here + self.elsewhere("sockets") - websockets
        heaviest = counts.largest("heaviest", besides=slot)
        if excess > 0 and here and self.sockets.top >= heaviest:
            # The heaviest crowd's worker closes the excess; two as heavy share it.
            part = excess if self.sockets.top > heaviest else -(-excess // 2)
            for _ in range(min(part, here)):
                victim, why = self.victim(self.sockets, None, time.monotonic())
                if victim is None:
                    break
                self.notice(f"closed {why}, the workers together over the WebSocket limit")
                victim.close_for(f"the WebSocket limit was reached and it was {why}")
        if self.sockets:
            self.keep_within(websockets)
        else:
            counts.put("heaviest", 0, owner=slot)

    def sockets_held(self) -> int:
        """WebSocket connections held, by every worker."""
        return len(self.sockets) + self.elsewhere("sockets")

    def remove(self, connection: Held) -> None:
        if connection in self.http:
            self._share(connection, False, -1)
        elif connection in self.sockets:
            self._share(connection, True, -1)
        self.idle.pop(connection, None)
        self.uploads.pop(connection, None)  # type: ignore[call-overload]
        self.http.remove(connection)
        self.sockets.remove(connection)
        self.partial_bytes -= self.partial.pop(connection, 0)
        if connection.address is not None:
            mine = self.by_address.get(connection.address)
            if mine is not None:
                mine.pop(connection, None)
                if not mine:
                    del self.by_address[connection.address]

    def held_by(self, address: str | None) -> int:
        """Connections `address` holds, with every worker."""
        if address is None:
            return 0
        return len(self.by_address.get(address, ())) + self.elsewhere(f"address/{address}")

    def victim(self, pool: Crowds, address: str | None, now: float) -> tuple[Held | None, str]:
        """Whom a new connection from `address` replaces at `pool`'s cap, and why; None:
        nobody, refuse it. One of the heaviest connections of the pool (`tms.http.crowds`):
        its longest idle, else its slowest upload, else, when the new one's address holds fewer
        connections of the pool than they weigh, its oldest. Failing that, an idle connection of
        the pool of the new one's own address or of an uncapped one (a proxy's keep-alive).
        A client holding few connections thus never loses one to a crowd of another's, and a
        crowd, however many addresses it spreads over, loses its own."""
        top = pool.top
        if top:
            idle = next((c for c in self.idle if c in pool and pool.weight(c) == top), None)
            if idle is not None:
                return idle, "the longest idle of the crowd holding the most"
            slowest = min(
                (
                    c
                    for c in self.uploads
                    if c in pool and c._judged_at(now) and pool.weight(c) == top
                ),
                key=lambda c: c._body_bytes / (now - c._body_started),
                default=None,
            )
            if slowest is not None:
                return slowest, "the slowest upload of the crowd holding the most"
            own = 0 if address is None else pool.size(("address", address))
            if own < top:
                oldest = cast("Held | None", next(pool.heaviest(), None))
                if oldest is not None:
                    return oldest, "the oldest of the crowd holding the most"
        idle = next(
            (c for c in self.idle if c in pool and (c.address is None or c.address == address)),
            None,
        )
        if idle is not None:
            return idle, "the longest idle of the same or an uncapped address"
        return None, ""

    def notice(self, what: str) -> None:
        """Count an event for the log, and write the counts at most every `NOTICE_SECONDS`."""
        self.notices[what] += 1
        now = time.monotonic()
        if now - self.noticed >= NOTICE_SECONDS:
            self.noticed = now
            said = "; ".join(f"{what}: {n:,}" for what, n in self.notices.most_common())
            self.notices.clear()
            log.warning("connection limits, since the last such line: %s", said)


def connections_of(server_state: ServerState) -> Connections:
    """The one registry of a server's connections, kept on uvicorn's server state."""
    registry: Connections | None = getattr(server_state, "tms_connections", None)
    if registry is None:
        registry = Connections()
        server_state.tms_connections = registry  # type: ignore[attr-defined]
    return registry


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
        self._rate_check: asyncio.TimerHandle | None = None
        self._in_head = True  # waiting for, or reading, a request's head
        self._in_body = False  # reading a request's body (it may outlast the response)
        self._head_bytes = 0
        self._registered = False
        self.opened = time.monotonic()
        self.address: str | None = None  # whose connection it counts as; None: not capped
        self.key: str | None = None  # an HTTP connection counts by its address alone
        self._body_started = 0.0
        self._body_bytes = 0
        self._window_started = 0.0
        self._window_bytes = 0

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits})

    @property
    def _all(self) -> Connections:
        return connections_of(self.server_state)

    # --- the connection caps --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits, registry = self.limits, self._all
        peer = self.client[0] if self.client else None
        if peer is not None and not is_trusted(peer, limits.uncapped):
            self.address = budget_of(peer)
        if registry.held_by(self.address) >= limits.per_address:
            victim = next((c for c in registry.idle if c.address == self.address), None)
            if victim is None:
                registry.notice("refused: the address holds its most connections, all busy")
                self._refuse()
                return
            registry.notice("closed the longest idle of an address at its most connections")
            victim.close_for("its address reached its connection limit and it was the longest idle")
        if len(self.connections) + registry.elsewhere("connections") > limits.max_connections:
            # The WebSocket connections keep within their share (`tms.http.websocket`): beyond
            # it (the share lowered, a burst) they pay; else the HTTP ones, among themselves.
            # Each worker picks among its own: the kernel spreads a crowd over all of them.
            over = registry.sockets_held() > limits.websockets
            pool = registry.sockets if over else registry.http
            victim, why = registry.victim(pool, self.address, time.monotonic())
            if victim is None:
                registry.notice("refused: every connection busy, none slow, no crowd to give way")
                self._refuse()
                return
            registry.notice(f"closed {why}, at the connection limit")
            victim.close_for(f"the connection limit was reached and it was {why}")
        registry.add(self)
        self._registered = True
        self._arm(limits.head_seconds, "its request's head")

    def _refuse(self) -> None:
        self.transport.close()
        self.connections.discard(self)

    def _judged_at(self, now: float) -> bool:
        """Whether this upload is judged by its rate: past its first `rate_seconds` (as for the
        minimum rate), and not held back by the server."""
        return now - self._body_started >= self.limits.rate_seconds and not self._held_back()

    def _held_back(self) -> bool:
        """Whether the server, not the client, is why the body is not arriving: reading paused
        (the app has not taken what came, or a pipelined request waits), or a `100 Continue`
        the client waits for not yet sent."""
        return self.flow.read_paused or bool(
            self.cycle is not None and getattr(self.cycle, "waiting_for_100_continue", False)
        )

    # --- deadlines ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        was_in_head = self._in_head
        super().data_received(data)
        # The head is not complete yet: this all went into it. A chunk that began in a body (its
        # end, then perhaps the next head's start) is not counted: the next one is.
        if was_in_head and self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self.close_for(f"a request head over {MAX_HEAD_BYTES:,} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        if self._deadline is None:
            self._arm(self.limits.head_seconds, "its request's head")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._in_body = True
        self._head_bytes = 0
        registry = self._all
        registry.idle.pop(self, None)
        if self._registered:
            registry.uploads[self] = None
        now = time.monotonic()
        self._body_started = self._window_started = now
        self._body_bytes = self._window_bytes = 0
        super().on_headers_complete()
        self._arm(self.limits.body_seconds, "its request's body")
        if self.limits.body_min_rate > 0:
            self._arm_rate_check()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        self._window_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._end_body()
        super().on_message_complete()
        if self.parser.should_upgrade() and self._should_upgrade():
            return  # a WebSocket upgrade: there is no HTTP cycle, the connection moves on
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
        if not self.transport.is_closing() and not self.pipeline and self._registered:
            self._all.idle[self] = None  # to the end: it is the latest idle
            self._arm(self.limits.head_seconds + self.timeout_keep_alive, "a new request")

    def _end_body(self) -> None:
        self._in_body = False
        self._all.uploads.pop(self, None)
        if self._rate_check is not None:
            self._rate_check.cancel()
            self._rate_check = None

    def handle_websocket_upgrade(self) -> None:
        """The connection becomes a WebSocket's (`tms.http.websocket`), which counts itself
        from here: its HTTP limits and deadline end with the HTTP."""
        self._disarm()
        self._end_body()
        self._unregister()
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._end_body()
        self._unregister()
        super().connection_lost(exc)

    def _unregister(self) -> None:
        """Out of the counts at once (uvicorn's included), not when the transport gets round to
        reporting the connection lost: the next connection, in the same turn of the loop, must
        not count it, nor pick it again to close."""
        if self._registered:
            self._all.remove(self)
            self._registered = False
        self.connections.discard(self)

    def _arm(self, seconds: float, waiting_for: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, seconds, waiting_for)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, seconds: float, waiting_for: str) -> None:
        self._deadline = None
        self.close_for(f"no {waiting_for} within {seconds:g} s")

    # --- the body's pace ------------------------------------------------------------------------

    def _arm_rate_check(self) -> None:
        self._rate_check = self.loop.call_later(self.limits.rate_seconds, self._check_rate)

    def _check_rate(self) -> None:
        """Every `rate_seconds` of a body: was it at least `body_min_rate` over the window?"""
        self._rate_check = None
        if not self._in_body or self.transport.is_closing():
            return
        now = time.monotonic()
        elapsed = now - self._window_started
        wanted = self.limits.body_min_rate * elapsed
        if not self._held_back() and self._window_bytes < wanted:
            self._all.notice("closed a body slower than the minimum rate")
            self.close_for(
                f"its body came at {self._window_bytes / elapsed:,.0f} bytes/s over "
                f"{elapsed:.1f} s, under the minimum of {self.limits.body_min_rate:,}"
            )
            return
        self._window_started, self._window_bytes = now, 0
        self._arm_rate_check()

    def close_for(self, why: str) -> None:
        if not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("closing the connection of %s: %s", client, why)
            self.transport.close()
        self._disarm()
        self._end_body()
        self._unregister()
