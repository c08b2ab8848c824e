"""`/mcp` over HTTP: MCP's streamable HTTP transport (the SDK's, stateless, JSON responses),
behind a front that bounds what an unauthenticated body can cost.

Every body is read and inspected here before the SDK sees it (`tms.mcp.envelope`):

- at most `SMALL_BODY` bytes for any call; only `publish` may send more, up to `MAX_BODY`,
  because one full-size evidence document (2,000,000 characters) needs several MiB;
- '[' and '{' are counted as the body arrives: a body made of millions of empty arrays (6 MB of
  them would make two million lists) is refused after `MAX_BRACKETS`, a few MB in;
- a body over `SMALL_BODY` first waits for one of `BIG_BODIES` slots, goes to a file as it
  arrives (this process holds none of it), and is inspected by a worker process at a lower CPU
  priority, so its parsing never holds the event loop; only once it passes is it read back for
  the SDK. A small body is inspected in place, its cost bounded by its shape as well as its size;
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
import os
import resource
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import IO, Any, ClassVar, Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tms.mcp.envelope import (
    INVALID_REQUEST,
    PARSE_ERROR,
    BadMessage,
    Summary,
    inspect,
    inspect_file,
)

log = logging.getLogger(__name__)

MiB: Final = 1024 * 1024
SMALL_BODY: Final = 1 * MiB  # every tool's limit but publish's
MAX_BODY: Final = 64 * MiB  # publish's: a batch of full-size evidence documents
BIG_BODIES: Final = 2  # bodies over SMALL_BODY held and inspected at once
MAX_BRACKETS: Final = 1_000_000  # '[' and '{' in a body: far more than any batch has
BIG_WAIT_SECONDS: Final = 30.0  # a big body waits this long for a slot, then gets a 503
INSPECT_SECONDS: Final = 30.0
STARTING_SECONDS: Final = 30.0  # a request that comes as the server starts waits this long
WORKER_MEMORY: Final = 1536 * MiB  # address space of a worker inspecting a big body

PRIVATE: Final = {"Cache-Control": "no-store"}


class McpFront:
    """The ASGI app at `/mcp`: checks each body, then hands it to `app` (the SDK's)."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None  # the SDK's, once it has loaded (`serve`)
        self._ready = asyncio.Event()
        self._slots = asyncio.Semaphore(BIG_BODIES)
        self._workers: ProcessPoolExecutor | None = None

    def serve(self, app: ASGIApp) -> None:
        self.app = app
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
                body = await self._read(scope, receive, stack)
                if isinstance(body, Path):  # a big body, spilled to a file as it came
                    summary = await self._inspect_big(body)
                    if summary.tool != "publish":
                        raise _TooLarge(
                            "request body too large: only publish takes more than "
                            f"{SMALL_BODY // MiB} MiB"
                        )
                    body = await asyncio.to_thread(body.read_bytes)
                else:
                    summary = inspect(body)
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
            try:
                await asyncio.wait_for(self._ready.wait(), STARTING_SECONDS)
            except TimeoutError:
                await _Starting().response(scope, receive, send)
                return
            assert self.app is not None
            await self.app(scope, _replay(body, receive), send)

    async def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
            self._workers = None

    async def _read(self, scope: Scope, receive: Receive, stack: AsyncExitStack) -> bytes | Path:
        """The body: in memory when small, else in a file written as it arrives (so that a big
        body costs this process no memory until it has passed inspection)."""
        length = _content_length(scope)
        if length is not None and length > MAX_BODY:
            raise _TooLarge(f"request body too large: {length:,} bytes, more than 64 MiB")
        chunks: list[bytes] = []
        spill: IO[bytes] | None = None
        size = brackets = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                raise _TooLarge(f"request body too large: more than {MAX_BODY // MiB} MiB")
            # An upper bound on the arrays and objects, as the body arrives (brackets in strings
            # count too): a body made of them is refused after a few MB, not after 64.
            brackets += chunk.count(b"[") + chunk.count(b"{")
            if brackets > MAX_BRACKETS:
                raise BadMessage(
                    PARSE_ERROR,
                    f"Parse error: the body holds more than {MAX_BRACKETS:,} '[' and '{{' "
                    "characters; send fewer events per batch",
                )
            if spill is None and (size > SMALL_BODY or (length or 0) > SMALL_BODY):
                await self._admit(stack)
                spill = stack.enter_context(_spill_file())
                spill.writelines(chunks)
                chunks.clear()
            if spill is not None:
                spill.write(chunk)
            else:
                chunks.append(chunk)
            if not message.get("more_body", False):
                if spill is None:
                    return b"".join(chunks)
                spill.flush()
                return Path(spill.name)

    async def _admit(self, stack: AsyncExitStack) -> None:
        try:
            await asyncio.wait_for(self._slots.acquire(), BIG_WAIT_SECONDS)
        except TimeoutError:
            raise _Busy from None
        stack.callback(self._slots.release)

    async def _inspect_big(self, path: Path) -> Summary:
        if self._workers is None:
            self._workers = ProcessPoolExecutor(
                BIG_BODIES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(WORKER_MEMORY,),
            )
        future = asyncio.get_running_loop().run_in_executor(self._workers, inspect_file, path)
        try:
            return await asyncio.wait_for(future, INSPECT_SECONDS)
        except (BrokenProcessPool, MemoryError, TimeoutError) as exc:
            log.warning("a body of %s bytes could not be inspected: %r", path.stat().st_size, exc)
            if isinstance(exc, BrokenProcessPool | TimeoutError):
                await self.close()  # a fresh pool for the next one
            raise _TooLarge("request body too large or too complex to read") from None


@contextmanager
def _spill_file() -> Iterator[IO[bytes]]:
    """A file for one big body, deleted when the request is done."""
    with tempfile.NamedTemporaryFile(prefix="tms-body-") as file:
        yield file


def _start_worker(memory: int) -> None:
    """In a worker: a body that would need more memory than `memory` fails alone, with
    MemoryError; and the server's own process comes first for the CPU."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.nice(10)


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


class _Starting(_Refused):
    status = 503
    headers = {"Retry-After": "5"}  # noqa: RUF012 (read only)

    def __init__(self) -> None:
        super().__init__("the server is starting; try again shortly")


class _Busy(_Refused):
    status = 503
    headers = {"Retry-After": "5"}  # noqa: RUF012 (read only)

    def __init__(self) -> None:
        super().__init__("the server is reading other large requests; try again shortly")
