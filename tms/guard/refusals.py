"""The refusal log's recorder: every refused publish, tool call, login, fetch or over-limit
request is noted here, and written to the database by a task of its own.

Recording sits on the refusal's path, so it must never slow it down or change it: `record` only
adds to bounded queues in memory and cannot raise; the writer task takes them every
`FLUSH_SECONDS` (sooner when they fill) and writes them in one transaction
(`tms.guard.refusal_store`). Each kind waits in a queue of its own, and rate-limit refusals, which
come in floods, are added up as they come (one entry per minute, tool, address and key), so a
flood of one kind never pushes another kind's records out. When a queue is full its oldest
entry gives way; when the database is down, the queues wait for it (still bounded). What never
reaches the database is counted as dropped there, like the rows pruned to keep each kind at
`keep` rows.

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

from tms.errors import Outcome, Refusal, TMSError, is_database_down, one_line, outcome_of
from tms.guard import clients
from tms.guard.refusal_store import COUNTED, Record, RefusalStore, minute_of
from tms.metrics import REFUSALS
from tms.store.outage import Outage

DEFAULT_KEEP: Final = 100_000  # records the log keeps (TMS_REFUSALS_KEEP)

log = logging.getLogger(__name__)

_Key = tuple[datetime, str, str | None, str | None]  # a counted kind's minute, tool, key, address

QUEUE: Final = 10_000  # records (or minutes' counts) of one kind waiting for the writer, at most
FLUSH_SECONDS: Final = 1.0
FLUSH_AT: Final = 1_000  # this many entries waiting are written at once
RETRY_SECONDS: Final = 1.0  # after a failed write
CLOSE_SECONDS: Final = 5.0
MAX_TOOL_CHARS: Final = 64


class RefusalLog:
    def __init__(
        self, store: RefusalStore | None, keep: int = DEFAULT_KEEP, *, outage: Outage | None = None
    ) -> None:
        """`store` None: records are counted and dropped (a door with no database to write to).
        `outage`: where the database found down is told (one line an outage)."""
        self.store = store
        self.keep = keep
        self.outage = outage or Outage()
        self._queues: dict[str, deque[Record]] = {}  # by kind, oldest first
        self._counts: dict[str, dict[_Key, int]] = {}  # counted kinds, by kind: oldest first
        self._waiting = 0  # entries in both
        self._lost = 0  # refusals dropped before reaching the database, not yet counted there
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # --- on the request path: cheap, and never raising ------------------------------------------

    def refused(self, exc: BaseException, tool: str) -> None:
        """Note `exc` if the one classification calls it refused (`tms.errors.outcome_of`) and
        it names the refusal (`refusal` set): a database found unusable is never the caller's."""
        if (
            outcome_of(exc) is Outcome.REFUSED
            and isinstance(exc, TMSError)
            and exc.refusal is not None
        ):
            self.record(exc.refusal, tool, exc.pubkey)

    def record(
        self,
        kind: Refusal,
        tool: str,
        pubkey: str | None = None,
        address: str | None = None,
    ) -> None:
        try:
            at = datetime.now(UTC)
            name = str(kind)
            REFUSALS.labels(name).inc()
            tool = tool[:MAX_TOOL_CHARS]
            where = address if address is not None else clients.CURRENT.get()
            if name in COUNTED:
                self._count(name, (minute_of(at), tool, pubkey, where))
            else:
                self._list(Record(at=at, kind=name, tool=tool, pubkey=pubkey, address=where))
            if self._waiting >= FLUSH_AT and self._wake is not None:
                self._wake.set()
        except Exception:  # recording must never change a response
            log.exception("could not record a refusal")

    def _list(self, record: Record) -> None:
        queue = self._queues.setdefault(record.kind, deque())
        if len(queue) >= QUEUE:
            queue.popleft()
            self._lost += 1
        else:
            self._waiting += 1
        queue.append(record)

    def _count(self, kind: str, key: _Key, n: int = 1) -> None:
        counts = self._counts.setdefault(kind, {})
        if key in counts:
            counts[key] += n
            return
        if len(counts) >= QUEUE:
            self._lost += counts.pop(next(iter(counts)))
        else:
            self._waiting += 1
        counts[key] = n

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
        records = self._take()
        lost, self._lost = self._lost, 0
        if self.store is None:
            self._lost += lost + sum(record.count for record in records)
            return
        if not records and not lost:
            return
        try:
            await self.store.write(records, self.keep, lost)
        except BaseException:
            self._lost += lost
            self._put_back(records)
            raise

    def _take(self) -> list[Record]:
        """Everything waiting: listed records in the order they came (the log's sequence is
        the order of refusals), then the minutes' counts."""
        records = sorted(
            (record for queue in self._queues.values() for record in queue),
            key=lambda record: record.at,
        )
        records += [
            Record(at=at, kind=kind, tool=tool, pubkey=pubkey, address=address, count=n)
            for kind, counts in self._counts.items()
            for (at, tool, pubkey, address), n in counts.items()
        ]
        self._queues, self._counts, self._waiting = {}, {}, 0
        return records

    def _put_back(self, records: list[Record]) -> None:
        """Records a write failed to store, back before those that came meanwhile; where that
        overflows a queue, the oldest give way and are counted as lost."""
        queues, counts = self._queues, self._counts
        self._queues, self._counts, self._waiting = {}, {}, 0
        for record in records:
            if record.kind in COUNTED:
                key = (record.at, record.tool, record.pubkey, record.address)
                self._count(record.kind, key, record.count)
            else:
                self._list(record)
        for queue in queues.values():
            for record in queue:
                self._list(record)
        for kind, waiting in counts.items():
            for key, n in waiting.items():
                self._count(kind, key, n)

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
                if is_database_down(exc):  # the records wait in the queue; the outage is logged
                    self.outage.failed("the refusal log's writer", exc)
                elif not down:
                    log.error("the refusal log cannot be written: %s", one_line(exc, 300))
                    down = True
                await asyncio.sleep(RETRY_SECONDS)
                continue
            if down:
                log.warning("the refusal log is written again")
                down = False
