"""The items of a NIP-77 session: (created_at, id) of the events a filter matches in what a
reader may read, as `tms.nostr.negentropy.Items`.

Read once per NEG-OPEN from the index that holds exactly those columns (sql/022), one collection at
a time (on Citus each such query runs on the one worker that holds it, aggregate and all), as one
value: 40 bytes an item end to end, turned into numpy arrays without a Python object per item (a
row per item costs seconds a million), so a million items cost about 40 MB while read and 72 MB
kept (`Items.nbytes`, which the relay counts against its memory budget). The rule of what a reader
sees is the one REQ uses (`tms.ledger.read.filters`: the collections' events, and the profiles and
terms of their people), with the same SQL. A list longer than `cap` is not built: the caller
refuses it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import numpy as np

from tms.ledger.read.filters import Scope, _Query, slugs_of
from tms.nostr.filters import Filter
from tms.nostr.negentropy import ID_SIZE, Items
from tms.store.database import Pool
from tms.types import UNSCOPED

_COLUMNS: Final = "created_at, id"
_ROW: Final = np.dtype([("ts", ">i8"), ("id", "V32")])


class TooMany(Exception):
    """More items than the caller's cap."""


async def negentropy_items(pool: Pool, scope: Scope, wanted: Filter, cap: int) -> Items:
    """The items `wanted` matches in `scope`, or `TooMany` past `cap` of them."""
    slugs = slugs_of(scope)
    stamps = [np.zeros(0, np.uint64)]
    ids = [np.zeros((0, ID_SIZE), np.uint8)]
    total = 0
    if wanted.empty or not slugs:
        return Items(stamps[0], ids[0])
    # Each collection alone, and the people's profiles and terms once, for every slug.
    queries: list[tuple[str, list[Any]]] = []
    for slug in slugs:
        query = _Query([slug])
        for part in query.parts(wanted, None, columns=_COLUMNS):
            if UNSCOPED not in part:
                queries.append((part, query.args))
    query = _Query(slugs)
    for part in query.parts(wanted, None, columns=_COLUMNS):
        if UNSCOPED in part:
            queries.append((part, query.args))
    for sql, args in queries:
        # One row: every item's 8-byte big-endian created_at and 32-byte id, end to end, in
        # the index's order (the aggregate reads its subquery in order; `Items` checks it).
        data = await pool.fetchval(
            "SELECT string_agg(int8send(created_at) || decode(id, 'hex'), ''::bytea) FROM "
            f"({sql} AND created_at >= 0 ORDER BY created_at, id LIMIT {cap - total + 1}) AS f",
            *args,
        )
        ts, found = _rows(data or b"")
        total += len(ts)
        if total > cap:
            raise TooMany(f"more than {cap:,}")
        stamps.append(ts)
        ids.append(found)
    # Sorting (when several collections), checking and summing a million items take a few
    # hundred milliseconds: off the event loop.
    return await asyncio.to_thread(Items, np.concatenate(stamps), np.concatenate(ids))


def _rows(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """40 bytes an item (created_at, id) as arrays, without a Python object per item."""
    rows = np.frombuffer(data, dtype=_ROW)
    ts = rows["ts"].astype(np.uint64)
    found = np.frombuffer(rows["id"].tobytes(), dtype=np.uint8).reshape(len(rows), ID_SIZE)
    return ts, found
