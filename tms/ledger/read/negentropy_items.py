"""The items of a NIP-77 session: (created_at, id) of the events a filter matches in what a
reader may read, as `tms.nostr.negentropy.Items`.

The rule of what a reader sees is the one REQ uses (`tms.ledger.read.filters`: the collections'
events, and the profiles and terms of their people), with the same SQL. A list longer than
`cap` is not built: the caller refuses it.

Two ways to the collections' part, one answer:

- **Kept** (`ItemCache`, a filter of kinds, since and until only: what a sync of a whole
  collection asks). This process keeps, per collection, every event's (created_at, id, kind)
  sorted by (created_at, id), and the `seq` up to which it holds them. A session first asks the
  database for the collection's events above that `seq` (the primary key's range: within a
  collection `seq` grows in commit order, `tms.ledger.read.feed`, so those are exactly the events
  committed since), merges them in (a few events added to a million cost one copy, not a
  sort), then masks by kind and time. Only the first session of a collection in this process
  reads the whole list (from the index, streamed by binary COPY: `tms.ledger.read.copy_rows`),
  unless the relay loaded it at start (`ItemCache.warm`: the largest collections'); a million
  items then cost a mask and a seal (about 0.1 s), not seconds of index scan, and the
  sessions that ask one collection for the same kinds (no time bounds: what a sync asks) while
  nothing changed share one sealed list (`SHARED_LISTS` kinds' lists a collection). Kept
  lists are bounded together by `NEG_CACHE_BYTES`, least recently used first out; a
  collection whose list alone is larger, or longer than the cap, is never kept.
- **Read** (any other filter: ids, authors, tags). From the index that holds exactly those
  columns (sql/022), one collection at a time (on Citus each such query runs on the one worker
  that holds it, aggregate and all), as one value: 40 bytes an item end to end, turned into
  numpy arrays without a Python object per item (a row per item costs seconds a million).

The people's profiles and terms are always read (a few rows, from their own index). A session's
list is `Items.nbytes` (about 72 bytes an item), which the relay counts against its memory budget
once however many sessions share it (`ItemCache.lease`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from tms.ledger.read.copy_rows import CopyRows
from tms.ledger.read.filters import Scope, _Query, slugs_of
from tms.ledger.read.neg_threads import reconciling
from tms.nostr.filters import Filter
from tms.nostr.negentropy import ID_SIZE, Items, insertion_points, item_order
from tms.rules.kinds import unscoped_kinds
from tms.store.database import Pool
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    UNSCOPED,
    Slug,
)

_COLUMNS: Final = "created_at, id"
_ROW: Final = np.dtype([("ts", ">i8"), ("id", "V32")])
_KEPT_ROW: Final = np.dtype([("ts", ">i8"), ("id", "V32"), ("kind", ">i4")])
_KEPT_VALUE: Final = "int8send(created_at) || decode(id, 'hex') || int4send(kind)"
# A collection's whole list, from the index alone (collection, created_at, id) INCLUDE (kind),
# in its order, streamed by COPY (`tms.ledger.read.copy_rows`); and the seq it is current to,
# read first in the same snapshot (a repeatable-read transaction: on Citus both run on the one
# worker that holds the collection, in one transaction there).
_SQL_LIST: Final = """
    SELECT created_at, id, kind FROM events
    WHERE collection = $1 AND created_at >= 0 ORDER BY created_at, id LIMIT $2"""
_SQL_LAST: Final = "SELECT max(seq) FROM events WHERE collection = $1"
# The largest collections, by the size of their newest checkpoint (a log's size is its
# collection's events): an index look-up each, from the counts row every collection has
# (sql/009), beside its log on Citus.
_SQL_LARGEST: Final = """
    SELECT n.collection AS slug, c.size FROM collection_counts n
    CROSS JOIN LATERAL (SELECT size FROM tlog_checkpoints t WHERE t.collection = n.collection
                        ORDER BY size DESC LIMIT 1) AS c
    ORDER BY c.size DESC, n.collection LIMIT $1"""
# What was committed to it since `seq` $2 (the primary key's range), up to $3 events.
_SQL_SINCE: Final = f"""
    SELECT max(seq) AS last,
           string_agg({_KEPT_VALUE}, ''::bytea) FILTER (WHERE created_at >= 0) AS data
    FROM (SELECT seq, created_at, id, kind FROM events
          WHERE collection = $1 AND seq > $2 ORDER BY seq LIMIT $3) AS f"""
# Past this share of the kept list, new events are sorted in with the rest, not inserted; and a
# refresh that finds more than this share (or `_RELOAD_AFTER`) committed since reads the whole
# list again, by COPY, rather than row by row from the table.
_INSERT_SHARE: Final = 16
_RELOAD_AFTER: Final = 10_000
_FEW_KINDS: Final = 8  # the kinds of a list found by masks up to this many, else by a sort
SHARED_LISTS: Final = 3  # sealed lists shared by sessions, per collection (by their kinds)

Ts = npt.NDArray[np.uint64]
Ids = npt.NDArray[np.uint8]
Tuple2 = tuple[Ts, Ids]


ITEM_BYTES: Final = 72  # a sealed list's bytes an item (`Items.nbytes`), about
# What each collection holds of the kinds its counts row keeps (sql/009): one row each.
_SQL_COUNTS: Final = """
    SELECT coalesce(sum(evidence), 0) AS evidence, coalesce(sum(claims), 0) AS claims,
           coalesce(sum(links), 0) AS links, coalesce(sum(contradictions), 0) AS contradictions
    FROM collection_counts WHERE collection = ANY($1::text[])"""
_COUNTED: Final = {
    KIND_EVIDENCE: "evidence",
    KIND_CLAIM: "claims",
    KIND_LINK: "links",
    KIND_CONTRADICTION: "contradictions",
}
# Beyond the counted kinds: member lists, the people's profiles and terms; a few per collection
# and person, never priced by the thousand.
_UNCOUNTED: Final = 100


class TooMany(Exception):
    """More items than the caller's cap."""


async def most_items(pool: Pool, scope: Scope, wanted: Filter) -> int:
    """How many items `wanted` can match in `scope`, at most, from the collections' counts (a
    row each, no list read): what a NEG-OPEN is priced by, and the memory its list would take
    is checked against, before anything is built. `since` and `until` are not looked at: an
    honest sync asks for the whole collection, and a narrower window pays as the whole."""
    slugs = slugs_of(scope)
    if wanted.empty or not slugs:
        return 0
    row = await pool.fetchrow(_SQL_COUNTS, slugs)
    kinds = (
        _COUNTED if wanted.kinds is None else {k: _COUNTED[k] for k in wanted.kinds & set(_COUNTED)}
    )
    most = _UNCOUNTED + sum(int(row[column]) for column in kinds.values()) if row else _UNCOUNTED
    if wanted.ids is not None:
        most = min(most, len(wanted.ids))
    return most


async def negentropy_items(
    pool: Pool, scope: Scope, wanted: Filter, cap: int, cache: ItemCache | None = None
) -> Items:
    """The items `wanted` matches in `scope`, or `TooMany` past `cap` of them; through
    `cache` when the filter is one it serves."""
    slugs = slugs_of(scope)
    if wanted.empty or not slugs:
        return Items(np.zeros(0, np.uint64), np.zeros((0, ID_SIZE), np.uint8))
    if cache is not None and ItemCache.serves(wanted):
        try:
            return await cache.items(pool, slugs, wanted, cap)
        except _NotKept:
            pass  # read below: the filter may match fewer than the cap
    return await _read(pool, slugs, wanted, cap)


async def _read(pool: Pool, slugs: list[Slug], wanted: Filter, cap: int) -> Items:
    stamps = [np.zeros(0, np.uint64)]
    ids = [np.zeros((0, ID_SIZE), np.uint8)]
    total = 0
    # Each collection alone, and the people's profiles and terms once, for every slug.
    queries: list[tuple[str, list[Any]]] = []
    for slug in slugs:
        query = _Query([slug])
        for part in query.parts(wanted, None, columns=_COLUMNS):
            if UNSCOPED not in part:
                queries.append((part, query.args))
    queries += _people_queries(slugs, wanted)
    for sql, args in queries:
        ts, found = await _fetch(pool, sql, args, cap - total + 1)
        total += len(ts)
        if total > cap:
            raise TooMany(f"more than {cap:,}")
        stamps.append(ts)
        ids.append(found)
    # Sorting (when several collections), checking and summing a million items take a few
    # hundred milliseconds: off the event loop.
    return await reconciling(Items, np.concatenate(stamps), np.concatenate(ids))


def _people_queries(slugs: list[Slug], wanted: Filter) -> list[tuple[str, list[Any]]]:
    query = _Query(slugs)
    return [
        (part, query.args)
        for part in query.parts(wanted, None, columns=_COLUMNS)
        if UNSCOPED in part
    ]


async def _fetch(pool: Pool, sql: str, args: list[Any], limit: int) -> tuple[Ts, Ids]:
    # One row: every item's 8-byte big-endian created_at and 32-byte id, end to end, in the
    # index's order (the aggregate reads its subquery in order; `Items` checks it).
    data = await pool.fetchval(
        "SELECT string_agg(int8send(created_at) || decode(id, 'hex'), ''::bytea) FROM "
        f"({sql} AND created_at >= 0 ORDER BY created_at, id LIMIT {limit}) AS f",
        *args,
    )
    return _rows(data or b"")


def _rows(data: bytes) -> tuple[Ts, Ids]:
    """40 bytes an item (created_at, id) as arrays, without a Python object per item."""
    rows = np.frombuffer(data, dtype=_ROW)
    ts = rows["ts"].astype(np.uint64)
    found = np.frombuffer(rows["id"].tobytes(), dtype=np.uint8).reshape(len(rows), ID_SIZE)
    return ts, found


# --- the kept lists ----------------------------------------------------------------------------


class _NotKept(Exception):
    """This collection's list is not kept (longer than the cap): read it."""


@dataclass(slots=True)
class _Kept:
    """One collection's events as this process keeps them: sorted by (created_at, id)."""

    last: int  # the seq they are current to
    ts: Ts
    ids: Ids
    kinds: npt.NDArray[np.int32]
    present: frozenset[int]  # the kinds among them
    # Sealed lists sessions share, by the kinds they hold (None: all): each with the people's
    # profiles and terms it was merged with, as bytes, to tell whether they changed since.
    sealed: OrderedDict[frozenset[int] | None, tuple[bytes, Items]] = field(
        default_factory=OrderedDict
    )

    @property
    def nbytes(self) -> int:
        shared = sum(items.nbytes for _, items in self.sealed.values())
        return self.ts.nbytes + self.ids.nbytes + self.kinds.nbytes + shared


class ItemCache:
    """The kept lists of this process's collections, shared by every NIP-77 session."""

    def __init__(self, budget: int) -> None:
        """`budget`: the bytes all kept lists may take together."""
        self.budget = budget
        self._kept: OrderedDict[Slug, _Kept] = OrderedDict()
        self._locks: dict[Slug, asyncio.Lock] = {}
        self._too_long: set[Slug] = set()  # never kept: a list only grows
        self._leases: dict[int, tuple[Items, int]] = {}  # sessions' lists: list, holders

    # --- what sessions hold -------------------------------------------------------------------

    def charge(self, items: Items) -> int:
        """What a session holding `items` adds to the process's memory: its size, unless a
        session holds the very same list already (sessions of a collection share its kept list,
        sealed once)."""
        return 0 if id(items) in self._leases else items.nbytes

    def lease(self, items: Items) -> None:
        """A session holds `items` from now on."""
        held = self._leases.get(id(items))
        self._leases[id(items)] = (items, 1 if held is None else held[1] + 1)

    def release(self, items: Items) -> int:
        """A session lets `items` go: the bytes the process holds no more (its size, when it
        was the last session holding it)."""
        _, holders = self._leases[id(items)]
        if holders > 1:
            self._leases[id(items)] = (items, holders - 1)
            return 0
        del self._leases[id(items)]
        return items.nbytes

    def shares(self, slugs: list[Slug], wanted: Filter) -> bool:
        """Whether a session holds the list a NEG-OPEN of `wanted` over `slugs` would likely be
        given (its collection's kept list, sealed for these kinds): it then takes no more
        memory, and is let in while memory is short, as `charge` would find once it is built."""
        if len(slugs) != 1 or wanted.since is not None or wanted.until is not None:
            return False
        kept = self._kept.get(slugs[0])
        if kept is None or not self.serves(wanted):
            return False
        found = kept.sealed.get(_sealed_key(kept, wanted))
        return found is not None and id(found[1]) in self._leases

    @staticmethod
    def serves(wanted: Filter) -> bool:
        """Whether a filter is one of kinds, since and until only."""
        return wanted.ids is None and wanted.authors is None and not wanted.tags

    @property
    def nbytes(self) -> int:
        return sum(kept.nbytes for kept in self._kept.values())

    async def items(self, pool: Pool, slugs: list[Slug], wanted: Filter, cap: int) -> Items:
        query = _Query(slugs)
        people: list[tuple[Ts, Ids]] = []
        total = 0
        for sql, args in _people_queries(slugs, wanted):
            ts, ids = await _fetch(pool, sql, args, cap + 1)
            total += len(ts)
            people.append((ts, ids))
        if not query._scoped(wanted):
            if total > cap:
                raise TooMany(f"more than {cap:,}")
            return await reconciling(_merged, people)
        if len(slugs) == 1 and wanted.since is None and wanted.until is None:
            # What a sync of a collection asks: one list for every session that asks the same
            return await self._shared(pool, slugs[0], wanted, people, cap)
        parts = list(people)
        for slug in slugs:
            kept = await self._current(pool, slug, cap)
            ts, ids = await reconciling(_masked, kept, wanted)
            total += len(ts)
            if total > cap:
                raise TooMany(f"more than {cap:,}")
            parts.append((ts, ids))
        if total > cap:
            raise TooMany(f"more than {cap:,}")
        return await reconciling(_merged, parts)

    async def _shared(
        self, pool: Pool, slug: Slug, wanted: Filter, people: list[Tuple2], cap: int
    ) -> Items:
        """The collection's events of the filter's kinds and the people's profiles and terms,
        sealed once and shared by every session that asks for the same while nothing changed
        (a few kinds' lists kept per collection, the least recently asked first out)."""
        kept = await self._current(pool, slug, cap)
        key = _sealed_key(kept, wanted)
        mark = b"".join(ts.tobytes() + ids.tobytes() for ts, ids in people)
        async with self._locks.setdefault(slug, asyncio.Lock()):
            found = kept.sealed.get(key)
            if found is not None and found[0] == mark:
                kept.sealed.move_to_end(key)
                return found[1]
            if wanted.kinds is None or kept.present <= wanted.kinds:
                scoped = (kept.ts, kept.ids)  # all of them: the kept arrays themselves
            else:
                scoped = await reconciling(_masked, kept, wanted)
            if len(scoped[0]) + sum(len(ts) for ts, _ in people) > cap:
                raise TooMany(f"more than {cap:,}")
            items = await reconciling(_merged, [scoped, *people])
            kept.sealed[key] = (mark, items)
            kept.sealed.move_to_end(key)
            while len(kept.sealed) > SHARED_LISTS:
                kept.sealed.popitem(last=False)
            if self._kept.get(slug) is kept:
                self._keep(slug, kept)  # counted again, with what it shares
            return items

    async def _current(self, pool: Pool, slug: Slug, cap: int) -> _Kept:
        """The collection's kept list, brought up to date (read whole the first time)."""
        if slug in self._too_long:
            raise _NotKept(slug)
        lock = self._locks.setdefault(slug, asyncio.Lock())
        async with lock:
            held = self._kept.get(slug)
            kept = await (
                _load(pool, slug, cap) if held is None else _refresh(pool, held, slug, cap)
            )
            if len(kept.ts) > cap:
                self._drop(slug)
                self._too_long.add(slug)
                raise _NotKept(slug)
            self._keep(slug, kept)
            return kept

    async def warm(self, pool: Pool, collections: int, cap: int) -> tuple[int, int]:
        """Load the lists of the `collections` largest collections (as their logs count
        them), largest first, while they fit in the budget beside what is kept (never one out
        for another): so that the first sync of a large collection after the server starts
        finds its list kept, as the next ones do. One collection at a time, under its lock (a
        session asking for it meanwhile waits for this read instead of making its own).
        Returns the collections and events loaded."""
        rows = await pool.fetch(_SQL_LARGEST, collections)
        loaded = events = 0
        for row in rows:
            slug: Slug = row["slug"]
            if slug in self._kept or slug in self._too_long:
                continue
            if row["size"] > cap or self.nbytes + row["size"] * _KEPT_ROW.itemsize > self.budget:
                continue  # a log counts every event: this one would not be kept
            async with self._locks.setdefault(slug, asyncio.Lock()):
                if slug in self._kept:
                    continue
                kept = await _load(pool, slug, cap)
                if len(kept.ts) > cap:
                    self._too_long.add(slug)
                    continue
                if self.nbytes + kept.nbytes > self.budget:
                    continue
                self._kept[slug] = kept
                self._kept.move_to_end(slug, last=False)  # first out: no session asked yet
            loaded += 1
            events += len(kept.ts)
        return loaded, events

    def _keep(self, slug: Slug, kept: _Kept) -> None:
        self._kept[slug] = kept
        self._kept.move_to_end(slug)
        while self._kept and self.nbytes > self.budget:
            self._kept.popitem(last=False)  # the least recently used (this one, if alone too big)

    def _drop(self, slug: Slug) -> None:
        self._kept.pop(slug, None)


async def _load(pool: Pool, slug: Slug, cap: int) -> _Kept:
    """The collection's whole list (up to one past `cap`), as of one snapshot."""
    sink = CopyRows()
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        last = await conn.fetchval(_SQL_LAST, slug)
        await conn.copy_from_query(_SQL_LIST, slug, cap + 1, output=sink.write, format="binary")
    ts, ids, kinds = sink.result()
    return await reconciling(_kept_of, last or 0, ts, ids, kinds)


def _kept_of(last: int, ts: Ts, ids: Ids, kinds: npt.NDArray[np.int32]) -> _Kept:
    order = item_order(ts, ids)  # the index's order already: checked in O(n), not sorted
    if order is not None:
        ts, ids, kinds = ts[order], ids[order], kinds[order]
    return _Kept(last, ts, ids, kinds, _kinds(kinds))


async def _refresh(pool: Pool, kept: _Kept, slug: Slug, cap: int) -> _Kept:
    # Row by row from the table (by seq) only while it is a few: past that, the whole list
    # again from the index is cheaper (a server that kept a list, then saw a large import).
    room = max(cap - len(kept.ts), 0) + 1  # one past the cap is enough to know
    few = max(len(kept.ts) // _INSERT_SHARE, _RELOAD_AFTER)
    row = await pool.fetchrow(_SQL_SINCE, slug, kept.last, min(room, few + 1))
    if row is None or row["last"] is None:  # nothing committed since
        return kept
    if room > few and _count(row["data"]) > few:
        return await _load(pool, slug, cap)
    return await reconciling(_added, kept, row["last"], row["data"] or b"")


def _sealed_key(kept: _Kept, wanted: Filter) -> frozenset[int] | None:
    """Which of a collection's shared lists a filter of kinds asks for (None: every kind)."""
    universe = kept.present | unscoped_kinds()
    key = None if wanted.kinds is None else frozenset(wanted.kinds & universe)
    return None if key == universe else key  # every kind there is: as no kinds at all


def _count(data: bytes | None) -> int:
    return 0 if data is None else len(data) // _KEPT_ROW.itemsize


def _masked(kept: _Kept, wanted: Filter) -> tuple[Ts, Ids]:
    keep = np.ones(len(kept.ts), dtype=bool)
    if wanted.kinds is not None:
        keep &= np.isin(kept.kinds, np.array(sorted(wanted.kinds), dtype=np.int64))
    if wanted.since is not None:
        keep &= kept.ts >= np.uint64(max(wanted.since, 0))
    if wanted.until is not None:
        if wanted.until < 0:
            keep[:] = False
        else:
            keep &= kept.ts <= np.uint64(wanted.until)
    return kept.ts[keep], kept.ids[keep]


def _kept_rows(data: bytes) -> tuple[Ts, Ids, npt.NDArray[np.int32]]:
    """44 bytes an item (created_at, id, kind), sorted by (created_at, id)."""
    rows = np.frombuffer(data, dtype=_KEPT_ROW)
    ts = rows["ts"].astype(np.uint64)
    ids = np.frombuffer(rows["id"].tobytes(), dtype=np.uint8).reshape(len(rows), ID_SIZE)
    kinds = rows["kind"].astype(np.int32)
    order = item_order(ts, ids)
    if order is not None:
        ts, ids, kinds = ts[order], ids[order], kinds[order]
    return ts, ids, kinds


def _added(kept: _Kept, last: int, data: bytes) -> _Kept:
    """The kept list with the events committed since merged in: a new list (sessions keep
    reading the one they were given)."""
    ts, ids, kinds = _kept_rows(data)
    if not len(ts):
        return _Kept(last, kept.ts, kept.ids, kept.kinds, kept.present, kept.sealed)
    present = kept.present | _kinds(kinds)
    if len(ts) * _INSERT_SHARE > len(kept.ts):
        all_ts = np.concatenate([kept.ts, ts])
        all_ids = np.concatenate([kept.ids, ids])
        all_kinds = np.concatenate([kept.kinds, kinds])
        order = item_order(all_ts, all_ids)
        if order is not None:
            all_ts, all_ids, all_kinds = all_ts[order], all_ids[order], all_kinds[order]
        return _Kept(last, all_ts, all_ids, all_kinds, present)
    points = insertion_points(kept.ts, kept.ids, ts, ids)
    return _Kept(
        last,
        np.insert(kept.ts, points, ts),
        np.insert(kept.ids, points, ids, axis=0),
        np.insert(kept.kinds, points, kinds),
        present,
    )


def _kinds(kinds: npt.NDArray[np.int32]) -> frozenset[int]:
    """The kinds among them: a collection holds a few, so a mask per kind found (a
    million items in milliseconds) rather than a sort of them all (a tenth of a second)."""
    found: set[int] = set()
    rest = kinds
    while len(rest) and len(found) < _FEW_KINDS:
        kind = int(rest[0])
        found.add(kind)
        rest = rest[rest != kind]
    if len(rest):
        found.update(np.unique(rest).tolist())
    return frozenset(found)


def _merged(parts: list[tuple[Ts, Ids]]) -> Items:
    """Sorted parts as one sealed list: the smaller ones inserted into the largest (the
    people's few profiles beside a million events cost one copy, not a sort)."""
    parts = [part for part in parts if len(part[0])]
    if not parts:
        return Items(np.zeros(0, np.uint64), np.zeros((0, ID_SIZE), np.uint8))
    parts.sort(key=lambda part: len(part[0]))
    base_ts, base_ids = parts.pop()
    if not parts:
        return Items(base_ts, base_ids)
    ts = np.concatenate([p[0] for p in parts])
    ids = np.concatenate([p[1] for p in parts])
    if len(ts) * _INSERT_SHARE > len(base_ts):
        return Items(np.concatenate([base_ts, ts]), np.concatenate([base_ids, ids]))
    order = item_order(ts, ids)
    if order is not None:
        ts, ids = ts[order], ids[order]
    points = insertion_points(base_ts, base_ids, ts, ids)
    return Items(np.insert(base_ts, points, ts), np.insert(base_ids, points, ids, axis=0))
