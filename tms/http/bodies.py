"""Request bodies read with bounds, for every door that takes JSON: `/mcp` and the pages.
Whatever an unauthenticated client sends costs a bounded amount of memory and time.

- A body is refused past `max_body` bytes, from its Content-Length before a byte is read, or
  as it arrives;
- '[' and '{' are counted as it arrives: a body made of millions of empty arrays (6 MB of
  them would make two million lists) is refused after `MAX_BRACKETS`, a few MB in;
- a body over `SMALL_BODY` first waits for one of `BIG_BODIES` slots (`Busy` after
  `BIG_WAIT_SECONDS`), goes to a file as it arrives (this process holds none of it), and can
  then be inspected by a worker process at a lower CPU priority, with a memory cap, so its
  parsing never holds the event loop. The slots are the process's (`BigBodies`), one budget for
  every door that takes big bodies (MCP and the pages), and a body holds its slot until the
  request that read it is done, its submit included: a 64 MiB batch parsed and being stored
  costs a few hundred MB, and a slot freed once it was read let the pages queue every batch
  sent (16 of them took 3 GB);
- a client that hangs up mid-body is `Disconnected`, for the door to log in one line.

Each door owns one `BodyReader` (its worker pool, the process's slots) and decides what to say.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import resource
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import IO, Final, TypeVar

from starlette.types import Receive, Scope

from tms.errors import Refusal, TMSError
from tms.orphans import exit_with_parent

MiB: Final = 1024 * 1024
SMALL_BODY: Final = 1 * MiB  # bodies up to this are read into memory and inspected in place
MAX_BODY: Final = 64 * MiB  # the largest body: a batch of full-size evidence documents
BIG_BODIES: Final = 2  # bodies over SMALL_BODY read, parsed and submitted at once, per process
MAX_BRACKETS: Final = 1_000_000  # '[' and '{' in a body: far more than any batch has
BIG_WAIT_SECONDS: Final = 30.0  # a big body waits this long for a slot, then `Busy`
INSPECT_SECONDS: Final = 30.0
WORKER_MEMORY: Final = 1536 * MiB  # address space of a worker inspecting a big body
DISCARD_BYTES: Final = MAX_BODY  # read and dropped after a refusal, so the client hears it
DISCARD_SECONDS: Final = 10.0

T = TypeVar("T")
log = logging.getLogger(__name__)


class BodyError(TMSError):
    """A body refused while it was read; the message is for the client. Its HTTP status is in
    the HTTP doors' one table (`tms.http.statuses`)."""


class TooLarge(BodyError):
    """Over the size limit, or too large or complex for a worker to inspect (413)."""

    refusal = Refusal.TOO_LARGE


class TooComplex(BodyError):
    """More brackets than any real body holds (400: a parse error)."""


class Busy(BodyError):
    """Every slot for big bodies stayed taken (503, with Retry-After): the server's state, no
    refusal of the caller."""

    refusal = None

    def __init__(
        self, message: str = "the server is reading other large requests; try again shortly"
    ) -> None:
        super().__init__(message)


class NoRoom(Busy):
    """A big body the server could not keep in its temporary file (a full disk, say): the
    server's state, answered as `Busy` is (503, with Retry-After) in words of its own, never as
    the database being down."""

    def __init__(self, exc: OSError) -> None:
        why = exc.strerror or type(exc).__name__
        super().__init__(
            f"the server has no room for this request body right now ({why}); try again shortly"
        )


class Disconnected(Exception):
    """The client hung up before sending its whole body."""


class BigBodies:
    """The process's slots for big bodies, shared by every door that reads them: a body takes
    one as it grows past `SMALL_BODY` (waiting `BIG_WAIT_SECONDS` at most, then `Busy`) and
    gives it back when the request that read it is done. `held` and `waiting` are for the
    tests and the benches to watch."""

    def __init__(self, slots: int = BIG_BODIES) -> None:
        self.slots = slots
        self._free = asyncio.Semaphore(slots)
        self.held = 0
        self.waiting = 0

    async def take(self, stack: AsyncExitStack) -> None:
        """One slot, given back when `stack` closes."""
        self.waiting += 1
        try:
            await asyncio.wait_for(self._free.acquire(), BIG_WAIT_SECONDS)
        except TimeoutError:
            raise Busy from None
        finally:
            self.waiting -= 1
        self.held += 1
        stack.callback(self._give)

    def _give(self) -> None:
        self.held -= 1
        self._free.release()


class BodyReader:
    def __init__(self, max_body: int = MAX_BODY, big: BigBodies | None = None) -> None:
        """`big`: the process's slots (a reader of its own has its own: one whose bodies are
        never big)."""
        self.max_body = max_body
        self.big = BigBodies() if big is None else big
        self._workers: ProcessPoolExecutor | None = None

    async def read(
        self,
        scope: Scope,
        receive: Receive,
        stack: AsyncExitStack,
        held: AsyncExitStack | None = None,
    ) -> bytes | Path:
        """The body: in memory when small, else in a file written as it arrives (deleted
        when `stack` closes), so that a big body costs this process no memory until it has
        passed inspection. A big body's slot is given back when `held` closes (else `stack`):
        the caller's request, once it is done with what the body made."""
        limit = self.max_body
        length = content_length(scope)
        if length is not None and length > limit:
            raise TooLarge(f"request body too large: {length:,} bytes, more than {_mib(limit)}")
        chunks: list[bytes] = []
        spill: IO[bytes] | None = None
        size = brackets = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Disconnected
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > limit:
                await discard(receive, more)
                raise TooLarge(f"request body too large: more than {_mib(limit)}")
            # An upper bound on the arrays and objects, as the body arrives (brackets in strings
            # count too): a body made of them is refused after a few MB, not after 64.
            brackets += chunk.count(b"[") + chunk.count(b"{")
            if brackets > MAX_BRACKETS:
                await discard(receive, more)
                raise TooComplex(
                    f"Parse error: the body holds more than {MAX_BRACKETS:,} '[' and '{{' "
                    "characters; send fewer events per batch"
                )
            if spill is None and (size > SMALL_BODY or (length or 0) > SMALL_BODY):
                await self.big.take(stack if held is None else held)
            try:  # a big body's temporary file: a full disk is `NoRoom`, said to the client
                if spill is None and (size > SMALL_BODY or (length or 0) > SMALL_BODY):
                    spill = stack.enter_context(_spill_file())
                    spill.writelines(chunks)
                    chunks.clear()
                if spill is not None:
                    spill.write(chunk)
                    if not more:
                        spill.flush()
            except OSError as exc:
                await discard(receive, more)
                raise NoRoom(exc) from exc
            if spill is None:
                chunks.append(chunk)
            if not more:
                return b"".join(chunks) if spill is None else Path(spill.name)

    async def inspect(self, function: Callable[[Path], T], path: Path) -> T:
        """`function(path)` in a worker process (low priority, capped memory), within
        `INSPECT_SECONDS`; its own exceptions come back as they are. A body the worker cannot
        finish is `TooLarge`. `function` must be importable by the worker (module level)."""
        if self._workers is None:
            self._workers = ProcessPoolExecutor(
                BIG_BODIES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(WORKER_MEMORY,),
            )
        future = asyncio.get_running_loop().run_in_executor(self._workers, function, path)
        try:
            return await asyncio.wait_for(future, INSPECT_SECONDS)
        except (BrokenProcessPool, MemoryError, TimeoutError) as exc:
            log.warning("a body of %s bytes could not be inspected: %r", path.stat().st_size, exc)
            if isinstance(exc, BrokenProcessPool | TimeoutError):
                await self.close()  # a fresh pool for the next one
            raise TooLarge("request body too large or too complex to read") from None

    async def parsed(
        self,
        scope: Scope,
        receive: Receive,
        parse: Callable[[bytes], T],
        check: Callable[[Path], object] | None = None,
        *,
        held: AsyncExitStack | None = None,
    ) -> T:
        """The body, `parse`d in a thread (never on the event loop). A body big enough to go
        to a file is first `check`ed in a worker process (its shape within bounds) and only
        then read into this one. A caller that stores what `parse` made (a batch to submit) passes
        `held`, its own request's stack: the slot counts the batch until that closes."""
        async with AsyncExitStack() as stack:
            body = await self.read(scope, receive, stack, held)
            if isinstance(body, Path):
                if check is not None:
                    await self.inspect(check, body)
                body = await asyncio.to_thread(body.read_bytes)
        return await asyncio.to_thread(parse, body)

    async def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
            self._workers = None


async def small_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """A body that must be small (a form, a URL, a look-up), read as every body is (`TooLarge`
    past `limit` bytes, `Disconnected` when the client leaves first): never spilled to a file,
    as `limit` is under `SMALL_BODY`."""
    assert limit <= SMALL_BODY
    async with AsyncExitStack() as stack:
        body = await BodyReader(limit).read(scope, receive, stack)
    assert isinstance(body, bytes)
    return body


async def discard(
    receive: Receive,
    more: bool,
    max_bytes: int = DISCARD_BYTES,
    seconds: float = DISCARD_SECONDS,
) -> None:
    """Reads and drops the rest of a refused body, up to `max_bytes` or `seconds`. A server
    that closes a connection with unread bytes makes the kernel reset it, and the client often
    loses the answer it was sent; a client still sending a few MB gets to read it."""
    dropped = 0
    try:
        async with asyncio.timeout(seconds):
            while more and dropped <= max_bytes:
                message = await receive()
                dropped += len(message.get("body", b""))
                more = message["type"] == "http.request" and message.get("more_body", False)
    except TimeoutError:
        pass


def _mib(size: int) -> str:
    return f"{size // MiB} MiB" if size >= MiB else f"{size // 1024} KiB"


@contextmanager
def _spill_file() -> Iterator[IO[bytes]]:
    """A file for one big body, deleted when the request is done."""
    with tempfile.NamedTemporaryFile(prefix="tms-body-") as file:
        yield file


def _start_worker(memory: int) -> None:
    """In a worker: a body that would need more memory than `memory` fails alone, with
    MemoryError; the server's own process comes first for the CPU; and the worker ends with
    the server, however that dies."""
    exit_with_parent()
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.nice(10)


def content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
