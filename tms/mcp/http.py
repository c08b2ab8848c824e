"""`/mcp` over HTTP: MCP's streamable HTTP transport (the SDK's, stateless, JSON responses),
behind a front that bounds what an unauthenticated body can cost.

Every body is read and inspected here before the SDK sees it (`tms.mcp.envelope`):

- at most `SMALL_BODY` bytes for any call; only `publish` may send more, up to `MAX_BODY`,
  because one full-size evidence document (2,000,000 characters) needs several MiB;
- a body over `SMALL_BODY` first waits for one of `BIG_BODIES` slots, so only a few are held in
  memory at once, and is inspected in a worker process, so its parsing never holds the event
  loop; a small one is inspected in place, its cost bounded by its shape as well as its size;
- whatever is wrong comes back as a JSON-RPC error in plain words (413 and 503 included), and
  a client that hangs up mid-body is one log line.

Only then does the SDK parse the same bytes, which for the largest body costs it about 60 ms.
It answers GET and DELETE with a 405 rather than an idle event stream that would hold a
connection forever: stateless, there is no server-to-client stream and no session.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import resource
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AsyncExitStack
from typing import Any, ClassVar, Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tms.mcp.envelope import INVALID_REQUEST, BadMessage, Summary, inspect

log = logging.getLogger(__name__)

MiB: Final = 1024 * 1024
SMALL_BODY: Final = 1 * MiB  # every tool's limit but publish's
MAX_BODY: Final = 64 * MiB  # publish's: a batch of full-size evidence documents
BIG_BODIES: Final = 2  # bodies over SMALL_BODY held and inspected at once
BIG_WAIT_SECONDS: Final = 30.0  # a big body waits this long for a slot, then gets a 503
INSPECT_SECONDS: Final = 30.0
WORKER_MEMORY: Final = 1536 * MiB  # address space of a worker inspecting a big body

PRIVATE: Final = {"Cache-Control": "no-store"}


class McpFront:
    """The ASGI app at `/mcp`: checks each body, then hands it to `app` (the SDK's)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._slots = asyncio.Semaphore(BIG_BODIES)
        self._workers: ProcessPoolExecutor | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            message = "the MCP endpoint is stateless: send each JSON-RPC request as a POST"
            await _error(405, INVALID_REQUEST, message, headers={"Allow": "POST"})(
                scope, receive, send
            )
            return
        async with AsyncExitStack() as stack:
            try:
                body = await self._read(scope, receive, stack)
                summary = await self._inspect(body)
                if len(body) > SMALL_BODY and summary.tool != "publish":
                    raise _TooLarge(
                        f"request body too large: {len(body):,} bytes; only publish takes more "
                        f"than {SMALL_BODY // MiB} MiB"
                    )
            except _Refused as refused:
                await refused.response(scope, receive, send)
                return
            except BadMessage as exc:
                await _error(400, exc.code, str(exc), exc.request_id)(scope, receive, send)
                return
            except _Disconnected:
                client = scope.get("client") or ("?", 0)
                log.info("client %s:%s hung up before sending its whole body", *client)
                return
            await self.app(scope, _replay(body, receive), send)

    async def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
            self._workers = None

    async def _read(self, scope: Scope, receive: Receive, stack: AsyncExitStack) -> bytes:
        length = _content_length(scope)
        if length is not None and length > MAX_BODY:
            raise _TooLarge(f"request body too large: {length:,} bytes, more than 64 MiB")
        body = bytearray()
        big = False
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                raise _TooLarge(f"request body too large: more than {MAX_BODY // MiB} MiB")
            if not big and (len(body) > SMALL_BODY or (length or 0) > SMALL_BODY):
                big = True
                await self._admit(stack)
            if not message.get("more_body", False):
                return bytes(body)

    async def _admit(self, stack: AsyncExitStack) -> None:
        try:
            await asyncio.wait_for(self._slots.acquire(), BIG_WAIT_SECONDS)
        except TimeoutError:
            raise _Busy from None
        stack.callback(self._slots.release)

    async def _inspect(self, body: bytes) -> Summary:
        if len(body) <= SMALL_BODY:
            return inspect(body)
        if self._workers is None:
            self._workers = ProcessPoolExecutor(
                BIG_BODIES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_limit_memory,
                initargs=(WORKER_MEMORY,),
            )
        future = asyncio.get_running_loop().run_in_executor(self._workers, inspect, body)
        try:
            return await asyncio.wait_for(future, INSPECT_SECONDS)
        except (BrokenProcessPool, MemoryError, TimeoutError) as exc:
            log.warning("a %s-byte body could not be inspected: %r", f"{len(body):,}", exc)
            if isinstance(exc, BrokenProcessPool | TimeoutError):
                await self.close()  # a fresh pool for the next one
            raise _TooLarge("request body too large or too complex to read") from None


def _limit_memory(limit: int) -> None:
    """In a worker: a body that would need more memory than this fails alone, with MemoryError."""
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


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


class _Disconnected(Exception):
    pass


class _Refused(Exception):
    status: ClassVar[int] = 400
    headers: ClassVar[dict[str, str] | None] = None

    def response(self, scope: Scope, receive: Receive, send: Send) -> Any:
        return _error(self.status, INVALID_REQUEST, str(self), headers=self.headers)(
            scope, receive, send
        )


class _TooLarge(_Refused):
    status = 413


class _Busy(_Refused):
    status = 503
    headers = {"Retry-After": "5"}  # noqa: RUF012 (read only)

    def __init__(self) -> None:
        super().__init__("the server is reading other large requests; try again shortly")
