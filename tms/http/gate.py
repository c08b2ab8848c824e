"""What every HTTP request meets before its route, as plain ASGI middleware (inside only
`tms.http.metered.Metered`, which counts it, and `tms.pages.security.SecurityHeaders`, which adds
headers to its answer): who the client is, and its address's rate limit, before a byte of the
body is read or a signature verified.

The client's address is the peer's, or the one a trusted proxy forwarded (`tms.guard.clients`);
it is kept for the request in `tms.guard.clients.CURRENT`, where the refusal log finds it. A
request over its address's budget (`TMS_RATE_ADDRESS`, `tms.guard.rates`) is noted in the
refusal log and answered 429 with `Retry-After`: a JSON-RPC error at `/mcp` (its id is not read:
nothing of the body is), `{"error": ...}` elsewhere. What a request spends is its route's in the
route table (`tms.app.UNITS`): a witness's `add-checkpoint`, which anyone may post, spends more
than other requests; `/healthz` and `/static/` are never limited, so a monitor and the pages'
files always get through.

It also counts the requests being served other than exports, for the exports to make way
while there are any (`tms.guard.exports`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tms.errors import RateLimited, Refusal
from tms.guard import clients
from tms.guard.clients import Network
from tms.http.bodies import content_length, discard
from tms.http.routes import routed
from tms.http.statuses import answer

DISCARD_BYTES: Final = 1024 * 1024  # of a refused request's body, read so the client hears us
DISCARD_SECONDS: Final = 2.0
BLOCKED_WORDS: Final = "blocked: this address is blocked by the server's operator"
TOO_MANY: Final = -32000  # JSON-RPC: a server error of the implementation's own


class Gate:
    def __init__(self, app: ASGIApp, trusted_proxies: Sequence[Network] = ()) -> None:
        self.app = app
        self.trusted = tuple(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope.get("client")
        forwarded = [
            value.decode("latin-1")
            for name, value in scope["headers"]
            if name == b"x-forwarded-for"
        ]
        address = clients.client_address(peer[0] if peer else None, forwarded, self.trusted)
        token = clients.CURRENT.set(address)
        try:
            route = routed(scope)
            blocklist = getattr(scope["app"].state, "blocklist", None)
            if blocklist is not None and blocklist.holds(address):
                await _blocked(scope, receive, send, route.name)
                return
            if route.units == 0:
                await self.app(scope, receive, send)
                return
            runtime = scope["app"].state.runtime
            try:
                await runtime.services.throttle.address(address, route.units)
            except RateLimited as exc:
                runtime.services.refusals.record(Refusal.RATE_LIMITED, route.name)
                await _refuse(exc, scope, receive, send)
                return
            if route.door == "export":
                await self.app(scope, receive, send)
                return
            with runtime.exports.other_request():  # exports make way while it is served
                await self.app(scope, receive, send)
        finally:
            clients.CURRENT.reset(token)


def route_name(scope: Scope) -> str:
    """What the refusal log calls a request's route: its name in the route table
    (`tms.http.routes.routed`), never the path (it may hold a slug); "page" for a path no route
    answers."""
    return routed(scope).name


async def _blocked(scope: Scope, receive: Receive, send: Send, route: str) -> None:
    """A request from an address the operator blocked (NIP-86 `blockip`): 403, noted in the
    refusal log; nothing of it is read but what lets the client hear the answer."""
    runtime = getattr(scope["app"].state, "runtime", None)
    if runtime is not None:
        runtime.services.refusals.record(Refusal.BLOCKED, route)
    more = (content_length(scope) or 0) > 0
    await discard(receive, more, DISCARD_BYTES, DISCARD_SECONDS)
    body = {"error": BLOCKED_WORDS}
    await JSONResponse(body, 403, headers={"Cache-Control": "no-store"})(scope, receive, send)


async def _refuse(exc: RateLimited, scope: Scope, receive: Receive, send: Send) -> None:
    more = (content_length(scope) or 0) > 0 or any(
        name == b"transfer-encoding" for name, _ in scope["headers"]
    )
    await discard(receive, more, DISCARD_BYTES, DISCARD_SECONDS)
    said = answer(exc)  # the HTTP doors' one table: 429, Retry-After
    headers = {**said.headers, "Cache-Control": "no-store"}
    if scope["path"] == "/mcp":
        body: dict[str, object] = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": TOO_MANY, "message": said.message},
        }
    else:
        body = {"error": said.message}
    await JSONResponse(body, said.status, headers=headers)(scope, receive, send)
