"""One connection's messages to send: one bounded queue, written by a task of its own.

Whatever has queued up meanwhile goes out in one write (`send_many`, up to `WRITE_BYTES`), so
that a batch's events reach a subscriber, and a group's OKs a writer, in one system call rather
than one each. Live events are never waited for: a client that lets its queue pass
`OUTBOX_BYTES` or `OUTBOX_MESSAGES` is behind, and is told so in a NOTICE and closed. A stored
answer waits for room (the query pages are small), up to `STALL_SECONDS`.

The queue also holds why the connection must end, once it must: nothing more is queued after
the last NOTICE, and `ended` wakes the endpoint to close the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

from tms.relay import messages
from tms.relay.limits import OUTBOX_BYTES, OUTBOX_MESSAGES, STALL_SECONDS

WRITE_BYTES: Final = 256 * 1024  # queued messages written at once, about (one at least)


class Outbox:
    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        send_many: Callable[[list[str]], Awaitable[None]] | None,
    ) -> None:
        """`send`: one message to the client; `send_many`: several in one write, when the
        server can (`tms.http.websocket`)."""
        self._send = send
        self._send_many = send_many
        self._queue: deque[str] = deque()
        self._chars = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._writer: asyncio.Task[None] | None = None
        self.ending: str | None = None  # why the connection must end, once it must
        self.ended = asyncio.Event()

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write(), name="tms-relay-writer")

    async def stop(self, flush_seconds: float = 0.0) -> None:
        """Stop writing; with `flush_seconds`, give what is queued (a closing NOTICE) that long
        to go out."""
        if self._writer is None:
            return
        if flush_seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained(), flush_seconds)
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)

    def send(self, message: str) -> None:
        """Queue a message; a client whose queue is full is behind and is closed."""
        if self.ending is not None:
            return
        if len(self._queue) >= OUTBOX_MESSAGES or self._chars + len(message) > OUTBOX_BYTES:
            self.behind(
                f"{len(self._queue):,} messages ({self._chars:,} bytes) wait to be "
                f"read, over this relay's {OUTBOX_MESSAGES:,} messages or {OUTBOX_BYTES:,} "
                "bytes per connection"
            )
            return
        self._queue.append(message)
        self._chars += len(message)
        if self._chars > OUTBOX_BYTES // 2:
            self._room.clear()
        self._wake.set()

    async def send_stored(self, message: str) -> None:
        """Queue a stored event once there is room: a slow reader slows its own answer."""
        if not self._room.is_set():
            try:
                await asyncio.wait_for(self._room.wait(), STALL_SECONDS)
            except TimeoutError:
                self.behind(f"a stored answer was not read for {STALL_SECONDS:g} s")
        self.send(message)

    def behind(self, why: str) -> None:
        """The client does not read: drop what waits, and end with a NOTICE saying why."""
        if self.ending is not None:
            return
        self._queue.clear()
        self._chars = 0
        self._queue.append(messages.notice(f"error: closing this connection: {why}"))
        self._wake.set()
        self.ending = f"behind: {why}"
        self.ended.set()

    def end(self, why: str, notice: str) -> None:
        """Close the connection after a last NOTICE."""
        if self.ending is None:
            self.send(messages.notice(notice))
            self.ending = why
            self.ended.set()

    async def _write(self) -> None:
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            if self._send_many is None:
                message = self._queue.popleft()
                self._taken(len(message))
                await self._send(message)
                continue
            batch = [self._queue.popleft()]
            size = len(batch[0])
            while self._queue and size + len(self._queue[0]) <= WRITE_BYTES:
                size += len(self._queue[0])
                batch.append(self._queue.popleft())
            self._taken(size)
            await self._send_many(batch)

    def _taken(self, chars: int) -> None:
        self._chars -= chars
        if self._chars <= OUTBOX_BYTES // 4:
            self._room.set()

    async def _drained(self) -> None:
        while self._queue:
            await asyncio.sleep(0.01)
