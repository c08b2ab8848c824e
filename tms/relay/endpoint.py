"""The relay's doors in the app: a WebSocket upgrade on `/` or `/c/<slug>` is the relay (the same
paths as the pages: a browser's GET stays the page), and a GET of either with
`Accept: application/nostr+json` is the NIP-11 document.

A connection is authenticated by NIP-42 AUTH, or by the login cookie of a browser on this very
site: the cookie counts only when the upgrade's `Origin` is this server's own or absent, so no
other site can open a socket that rides a member's login (cross-site WebSocket hijacking: a
browser always sends `Origin` on an upgrade; a client that sends none is not a browser page and
holds the cookie itself). A connection from another origin still works, and authenticates with
AUTH like any Nostr client.

The server's WebSocket protocol (`tms.http.websocket`) lends the app five things through the
scope: `abort`, to drop a client that no longer reads at all (a polite close would wait for it
forever), `idle(flag)`, so that a connection without subscriptions counts as idle for the
connection cap, `authenticated(pubkey)`, so that the cap counts sockets by key as well as by
address, `send_texts`, several messages in one write, and `drained`, until the kernel has
taken them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tms import metrics
from tms.config import Settings
from tms.errors import Refusal
from tms.guard import clients
from tms.http.gate import BLOCKED_WORDS
from tms.http.login import COOKIE, Keyring
from tms.http.origin import signed_origin
from tms.http.websocket import EXTENSION
from tms.nostr.nip42 import normalize_relay_url
from tms.relay import info, management, messages, operator
from tms.relay.connection import Connection
from tms.relay.limits import NOTICE_SECONDS
from tms.relay.prefixes import failure
from tms.relay.shared import Relay

log = logging.getLogger(__name__)

CLOSE_SECONDS: Final = 1.0
POLICY_VIOLATION: Final = 1008

Handler = Callable[[Request], Awaitable[Response]]


def with_info(page: Handler) -> Handler:
    """The page, or the NIP-11 document when the GET asks for it."""

    async def handler(request: Request) -> Response:
        if info.wants_info(request.headers.get("accept")):
            slug = request.path_params.get("slug")
            relay: Relay | None = getattr(request.app.state, "relay", None)
            key = None if relay is None or relay.key is None else relay.key.pubkey
            settings: Settings = request.app.state.settings
            blocklist = getattr(request.app.state, "blocklist", None)
            return JSONResponse(
                info.document(
                    slug,
                    None if relay is None else relay.throttle.limits,
                    key,
                    management=slug is not None or bool(settings.operator_keys),
                    details=None if blocklist is None else blocklist.details,
                ),
                media_type=info.MEDIA_TYPE,
                headers={**info.CORS, "Vary": "Accept", "Cache-Control": "no-store"},
            )
        return await page(request)

    return functools.wraps(page)(handler)  # the page's name and marks (`tms.pages.door.page`)


async def relay_socket(websocket: WebSocket) -> None:
    """One relay connection, from its upgrade to its end."""
    relay: Relay = websocket.app.state.relay
    settings: Settings = websocket.app.state.settings
    peer = websocket.scope.get("client")
    forwarded = websocket.headers.getlist("x-forwarded-for")
    address = clients.client_address(peer[0] if peer else None, forwarded, settings.trusted_proxies)
    token = clients.CURRENT.set(address)
    lent: Any = websocket.scope.get("extensions", {}).get(EXTENSION)
    blocklist = getattr(websocket.app.state, "blocklist", None)
    if blocklist is not None and blocklist.holds(address):  # NIP-86 `blockip`, as the gate
        relay.refusals.record(Refusal.BLOCKED, "relay")
        clients.CURRENT.reset(token)
        await websocket.close(POLICY_VIOLATION, BLOCKED_WORDS)
        return
    try:
        pubkey = await _cookie_key(websocket, settings, relay)
        await websocket.accept()
        conn = Connection(
            relay,
            websocket.send_text,
            send_many=getattr(lent, "send_texts", None),
            drained=getattr(lent, "drained", None),
            slug=websocket.path_params.get("slug"),
            url=relay_url(websocket, settings.base_url),
            address=address,
            pubkey=pubkey,
            idle=getattr(lent, "idle", None),
        )
        with metrics.track(metrics.RELAY_CONNECTIONS):  # open, for the operator (/metrics)
            await _serve(websocket, conn, settings.relay_idle_seconds, lent)
    except WebSocketDisconnect:
        pass
    finally:
        clients.CURRENT.reset(token)


async def _serve(websocket: WebSocket, conn: Connection, idle_seconds: float, lent: Any) -> None:
    """Read until the client leaves, or the connection must end (behind, idle)."""
    reading = asyncio.create_task(_read(websocket, conn, idle_seconds, lent))
    ended = asyncio.ensure_future(conn.outbox.ended.wait())
    gone = False
    try:
        await asyncio.wait({reading, ended}, return_when=asyncio.FIRST_COMPLETED)
        if reading.done() and not reading.cancelled():
            failed = reading.exception()
            if failed is None:
                gone = reading.result()
            elif isinstance(failed, WebSocketDisconnect):
                gone = True
            else:
                conn.outbox.end("failed", failure(failed))
    finally:
        for task in (reading, ended):
            task.cancel()
        await asyncio.gather(reading, ended, return_exceptions=True)
        await conn.close(NOTICE_SECONDS if conn.outbox.ending is not None and not gone else 0.0)
        if not gone:
            await _close(websocket, conn, lent)


async def _read(websocket: WebSocket, conn: Connection, idle_seconds: float, lent: Any) -> bool:
    """Each message in turn; True once the client has gone, False when the connection ends
    for being idle."""
    await conn.open()
    key = conn.pubkey  # the server's connection cap counts sockets by key too
    if lent is not None:
        lent.idle(True)
        lent.authenticated(key)
    waiting = getattr(lent, "waiting", None)
    while True:
        idle = conn.idle_for()
        if idle is None or (waiting is not None and waiting()):
            # No idle timer, or none needed: a message read already is taken at once.
            message = await websocket.receive()
        else:
            try:
                # A timeout on this task rather than `wait_for`, which makes a task of its own
                # for every message: a writer's connection (no subscription) is idle-timed
                # whenever it waits for one.
                async with asyncio.timeout(max(0.0, idle_seconds - idle)):
                    message = await websocket.receive()
            except TimeoutError:
                if (conn.idle_for() or 0.0) >= idle_seconds:
                    conn.outbox.end(
                        "idle",
                        f"closing an idle connection: no subscription and no message for "
                        f"{idle_seconds:g} s",
                    )
                    return False
                continue
        if message["type"] == "websocket.disconnect":
            return True
        text = message.get("text")
        if text is None:
            text = _text(message.get("bytes") or b"")
            if text is None:
                conn.outbox.send(messages.notice("invalid: messages are UTF-8 JSON text"))
                continue
        try:
            await conn.handle(text)
        except Exception as exc:  # never a traceback on the wire
            conn.outbox.send(messages.notice(failure(exc)))
        if conn.pubkey != key and lent is not None:  # an AUTH
            key = conn.pubkey
            lent.authenticated(key)


async def _close(websocket: WebSocket, conn: Connection, lent: Any) -> None:
    code = 1000 if conn.outbox.ending is None else POLICY_VIOLATION
    closing = (conn.outbox.ending or "")[:120]
    try:
        await asyncio.wait_for(websocket.close(code, closing), CLOSE_SECONDS)
    except Exception:  # the client does not read even a close: drop it
        if lent is not None:
            lent.abort()
        return
    if conn.outbox.fell_behind and lent is not None:
        lent.abort()  # its unread bytes must not hold the socket open


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def relay_url(websocket: WebSocket, base_url: str | None) -> str:
    """This relay's URL as an AUTH event must name it: the origin NIP-98 names too
    (`tms.http.origin`: `TMS_BASE_URL`, else the address the server listens on, never the
    client's `Host`, or an AUTH signed for `ws://evil.example/` would pass by sending
    `Host: evil.example`), and the path."""
    origin = signed_origin(websocket, base_url)
    raw = websocket.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else websocket.url.path
    return normalize_relay_url(origin + path) or origin + path


def page_origin(websocket: WebSocket, base_url: str | None) -> str:
    if base_url:
        return base_url
    scheme = "https" if websocket.url.scheme == "wss" else "http"
    return f"{scheme}://{websocket.url.netloc}"


async def _cookie_key(websocket: WebSocket, settings: Settings, relay: Relay) -> str | None:
    """The key of a live login, if the upgrade carries one and comes from this site."""
    cookie = websocket.cookies.get(COOKIE)
    if cookie is None:
        return None
    origin = websocket.headers.get("origin")
    if origin is not None and origin != page_origin(websocket, settings.base_url):
        return None
    keyring: Keyring = websocket.app.state.door.keyring
    id_sha256 = keyring.session_hash(cookie)
    if id_sha256 is None:
        return None
    with contextlib.suppress(Exception):  # a login that cannot be checked is no login
        pubkey = await relay.sessions.pubkey(id_sha256)
        if pubkey is not None and await relay.access.may_use(pubkey):
            return pubkey
    return None


# The relay: a WebSocket upgrade on the root or a collection's page (`tms.app`'s route table).
ROUTES: Final = [
    # NIP-86 on the relay's URLs: a POST with `application/nostr+json+rpc`
    # (and a browser's preflight of it: Nostr apps run in browsers)
    Route("/", operator.root_call, methods=["POST", "OPTIONS"], name="relay management"),
    Route(
        "/c/{slug}",
        management.collection_call,
        methods=["POST", "OPTIONS"],
        name="relay collection management",
    ),
    WebSocketRoute("/", relay_socket, name="relay"),
    WebSocketRoute("/c/{slug}", relay_socket, name="relay collection"),
    # ... and with a trailing slash, as some clients name every relay (NDK's URL normalizer
    # adds one): the same relay, and its NIP-42 URL the same once normalized
    WebSocketRoute("/c/{slug}/", relay_socket, name="relay collection slash"),
]
