"""Memory budgets in bytes: one per connection, and one per process that every connection's
counts into.

A connection counts what it makes the process hold for it: messages queued and not yet written
(`tms.relay.outbox`), new events held for a subscription while its stored answer is read
(`tms.relay.live`), the filters of its open reads (`tms.relay.reading`), and its EVENTs until
they are answered (`tms.relay.publishing`). A NIP-77 session's list counts in the process's
alone (`tms.relay.negentropy`: one list may be larger than a connection's budget), and so do
live events queued for subscribers (`Shared`: one string for all of them), which the commit
feed hands over only as the process has room (`ProcessBudget.live_room`). Over its own budget
or the process's, a connection is refused new REQs (`CLOSED` saying why), its stored answers
wait for room, and it reads no more EVENTs until those in flight are answered; the process's
budget is what lets a thousand small connections not add up to the machine's memory, when each
one's budget alone would.

The process's budget full, the heaviest gives way (`ProcessBudget.make_way`), as the crowd does
at the connection cap (`tms.http.crowds`): a connection that asks for room (a new REQ, a stored
answer's page or message) while it holds no more than its share (the budget divided among the
connections holding bytes, and never less than `STORED_WINDOW_BYTES`) and its client reads,
gets it from the connection holding the most bytes whose client has read nothing for
`GIVE_WAY_SECONDS`: that one is closed as behind (`tms.relay.outbox`), its NOTICE saying why,
and what it had queued is freed at once, for the asker to take before anyone else can. Before
this, a hundred clients that never read held the whole budget, and a member that read was
refused until a stored answer had waited `STALL_SECONDS` (30 s) for them. Only when nobody may
give way is a new REQ refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from tms.relay.limits import GIVE_WAY_SECONDS, STORED_WINDOW_BYTES

MEMORY_FULL: Final = (
    "error: this relay is short of memory for new stored answers ({used:,} bytes of {budget:,} "
    "held for {whose}); try again shortly"
)


def size_of(text: str) -> int:
    """The UTF-8 size of a message, without making the bytes when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


GAVE_WAY: Final = (
    "this relay is short of memory and this connection held the most of it ({used:,} bytes) "
    "while its client read nothing for {seconds:g} s: it gives way to a client that reads"
)


class ProcessBudget:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.live = 0  # of `used`: live events queued for subscribers (`Shared`)
        self.holders: dict[Budget, None] = {}  # the connections holding bytes now
        self._freed = asyncio.Event()
        self._live_freed = asyncio.Event()

    def take(self, size: int) -> None:
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size
        if self.used < self.budget:
            self._freed.set()

    @property
    def full(self) -> bool:
        return self.used >= self.budget

    @property
    def over(self) -> bool:
        return self.used > self.budget

    async def room(self, size: int, asker: Budget | None = None) -> None:
        """Until `size` more bytes fit (or nothing at all is held: one message always fits);
        for `asker`, as soon as others have given way to it (`make_way`)."""
        while self.used > 0 and self.used + size > self.budget:
            if asker is not None and self.make_way(asker) and self.used + size <= self.budget:
                return
            await self._wait(asker)

    async def below(self, asker: Budget | None = None) -> None:
        """Until the budget is no longer full; for `asker`, as soon as others have given way
        to it (`make_way`). Returns without yielding when it is not full, so that the caller
        takes the room before anyone else can."""
        while self.full:
            if asker is not None and self.make_way(asker):
                return
            await self._wait(asker)

    async def _wait(self, asker: Budget | None) -> None:
        """Until something is freed; for an asker, no longer than half the grace, since a
        connection may come to owe it room by time alone (its client still reading nothing)."""
        self._freed.clear()
        if asker is None:
            await self._freed.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GIVE_WAY_SECONDS / 2):
                await self._freed.wait()

    def share(self) -> int:
        """What a connection may hold and still be given room by others: the budget divided
        among the connections holding bytes, and at least a stored answer's window."""
        return max(self.budget // max(1, len(self.holders)), STORED_WINDOW_BYTES)

    def make_way(self, asker: Budget) -> bool:
        """Whether the budget is no longer full, once the connections that owe `asker` room
        have given way: while it is full, if `asker` holds no more than its share and its client
        reads (has left nothing unread for `GIVE_WAY_SECONDS`), the connection holding the most
        bytes, more than `asker`, whose client has read nothing for `GIVE_WAY_SECONDS`, is closed
        as behind and its queued bytes freed at once; then the next, until there is room or
        nobody is left to give way. One pass over the connections holding bytes each time,
        only while the budget is full."""
        if not self.full:
            return True
        if asker.unread_for() >= GIVE_WAY_SECONDS or asker.used > self.share():
            return False
        passed: set[Budget] = set()
        while self.full:
            victim: Budget | None = None
            for held in self.holders:
                if (
                    held is asker
                    or held.give_way is None
                    or held.used <= asker.used
                    or (victim is not None and held.used <= victim.used)
                    or held in passed
                    or held.unread_for() < GIVE_WAY_SECONDS
                ):
                    continue
                victim = held
            if victim is None:
                return False
            passed.add(victim)
            give_way = victim.give_way
            assert give_way is not None  # as every one considered has
            give_way(GAVE_WAY.format(used=victim.used, seconds=GIVE_WAY_SECONDS))
        return True

    async def live_room(self, size: int) -> None:
        """Until `size` more bytes of live events fit, or no live event is held: what the
        commit feed waits for before it hands more over (`tms.ledger.read.feed`). Only live
        events are waited for, since only they are let go whatever the clients do (written, or
        their connection closed as behind): the filters of open subscriptions, however many,
        never hold the feed."""
        while self.live > 0 and self.used + size > self.budget:
            self._live_freed.clear()
            await self._live_freed.wait()

    def hold_live(self, size: int) -> None:
        self.live += size
        self.take(size)

    def free_live(self, size: int) -> None:
        self.live -= size
        self.give(size)
        self._live_freed.set()


class Shared:
    """A live event's JSON, queued for every subscriber it matches: one string, counted once in
    the process's budget while any connection's queue holds it (`tms.relay.outbox`), and in no
    connection's own: a batch of large evidence to a thousand subscribers costs its size once."""

    __slots__ = ("holders", "size", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.size = size_of(text)
        self.holders = 0

    def hold(self, process: ProcessBudget) -> None:
        if self.holders == 0:
            process.hold_live(self.size)
        self.holders += 1

    def let_go(self, process: ProcessBudget) -> None:
        self.holders -= 1
        if self.holders == 0:
            process.free_live(self.size)


class Budget:
    """One connection's bytes, counted into the process's too."""

    def __init__(self, process: ProcessBudget, budget: int) -> None:
        self.process = process
        self.budget = budget
        self.used = 0
        # Set by the connection's outbox (`tms.relay.outbox`): how long its client has left
        # what it was sent unread (0: nothing waits), and how it is closed to give way.
        self.unread_for: Callable[[], float] = lambda: 0.0
        self.give_way: Callable[[str], None] | None = None

    def take(self, size: int) -> None:
        if self.used <= 0 < size:
            self.process.holders[self] = None
        self.used += size
        self.process.take(size)

    def give(self, size: int) -> None:
        self.used -= size
        if self.used <= 0:
            self.process.holders.pop(self, None)
        self.process.give(size)

    def release(self, kept: int = 0) -> None:
        """The connection has closed: nothing it held is held any more, but `kept` bytes (its
        events in flight, answered whether or not it is there), each given back as it ends."""
        self.give(self.used - kept)

    def refusal(self) -> str | None:
        """Why a new stored answer must wait for another time, or None."""
        if self.used >= self.budget:
            return MEMORY_FULL.format(used=self.used, budget=self.budget, whose="this connection")
        if not self.process.make_way(self):  # full, and nobody gives way
            return MEMORY_FULL.format(
                used=self.process.used, budget=self.process.budget, whose="every connection"
            )
        return None
