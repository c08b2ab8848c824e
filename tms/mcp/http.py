"""`/mcp` over HTTP: MCP's streamable HTTP transport (the SDK's, stateless, JSON responses),
behind a front that bounds what an unauthenticated body can cost.

Every body is read with the bounds of `tms.http.bodies` and inspected here
(`tms.mcp.envelope`) before the SDK sees it:

- at most `SMALL_BODY` bytes for any call; only `publish` may send more, up to `MAX_BODY`,
  because one full-size evidence document (2,000,000 characters) needs several MiB;
- '[' and '{' are counted as the body arrives, and a body over `SMALL_BODY` waits for a slot,
  goes to a file, and is inspected by a worker process (`tms.http.bodies`). A small body is
  inspected in place, its cost bounded by its shape as well as its size;
- whatever is wrong comes back as a JSON-RPC error in plain words (413 and 503 included), and
  a client that hangs up mid-body is one log line.

Only then does the SDK parse the same bytes, which for the largest body costs it about 60 ms.
It answers GET and DELETE with a 405 rather than an idle event stream that would hold a
connection forever: stateless, there is no server-to-client stream and no session.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tms.errors import Refusal
from tms.guard.refusals import RefusalLog
from tms.http.bodies import (
    MAX_BODY,
    SMALL_BODY,
    BigBodies,
    BodyError,
    BodyReader,
    Disconnected,
    MiB,
    TooComplex,
    TooLarge,
)
from tms.http.statuses import answer
from tms.mcp.envelope import (
    INVALID_REQUEST,
    PARSE_ERROR,
    BadMessage,
    inspect,
    inspect_file,
)

__all__ = ["MAX_BODY", "ROUTES", "SMALL_BODY", "McpFront"]

log = logging.getLogger(__name__)

PRIVATE: Final = {"Cache-Control": "no-store"}
STARTING_SECONDS: Final = 30.0  # a request that comes as the server starts waits this long


class McpFront:
    """The ASGI app at `/mcp`: checks each body, then hands it to `app` (the SDK's)."""

    def __init__(
        self, refusals: RefusalLog | None = None, big_bodies: BigBodies | None = None
    ) -> None:
        """`big_bodies`: the process's slots for big bodies, shared with the pages; a body
        holds one until its call is answered (its publish stored)."""
        self.app: ASGIApp | None = None  # the SDK's, once it has loaded (`serve`)
        self.broken: str | None = None  # why it never will (`failed`)
        self.refusals = refusals or RefusalLog(None)
        self._ready = asyncio.Event()
        self._bodies = BodyReader(MAX_BODY, big_bodies)

    def serve(self, app: ASGIApp) -> None:
        self.app = app
        self._ready.set()

    def failed(self, reason: str) -> None:
        """The SDK's server could not be built: every call is told so, not that it is
        starting (the operator's log holds the traceback)."""
        self.broken = reason
        self._ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            message = "the MCP endpoint is stateless: send each JSON-RPC request as a POST"
            await _error(405, INVALID_REQUEST, message, headers={"Allow": "POST"})(
                scope, receive, send
            )
            return
        async with AsyncExitStack() as stack:
            try:
                body = await self._bodies.read(scope, receive, stack)
                if isinstance(body, Path):  # a big body, spilled to a file as it came
                    summary = await self._bodies.inspect(inspect_file, body)
                    if summary.tool != "publish":
                        raise TooLarge(
                            "request body too large: only publish takes more than "
                            f"{SMALL_BODY // MiB} MiB"
                        )
                    body = await asyncio.to_thread(body.read_bytes)
                else:
                    summary = inspect(body)
            except BodyError as exc:  # its status from the HTTP doors' one table
                self.refusals.refused(exc, "mcp")  # Busy is the server's state: not filed
                said = answer(exc)
                code = PARSE_ERROR if isinstance(exc, TooComplex) else INVALID_REQUEST
                await _error(said.status, code, said.message, headers=said.headers)(
                    scope, receive, send
                )
                return
            except BadMessage as exc:
                self.refusals.record(Refusal.INVALID, "mcp")
                await _error(400, exc.code, str(exc), exc.request_id)(scope, receive, send)
                return
            except Disconnected:
                client = scope.get("client") or ("?", 0)
                log.info("client %s:%s hung up before sending its whole body", *client)
                return
            try:
                await asyncio.wait_for(self._ready.wait(), STARTING_SECONDS)
            except TimeoutError:
                message = "the server is starting; try again shortly"
                await _error(503, INVALID_REQUEST, message, headers={"Retry-After": "5"})(
                    scope, receive, send
                )
                return
            if self.app is None:
                message = f"MCP is unavailable on this server: {self.broken}"
                await _error(503, INVALID_REQUEST, message)(scope, receive, send)
                return
            await self.app(scope, _replay(body, receive), send)

    async def close(self) -> None:
        await self._bodies.close()


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body again, for the SDK; after it, whatever the client sends next (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _error(
    status: int,
    code: int,
    message: str,
    request_id: str | int | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message},
    }
    return JSONResponse(body, status, headers={**PRIVATE, **(headers or {})})


class _Endpoint:
    """`/mcp`: the app's `McpFront` (`state.mcp`), built by the lifespan. An instance, so that
    the route passes it every method (it answers the ones it does not serve itself)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["app"].state.mcp(scope, receive, send)


ROUTES: Final = [Route("/mcp", _Endpoint(), name="mcp")]
