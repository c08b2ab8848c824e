"""Where a page's view of a collection ends: the newest of its events of some kinds when the page
was read, for the page's live part (`tms/pages/static/live.js`) to tell the events committed after
the page was rendered from those it shows already.

A relay's stored answer is newest first in the ledger's own order (`seq`, which grows in commit
order within a collection: `tms.ledger.read.feed`), so the events it sends before this one are
exactly those committed since. `created_at` could not say it: it is the signer's claim.

The look-up reads at most the collection's `WINDOW` newest events, whatever the collection holds:
a collection whose newest thousand events hold none of the kinds answers "unknown", and the page
then follows only what is committed after it subscribes.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from tms.ledger.access import ReadableCollection
from tms.store.database import Pool
from tms.types import EventId

WINDOW: Final = 1000
NONE_YET: Final = ""  # the collection holds no event of those kinds: every one is new

_SQL_NEWEST: Final = f"""
    WITH recent AS (
        SELECT id, kind, seq FROM events WHERE collection = $1 ORDER BY seq DESC LIMIT {WINDOW})
    SELECT (SELECT id FROM recent WHERE kind = ANY($2::int[]) ORDER BY seq DESC LIMIT 1) AS id,
           (SELECT count(*) FROM recent) AS recent"""


async def newest(
    pool: Pool, readable: ReadableCollection, kinds: Collection[int]
) -> EventId | None:
    """The id of the newest event of `kinds` in the collection; `NONE_YET` when it holds none;
    None when none is among its `WINDOW` newest events (unknown)."""
    row = await pool.fetchrow(_SQL_NEWEST, readable.slug, sorted(kinds))
    if row is None:
        return NONE_YET
    if row["id"] is not None:
        found: EventId = row["id"]
        return found
    return NONE_YET if row["recent"] < WINDOW else None
