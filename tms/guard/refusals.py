"""The refusal log's recorder: every refused publish, tool call, login, fetch or over-limit
request is noted here, and written to the database by a task of its own.

Recording sits on the refusal's path, so it must never slow it down or change it: `record` only
appends to a bounded queue in memory and cannot raise; the writer task takes the queue every
`FLUSH_SECONDS` (sooner when it fills) and writes it in one statement (`tms.ledger.refusals`).
When the queue is full, the oldest record gives way; when the database is down, the queue waits
for it (still bounded). What never reaches the database is counted as dropped there, like the
rows pruned to keep the log at `keep` records.

A record holds the time, the kind of refusal (`tms.errors.Refusal`), the tool or route, the key
when its signature verified, and the client's address (`tms.guard.clients.CURRENT`): never
content, a message, a header or a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import UTC, datetime
from typing import Final

from tms.config import DEFAULT_KEEP
from tms.errors import Refusal, TMSError, one_line
from tms.guard import clients
from tms.ledger.refusals import Record, RefusalStore
from tms.metrics import REFUSALS
from tms.store.database import is_database_down

log = logging.getLogger(__name__)

QUEUE: Final = 10_000  # records waiting for the writer, at most
FLUSH_SECONDS: Final = 1.0
FLUSH_AT: Final = 1_000  # a queue this long is written at once
RETRY_SECONDS: Final = 1.0  # after a failed write
CLOSE_SECONDS: Final = 5.0
MAX_TOOL_CHARS: Final = 64


class RefusalLog:
    def __init__(self, store: RefusalStore | None, keep: int = DEFAULT_KEEP) -> None:
        """`store` None: records are counted and dropped (a door with no database to write to)."""
        self.store = store
        self.keep = keep
        self._queue: deque[Record] = deque()
        self._lost = 0  # records dropped before reaching the database, not yet counted there
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # --- on the request path: cheap, and never raising ------------------------------------------

    def refused(self, exc: BaseException, tool: str) -> None:
        """Note `exc` if it is a refusal of the caller (a `TMSError` whose `refusal` is set)."""
        if isinstance(exc, TMSError) and exc.refusal is not None:
            self.record(exc.refusal, tool, exc.pubkey)

    def record(
        self,
        kind: Refusal,
        tool: str,
        pubkey: str | None = None,
        address: str | None = None,
    ) -> None:
        try:
            REFUSALS.labels(str(kind)).inc()
            if len(self._queue) >= QUEUE:
                self._queue.popleft()
                self._lost += 1
            self._queue.append(
                Record(
                    at=datetime.now(UTC),
                    kind=str(kind),
                    tool=tool[:MAX_TOOL_CHARS],
                    pubkey=pubkey,
                    address=address if address is not None else clients.CURRENT.get(),
                )
            )
            if len(self._queue) >= FLUSH_AT and self._wake is not None:
                self._wake.set()
        except Exception:  # recording must never change a response
            log.exception("could not record a refusal")

    # --- the writer -----------------------------------------------------------------------------

    def start(self) -> None:
        """Run the writer in this event loop until `close`."""
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="tms-refusals")

    async def close(self) -> None:
        """Stop the writer, writing what is waiting (within `CLOSE_SECONDS`)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), CLOSE_SECONDS)

    async def flush(self) -> None:
        """Write what is waiting. Raises what the database raised; the records stay queued."""
        if self.store is None:
            self._lost += len(self._queue)
            self._queue.clear()
            return
        if not self._queue and not self._lost:
            return
        records, self._queue = self._queue, deque()
        lost, self._lost = self._lost, 0
        try:
            await self.store.write(list(records), self.keep, lost)
        except BaseException:
            records.extend(self._queue)  # those that came meanwhile go after, still bounded
            overflow = max(0, len(records) - QUEUE)
            for _ in range(overflow):
                records.popleft()
            self._queue = records
            self._lost += lost + overflow
            raise

    async def _run(self) -> None:
        assert self._wake is not None
        down = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            try:
                await self.flush()
            except Exception as exc:
                if not down:
                    level = logging.WARNING if is_database_down(exc) else logging.ERROR
                    log.log(level, "the refusal log cannot be written: %s", one_line(exc, 300))
                down = True
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if down:
                log.warning("the refusal log is written again")
                down = False
