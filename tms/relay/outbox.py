"""One connection's messages to send: one queue, written by a task of its own, counted in bytes
against the connection's memory budget (`tms.relay.budget`).

When the server can write several messages at once (`send_many`, `tms.http.websocket`),
whatever has queued up meanwhile goes out in one write (up to `WRITE_BYTES`), so that a batch's
events reach a subscriber, and a group's OKs a writer, in one system call rather than one each;
and given `drained`, a message counts until the kernel has taken it, not merely until it was
handed to the socket's buffer in this process, where a client that does not read leaves it (once
there, only its framed bytes are held, not the text too). Without `send_many`, messages go one
`send` at a time, each counted until that send returns.

Three kinds of message, three rules:
- a live event is queued as the event's JSON, which every subscriber shares (`Shared`), and
  is made into its `EVENT` message only when written: a batch of large evidence costs its size
  once, not once per subscriber, counted once in the process's budget while any queue holds
  it, in no connection's own. A client is behind when a live event has waited
  `LIVE_BEHIND_SECONDS` unwritten: time behind, never a size, so that a client that reads
  promptly gets every event a publish can make, however large the batch or however many the
  commit feed hands over at once. What bounds the memory is the process's budget: the feed
  hands more over only as it has room (`ProcessBudget.live_room`), and a queue that does not
  drain is closed in `LIVE_BEHIND_SECONDS`. (A cap of 64 MiB per connection once closed
  prompt clients when the feed fetched two batches of the largest body together.);
- a stored event waits for room before it is read and queued (`room`): within the
  connection's `STORED_WINDOW_BYTES` (a client that reads nothing for `STALL_SECONDS` is
  behind) and within the process's budget, and the room it finds is held for it until it is
  queued, so that stored answers, each read anew from the database, never add up past the
  process's budget by more than one message in all (when each took room only once it had
  read its message, a hundred that found room at once passed it by a hundred messages);
- anything else (OK, EOSE, CLOSED, NOTICE) is small and is queued at once, up to
  `OUTBOX_MESSAGES` messages or the connection's budget.

An event is queued with where it is filed (its collection; for a profile or terms, the
collections whose people it belongs to), and is written only if the connection's gate
(`tms.relay.gate`) still allows it when its turn comes: the gate is judged as the event is
queued and again as it is written, so that what a slow client left queued before a removal is
dropped, not sent after it.

A client that is behind is told so in a NOTICE and closed. The queue also holds why the
connection must end, once it must: nothing more is queued after the last NOTICE, and `ended`
wakes the endpoint to close the socket. So is a client that has read nothing for
`GIVE_WAY_SECONDS` (`unread_for`: since the oldest write still unfinished, or the message
queued since the last one finished) while its connection holds the most of the process's full
budget and another that reads asks for room (`tms.relay.budget.ProcessBudget.make_way`): what
it had queued, and the room its answers held, are freed at once for the asker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tms.relay import messages
from tms.relay.budget import Budget, Shared, size_of
from tms.relay.gate import Gate
from tms.relay.limits import (
    LIVE_BEHIND_SECONDS,
    OUTBOX_MESSAGES,
    STALL_SECONDS,
    STORED_WINDOW_BYTES,
)
from tms.types import Slug

Filed = Slug | frozenset[Slug]  # an event's collection, or those whose people it belongs to

WRITE_BYTES: Final = 256 * 1024  # queued messages written at once, about (one at least)

_LIVE: Final = 0
_STORED: Final = 1
_OTHER: Final = 2


class _Item:
    __slots__ = ("filed", "kind", "queued", "shared", "size", "sub_id", "text")

    def __init__(
        self,
        kind: int,
        text: str,
        size: int,
        sub_id: str | None = None,
        filed: Filed | None = None,
        shared: Shared | None = None,
    ) -> None:
        self.kind = kind
        self.text = text  # the message; for a live event, the event's (shared) JSON
        self.size = size
        self.sub_id = sub_id
        self.filed = filed  # an event's: written only if the gate still allows it
        self.shared = shared  # a live event's, held in the process's budget while queued
        self.queued = time.monotonic()

    def message(self) -> str:
        if self.sub_id is None:
            return self.text
        return messages.event(self.sub_id, self.text)


class Outbox:
    def __init__(
        self,
        send: Callable[[str], Awaitable[None]],
        send_many: Callable[[list[str]], Awaitable[None]] | None,
        budget: Budget,
        behind_seconds: float = LIVE_BEHIND_SECONDS,
        gate: Gate | None = None,
        drained: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`send`: one message to the client; `send_many`: several in one write, when the
        server can (`tms.http.websocket`); `budget`: the connection's bytes; `behind_seconds`:
        how long a live event may wait unwritten (`TMS_RELAY_BEHIND_SECONDS`); `gate`: what
        the connection's key may read, asked again of each event as it is written;
        `drained()`: until the socket's buffer in this process is under its mark again (the
        kernel has taken what was written)."""
        self._send = send
        self._send_many = send_many
        self._kernel_took = drained
        self.budget = budget
        self.gate = gate
        self._queue: deque[_Item] = deque()
        self._bytes = [0, 0, 0]  # queued, by kind
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._writer: asyncio.Task[None] | None = None
        self.behind_seconds = behind_seconds
        self._timer: asyncio.TimerHandle | None = None  # looks at the oldest live event
        self._clears = 0  # a `behind` while a write is under way: what it wrote is gone already
        self.ending: str | None = None  # why the connection must end, once it must
        self.fell_behind = False  # it ends because the client did not read (`behind`)
        self.ended = asyncio.Event()
        self._stopped = False  # nothing is queued any more (an answer after the close)
        self._held: dict[asyncio.Task[Any], int] = {}  # room held for a stored message, by task
        self._holding = 0  # their sum: in the stored window, not queued yet
        self._unread_since: float | None = None  # queued, and no write has finished since
        budget.unread_for = self.unread_for
        budget.give_way = self.behind

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write(), name="tms-relay-writer")

    async def stop(self, flush_seconds: float = 0.0) -> None:
        """Stop writing and give back every byte held; with `flush_seconds`, give what is
        queued (a closing NOTICE) that long to go out."""
        if self._writer is not None:
            if flush_seconds > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._drained(), flush_seconds)
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._timer is not None:
            self._timer.cancel()
        self._stopped = True
        self._clear()
        for task in list(self._held):  # a CLOSEd answer not yet ended: it holds nothing more
            self._let_go_room(task)

    @property
    def queued_bytes(self) -> int:
        return sum(self._bytes)

    def unread_for(self) -> float:
        """Seconds the client has left what it was sent unread: since a message was queued
        with no write finishing after it (0: nothing waits, or the connection is ending)."""
        since = self._unread_since
        if since is None or self.ending is not None:
            return 0.0
        return time.monotonic() - since

    def send(self, message: str) -> None:
        """Queue a message; a client whose queue is full is behind and is closed."""
        if self.ending is not None:
            return
        size = size_of(message)
        own = self._bytes[_STORED] + self._bytes[_OTHER]  # live events are bounded by time
        if len(self._queue) >= OUTBOX_MESSAGES or own + size > self.budget.budget:
            self.behind(
                f"{len(self._queue):,} messages ({own:,} bytes) wait to be "
                f"read, over this relay's {OUTBOX_MESSAGES:,} messages or "
                f"{self.budget.budget:,} bytes per connection"
            )
            return
        self._put(_Item(_OTHER, message, size))

    def send_live(self, sub_id: str, event: Shared, filed: Filed) -> None:
        """Queue a live event; a client that leaves live events unread too long is behind."""
        if self.ending is not None:
            return
        self._put(_Item(_LIVE, event.text, event.size, sub_id, filed, event))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.behind_seconds, self._late)

    def _late(self) -> None:
        """Whether the oldest live event has waited `behind_seconds`: the client is behind."""
        self._timer = None
        if self.ending is not None:
            return
        oldest = next((item for item in self._queue if item.kind == _LIVE), None)
        if oldest is None:
            return
        waited = time.monotonic() - oldest.queued
        if waited >= self.behind_seconds:
            self.behind(f"a live event waited more than {self.behind_seconds:g} s to be read")
            return
        self._timer = asyncio.get_running_loop().call_later(
            self.behind_seconds - waited, self._late
        )

    async def room(self, size: int, counted: bool = False) -> bool:
        """Until a stored message of about `size` bytes may be read and queued: the client has
        read what was queued ahead of it, and the process has room. False when the connection
        ends meanwhile (or the client reads nothing for `STALL_SECONDS`: it is then behind).
        `counted`: its bytes are in the budget already (a page's row, read with the page), so
        only the connection's window is waited for, not the process's: pages that filled the
        process's budget would otherwise each wait for the others to let go, for ever.

        True holds `size` bytes for the calling task's message, in the connection's window and
        its budget and the process's, until it queues it (`send_stored`), asks room for another,
        or ends: room is taken as it is found, so that the many stored answers that wait for it
        at once cannot all find it and then all fill it (the process's budget once held twice
        its size for a hundred connections that did not read). The process's budget is passed
        by one message at most: the one that finds it not yet full. Room held by another read
        of this connection is waited for without the stall's clock: it is not the client's
        doing that the message is not queued yet."""
        self._let_go_room()
        process = self.budget.process
        while self.ending is None and not self._stopped:
            ahead = self._bytes[_STORED] + self._holding
            if ahead > 0 and ahead + size > STORED_WINDOW_BYTES:
                self._room.clear()
                if self._bytes[_STORED] == 0:  # only room held, nothing queued unread
                    await self._room.wait()
                    continue
                try:  # not wait_for: on 3.11 it swallows a CLOSE's cancel that meets the room
                    async with asyncio.timeout(STALL_SECONDS):
                        await self._room.wait()
                except TimeoutError:
                    self.behind(f"a stored answer was not read for {STALL_SECONDS:g} s")
                continue
            if process.full and not counted:  # found while some is left, taken whole at once
                await process.below(self.budget)  # or given way (`ProcessBudget.make_way`)
                continue
            self._hold_room(size)
            return True
        return False

    def send_stored(self, message: str, filed: Filed) -> None:
        """Queue a stored event, once `room` said so (whatever its size: one may pass)."""
        self._let_go_room()
        if self.ending is None:
            self._put(_Item(_STORED, message, size_of(message), None, filed))

    def _hold_room(self, size: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        if task not in self._held:  # once per task, however many messages it queues
            task.add_done_callback(self._task_ended)
        self._held[task] = size
        self._holding += size
        self.budget.take(size)

    def _let_go_room(self, task: asyncio.Task[Any] | None = None) -> None:
        """What `room` held for `task` (the current one), once it queued, asked again or ended."""
        key = task if task is not None else asyncio.current_task()
        size = 0 if key is None else self._held.get(key, 0)
        if key is not None and size:
            self._held[key] = 0
            self._holding -= size
            self.budget.give(size)
            if self._bytes[_STORED] + self._holding <= STORED_WINDOW_BYTES // 2:
                self._room.set()

    def _task_ended(self, task: asyncio.Task[Any]) -> None:
        self._let_go_room(task)
        del self._held[task]

    def behind(self, why: str) -> None:
        """The client does not read: drop what waits, and end with a NOTICE saying why."""
        if self.ending is not None:
            return
        self._clear()
        for task in list(self._held):  # its answers stop at their next step: none is queued
            self._let_go_room(task)
        self._put(_Item(_OTHER, messages.notice(f"error: closing this connection: {why}"), 0))
        self.ending = f"behind: {why}"
        self.fell_behind = True
        self.ended.set()

    def end(self, why: str, notice: str) -> None:
        """Close the connection after a last NOTICE."""
        if self.ending is None:
            self.send(messages.notice(notice))
            self.ending = why
            self.ended.set()

    def _put(self, item: _Item) -> None:
        if self._stopped:  # an EVENT answered after its connection closed: held by nobody
            return
        self._queue.append(item)
        self._bytes[item.kind] += item.size
        if self._unread_since is None:
            self._unread_since = time.monotonic()
        if item.shared is not None:  # shared: counted once, in the process's budget
            item.shared.hold(self.budget.process)
        else:
            self.budget.take(item.size)
        self._wake.set()

    def _taken(self, item: _Item) -> None:
        self._bytes[item.kind] -= item.size
        if item.shared is not None:
            item.shared.let_go(self.budget.process)
        else:
            self.budget.give(item.size)
        if self._bytes[_STORED] <= STORED_WINDOW_BYTES // 2:
            self._room.set()

    def _clear(self) -> None:
        self._clears += 1
        while self._queue:
            self._taken(self._queue.popleft())
        self._unread_since = None
        self._room.set()

    async def _write(self) -> None:
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            clears = self._clears
            if self._send_many is None:
                first = self._queue[0]
                if self._allowed(first):
                    await self._send(first.message())
                self._done(1, clears)
                continue
            count, size, texts, written = 0, 0, [], []
            for item in itertools.islice(self._queue, 0, None):
                if count and size + item.size > WRITE_BYTES:
                    break
                count += 1
                written.append(item)
                if self._allowed(item):  # else dropped with the rest of the write
                    size += item.size
                    texts.append(item.message())
            if texts:
                await self._send_many(texts)
                texts = []
                for item in written:  # in the socket's buffer now: only its size is held
                    item.text = ""
                if self._kernel_took is not None:
                    await self._kernel_took()  # counted until the kernel has taken it
            self._done(count, clears)

    def _allowed(self, item: _Item) -> bool:
        """The gate's say as the item is written: an event of a collection the key no longer
        reads is not sent (a profile or terms: when none of its collections is read)."""
        filed, gate = item.filed, self.gate
        if filed is None or gate is None:
            return True
        if isinstance(filed, str):
            return gate.allows(filed)
        return any(gate.allows(slug) for slug in filed)

    def _done(self, count: int, clears: int) -> None:
        """The first `count` queued messages are written; held until then, so that their bytes
        count while they are being written (unless a `behind` dropped them meanwhile)."""
        if clears != self._clears:
            return
        for _ in range(count):
            self._taken(self._queue.popleft())
        if count:  # the client read: what waits now has waited from now
            self._unread_since = time.monotonic() if self._queue else None

    async def _drained(self) -> None:
        while self._queue:
            await asyncio.sleep(0.01)
