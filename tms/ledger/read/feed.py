"""The commit feed: every event committed through any door of any server process on this
database, handed over once, in commit order, after its transaction commits.

Each publish notifies `tms.ledger.write.writes.CHANNEL`, in its transaction after its write, with,
per collection it wrote (null for profiles and terms), the first and last `seq` it gave them and a
`lists` flag, true when a member list is among them (`tms.ledger.write.writes.notify`): a collection
nobody here listens to is fetched only then, and only its member lists, since a new list changes who
may read it (a connection's key may gain the collection). PostgreSQL delivers a notification only
when its transaction commits, never for one that rolls back, and delivers them in commit order. The
feed listens on a connection of its own and fetches the events each names.

Why `seq` can be caught up from: the global `seq` is not commit order (a transaction may take a
lower `seq` and commit after one that took a higher), but every collection's events are written
under that collection's lock, and all profiles and terms under one lock of their own
(`tms.ledger.locks.lock_keys`), so *within* a collection (and within the unscoped events) `seq`
grows in commit order. The feed keeps, for each, the last `seq` it handed over (`seen`): a
notification at or below it is one already handed over, and after the listening connection is
lost and made again, each collection's events above it are exactly what was missed. The
transparency log's leaf index would serve as well for collections, but profiles and terms have
no log.

Start-up reads every collection's last `seq` before it listens, then catches up once it
listens: nothing committed in between is lost. `ready` is set after that first catch-up.

What it fetches (the rows of about `FETCH_EVENTS` events at once, a large content not among
them) it hands over in runs of about `RUN_BYTES`, each only once its reader has room
for it (`room`, the relay's `ProcessBudget.live_room`), a large content read only when its run's
turn comes: two batches of the largest body fetched together once meant 128 MiB handed to every
subscriber at once, and the feed held every large content of 256 publishes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import asyncpg

from tms.errors import is_database_down, one_line
from tms.ledger.read.filters import BIG_BYTES, Stored, StoredEvents
from tms.ledger.write.writes import CHANNEL
from tms.store import driver
from tms.store.database import Pool, application_name
from tms.store.outage import Outage
from tms.types import KIND_MEMBERS, UNSCOPED, Slug

log = logging.getLogger(__name__)

APPLICATION_NAME: Final = application_name("feed")  # the listening connection's, as
# pg_stat_activity names it (with the release and schema: `tms.store.database`)
PING_SECONDS: Final = 15.0  # the listening connection is checked this often
PING_TIMEOUT: Final = 5.0
RECONNECT_SECONDS: Final = 0.5  # first wait before connecting again; doubles up to the next
RECONNECT_MAX_SECONDS: Final = 10.0
RETRY_SECONDS: Final = 1.0  # a fetch that failed is tried again after this
FETCH_RANGES: Final = 256  # notifications fetched in one round trip, at most
FETCH_EVENTS: Final = 2000  # and events, about (by their seq spans): the rows held at once
CATCH_UP_PAGE: Final = 500
RUN_BYTES: Final = 1024 * 1024  # contents handed over at once, about (one event at least)

_COLUMNS: Final = f"""e.seq, e.id, e.pubkey, e.created_at, e.kind, e.tags, e.sig, e.collection,
    CASE WHEN octet_length(e.content) <= {BIG_BYTES} THEN e.content END AS content,
    octet_length(e.content) AS size,
    CASE WHEN e.kind IN (27235, 28934, 28936) THEN (SELECT b.body FROM member_changes b
        WHERE b.collection = e.collection AND b.id = e.id) END AS body"""  # sql/025
_SQL_FETCH: Final = f"""
    SELECT {_COLUMNS}
    FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[])
         WITH ORDINALITY AS u(collection, lo, hi, kind, n)
    CROSS JOIN LATERAL (
        SELECT * FROM events e
        WHERE e.collection = coalesce(u.collection, '{UNSCOPED}') AND e.seq BETWEEN u.lo AND u.hi
          AND (u.kind IS NULL OR e.kind = u.kind)) e
    ORDER BY u.n, e.seq"""
_SQL_RANGE: Final = f"""
    SELECT {_COLUMNS} FROM events e
    WHERE e.collection = coalesce($1::text, '{UNSCOPED}') AND e.seq > $2 AND e.seq <= $3
      AND ($4::int IS NULL OR e.kind = $4::int)
    ORDER BY e.seq LIMIT {CATCH_UP_PAGE}"""
# Each collection's last seq, from its counts row (every collection has one, beside its events:
# on Citus each worker answers for its own), and the unscoped events' (null).
_SQL_POSITIONS: Final = f"""
    SELECT n.collection, m.last FROM collection_counts n
    CROSS JOIN LATERAL (SELECT max(seq) AS last FROM events e
                        WHERE e.collection = n.collection) AS m
    UNION ALL
    SELECT NULL, (SELECT max(seq) FROM events WHERE collection = '{UNSCOPED}')"""

Key = Slug | None  # a collection, or None for profiles and terms
Range = tuple[Key, int, int, int | None]  # first and last seq; only this kind (None: all)
Deliver = Callable[[Sequence[Stored]], None]
Room = Callable[[int], Awaitable[None]]
_CATCH_UP: Final = object()


class CommitFeed:
    def __init__(
        self,
        url: str,
        pool: Pool,
        *,
        wanted: Callable[[Key], bool],
        deliver: Deliver,
        room: Room | None = None,
        outage: Outage | None = None,
    ) -> None:
        """`wanted(key)`: whether anyone here listens to that collection (else its events are
        passed over unread); `deliver`: takes each fetched run of events, in commit order;
        `room(size)`: until the reader may take a run of contents of about `size` bytes;
        `outage`: where the database found down is told (one line an outage, not one per
        attempt to reconnect)."""
        self.url = url
        self.outage = outage or Outage()
        self.pool = pool
        self.stored = StoredEvents(pool)
        self.wanted = wanted
        self.deliver = deliver
        self.room = room
        self.seen: dict[Key, int] = {}
        self.ready = asyncio.Event()
        self._inbox: deque[object] = deque()  # notifications and catch-up marks, in order
        self._arrived = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="tms-feed-listen"),
            asyncio.create_task(self._work(), name="tms-feed-work"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- listening ------------------------------------------------------------------------------

    async def _listen(self) -> None:
        wait = RECONNECT_SECONDS
        first = True
        while True:
            try:
                if first:  # before listening: what committed meanwhile is caught up after
                    self.seen = await self._positions()
                conn = await driver.connect(
                    self.url, server_settings={"application_name": APPLICATION_NAME}
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed("cannot connect", exc)
                await asyncio.sleep(wait)
                wait = min(wait * 2, RECONNECT_MAX_SECONDS)
                continue
            lost = asyncio.Event()
            conn.add_termination_listener(_setter(lost))
            try:
                await conn.add_listener(CHANNEL, self._notified)
                self._put(_CATCH_UP)
                if not first:
                    log.info("the commit feed listens again; catching up")
                first = False
                wait = RECONNECT_SECONDS
                await self._watch(conn, lost)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed("lost its connection", exc)
            finally:
                conn.terminate()
            await asyncio.sleep(wait)

    async def _watch(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        """Until the connection is lost (or stops answering)."""
        while not conn.is_closed():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), PING_SECONDS)
                return
            await asyncio.wait_for(conn.fetchval("SELECT 1"), PING_TIMEOUT)

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        try:
            collection, first, last, lists = json.loads(str(payload))
        except (ValueError, TypeError):
            log.error("the commit feed got a notification it cannot read: %.200s", payload)
            return
        self._put((collection, int(first), int(last), bool(lists)))

    def _put(self, item: object) -> None:
        self._inbox.append(item)
        self._arrived.set()

    # --- handing over ---------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            while not self._inbox:
                self._arrived.clear()
                await self._arrived.wait()
            item = self._inbox.popleft()
            if item is _CATCH_UP:
                await self._retrying(self._catch_up)
                self.ready.set()
                continue
            items = [item]
            spans = _span(item)
            while (
                len(items) < FETCH_RANGES
                and self._inbox
                and self._inbox[0] is not _CATCH_UP
                and spans + _span(self._inbox[0]) <= FETCH_EVENTS
            ):
                spans += _span(self._inbox[0])
                items.append(self._inbox.popleft())
            ranges = self._unseen(items)
            if ranges:
                rows = await self._retrying(functools.partial(self._fetch, ranges))
                await self._hand_over(rows)

    def _unseen(self, items: list[object]) -> list[Range]:
        """What to fetch: the events of collections someone listens to, and of the others
        only their member lists (they change who may read: a key may gain a collection)."""
        ranges: list[Range] = []
        for item in items:
            assert isinstance(item, tuple)
            key, first, last, lists = item
            seen = self.seen.get(key, 0)
            if last <= seen:
                continue  # handed over already (by a catch-up)
            if self.wanted(key):
                ranges.append((key, max(first, seen + 1), last, None))
            elif lists:
                ranges.append((key, max(first, seen + 1), last, KIND_MEMBERS))
            self.seen[key] = last
        return ranges

    async def _fetch(self, ranges: list[Range]) -> list[Any]:
        keys, firsts, lasts, kinds = (list(column) for column in zip(*ranges, strict=True))
        return list(await self.pool.fetch(_SQL_FETCH, keys, firsts, lasts, kinds))

    async def _hand_over(self, rows: Sequence[Any]) -> None:
        """The rows' events, in order, in runs of about `RUN_BYTES`, each once there is room."""
        run: list[Any] = []
        size = 0
        for row in rows:
            if run and size + row["size"] > RUN_BYTES:
                await self._hand_over_run(run, size)
                run, size = [], 0
            run.append(row)
            size += row["size"]
        if run:
            await self._hand_over_run(run, size)

    async def _hand_over_run(self, rows: list[Any], size: int) -> None:
        if self.room is not None:
            await self.room(size)
        stored = await self._retrying(functools.partial(self._load, rows))
        self.deliver(stored)

    async def _load(self, rows: list[Any]) -> list[Stored]:
        """The events of `rows`, their large contents read now, one by one."""
        return [await self.stored.stored(row) for row in rows]

    async def _catch_up(self) -> None:
        """Hand over what committed while nobody listened: each collection's events above the
        last `seq` handed over."""
        positions = await self._positions()
        for key, last in sorted(positions.items(), key=lambda item: item[1]):
            seen = self.seen.get(key, 0)
            if last <= seen:
                continue
            only = None if self.wanted(key) else KIND_MEMBERS  # as `_unseen`
            while seen < last:
                rows = await self.pool.fetch(_SQL_RANGE, key, seen, last, only)
                if not rows:
                    break
                await self._hand_over(rows)
                seen = rows[-1]["seq"]
                self.seen[key] = seen
            self.seen[key] = last

    async def _positions(self) -> dict[Key, int]:
        rows = await self.pool.fetch(_SQL_POSITIONS)
        return {row["collection"]: row["last"] or 0 for row in rows}

    async def _retrying(self, work: Callable[[], Any]) -> Any:
        """The database may be away for a while: what was committed is still there after."""
        while True:
            try:
                return await work()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed("cannot read the ledger", exc)
                await asyncio.sleep(RETRY_SECONDS)

    def _failed(self, what: str, exc: BaseException) -> None:
        if is_database_down(exc):
            self.outage.failed(f"the commit feed ({what})", exc)
        else:
            log.warning("the commit feed %s: %s", what, one_line(exc, 300))


def _span(item: object) -> int:
    """How many events a notification names, at most (its seq span: other collections' seqs may
    fall within it)."""
    assert isinstance(item, tuple)
    return int(item[2]) - int(item[1]) + 1


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _: event.set()
