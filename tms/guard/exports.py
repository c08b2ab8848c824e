"""How many exports run at once, and at what pace, so that downloads never starve publishing.

An export is one request for the rate limits, yet streaming 60,000 events keeps the event loop
busy for a second or more; five at once kept both CPUs busy and raised the publish p50 from 8 to
184 ms. So, in each server process:

- one export at a time per key: a second one while the first runs is refused at once (429,
  `Retry-After`), since nobody needs two copies of a collection at the same moment;
- at most `at_once` exports at a time (`TMS_MAX_EXPORTS`); one more waits up to `wait_seconds`
  (`WAIT_SECONDS`) for one of them to end, then is told to come back (503, `Retry-After`);
- the exports running take turns on one lane (`turn`): one of them makes a chunk of lines while
  the others wait, so whatever else the process does waits behind one chunk at most, never one
  chunk per export. While other requests are being served (`tms.http.gate` counts them), the
  export then leaves the loop to them for as long as its chunk took (`pace`): with publishing
  to share with, exports get about half the loop; alone, they go at full speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Final

from tms.errors import RateLimited, Refusal

WAIT_SECONDS: Final = 10.0  # an export waits this long for a turn among `at_once`
RETRY_SECONDS: Final = 10  # what Retry-After says to an export refused
MAX_PAUSE_SECONDS: Final = 0.05


class ExportsBusy(Exception):
    """Every export slot stayed taken while the export waited (503, with Retry-After)."""

    retry_after = RETRY_SECONDS

    def __init__(self, at_once: int) -> None:
        super().__init__(
            f"the server is already streaming {at_once} exports, the most it runs at once; "
            f"try again in {RETRY_SECONDS} s"
        )


class Exports:
    """The export slots of one server process. Made in the event loop that uses them."""

    def __init__(self, at_once: int, wait_seconds: float = WAIT_SECONDS) -> None:
        self.at_once = at_once
        self.wait_seconds = wait_seconds
        self._slots = asyncio.Semaphore(at_once)
        self._keys: set[str] = set()  # keys with an export running or waiting for a slot
        self._lane = asyncio.Lock()
        self.others = 0  # requests other than exports being served right now

    @asynccontextmanager
    async def slot(self, pubkey: str) -> AsyncIterator[None]:
        """Hold an export slot for `pubkey` for as long as the block runs: `RateLimited` when
        this key already has an export running, `ExportsBusy` when none came free in time."""
        if pubkey in self._keys:
            raise RateLimited(
                "an export by this key is already running: one at a time per key; wait for it "
                f"to finish, then try again (in {RETRY_SECONDS} s)",
                retry_after=RETRY_SECONDS,
            ).refused_as(Refusal.RATE_LIMITED, pubkey)
        self._keys.add(pubkey)
        try:
            try:
                await asyncio.wait_for(self._slots.acquire(), self.wait_seconds)
            except TimeoutError:
                raise ExportsBusy(self.at_once) from None
            try:
                yield
            finally:
                self._slots.release()
        finally:
            self._keys.discard(pubkey)

    def running(self, pubkey: str) -> bool:
        return pubkey in self._keys

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """One export's turn to make a chunk; others wait for theirs. On leaving, paced."""
        async with self._lane:
            started = time.perf_counter()
            yield
            await self.pace(time.perf_counter() - started)

    @contextmanager
    def other_request(self) -> Iterator[None]:
        """Count a request other than an export while it is served (`tms.http.gate`)."""
        self.others += 1
        try:
            yield
        finally:
            self.others -= 1

    async def pace(self, took: float) -> None:
        """After a chunk that took `took` seconds: while other requests are being served,
        leave the loop to them for as long again (at most `MAX_PAUSE_SECONDS`); else only let
        whatever is ready run."""
        if self.others:
            await asyncio.sleep(min(took, MAX_PAUSE_SECONDS))
        else:
            await asyncio.sleep(0)
