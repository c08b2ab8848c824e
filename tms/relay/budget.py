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
"""

from __future__ import annotations

import asyncio
from typing import Final

MEMORY_FULL: Final = (
    "error: this relay is short of memory for new stored answers ({used:,} bytes of {budget:,} "
    "held for {whose}); try again shortly"
)


def size_of(text: str) -> int:
    """The UTF-8 size of a message, without making the bytes when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class ProcessBudget:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.live = 0  # of `used`: live events queued for subscribers (`Shared`)
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

    async def room(self, size: int) -> None:
        """Until `size` more bytes fit (or nothing at all is held: one message always fits)."""
        while self.used > 0 and self.used + size > self.budget:
            self._freed.clear()
            await self._freed.wait()

    async def below(self) -> None:
        """Until the budget is no longer full."""
        while self.full:
            self._freed.clear()
            await self._freed.wait()

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

    def take(self, size: int) -> None:
        self.used += size
        self.process.take(size)

    def give(self, size: int) -> None:
        self.used -= size
        self.process.give(size)

    def release(self, kept: int = 0) -> None:
        """The connection has closed: nothing it held is held any more, but `kept` bytes (its
        events in flight, answered whether or not it is there), each given back as it ends."""
        self.give(self.used - kept)

    def refusal(self) -> str | None:
        """Why a new stored answer must wait for another time, or None."""
        if self.used >= self.budget:
            return MEMORY_FULL.format(used=self.used, budget=self.budget, whose="this connection")
        if self.process.full:
            return MEMORY_FULL.format(
                used=self.process.used, budget=self.process.budget, whose="every connection"
            )
        return None
