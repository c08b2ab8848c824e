"""Anchors in the database: the rows of `link_anchors` (sql/005), and the one-off back-fill of
the links stored before there were anchors.

A new link's anchor is written by the publish that stores it (`tms.ledger.writes`), computed in
the same pass that finds its quote. Links stored earlier get theirs at start-up: `backfill` reads
the evidence they quote one document at a time, anchors every quote of it off the event loop,
and inserts the rows; a link that has its anchor is never looked at again, so once every link
has one a start-up costs one anti-join. Two servers starting at once may both compute an
anchor; the first insert wins and the other is dropped (`ON CONFLICT DO NOTHING`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from tms.rules.anchors import Anchor, anchor
from tms.rules.quotes import PreparedText
from tms.store.database import Pool
from tms.types import EventId

log = logging.getLogger(__name__)

# The columns of `link_anchors`; `anchor_row` gives the ones after `link_id` and `collection`.
ANCHOR_COLUMNS: Final = [
    *("link_id", "collection", "start_offset", "end_offset"),
    *("exact", "prefix", "suffix", "occurrences"),
]

_SQL_PENDING_EVIDENCE: Final = """
    SELECT DISTINCT l.collection, l.from_id FROM links l
    WHERE NOT EXISTS (SELECT 1 FROM link_anchors a
                      WHERE a.link_id = l.id AND a.collection = l.collection)"""
# A link and the evidence it quotes share a collection, which leads the index on (collection,
# from_id).
_SQL_PENDING_LINKS: Final = """
    SELECT l.id, l.quote FROM links l
    WHERE l.collection = $1 AND l.from_id = $2
      AND NOT EXISTS (SELECT 1 FROM link_anchors a
                      WHERE a.link_id = l.id AND a.collection = l.collection)
    ORDER BY l.seq"""
_SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1 AND collection = $2"


def anchor_row(found: Anchor) -> tuple[int, int, str, str, str, int]:
    """An anchor as the columns of `link_anchors` after `link_id` and `collection`."""
    return (
        found.start,
        found.end,
        found.exact,
        found.prefix,
        found.suffix,
        found.occurrences,
    )


def _anchor_all(text: str, quotes: Sequence[tuple[EventId, str]]) -> dict[EventId, Anchor | None]:
    prepared = PreparedText(text)
    return {link_id: anchor(prepared, quote) for link_id, quote in quotes}


async def backfill(pool: Pool) -> int:
    """Anchor every stored link that has no anchor yet; returns how many were written. A link
    whose quote is not found in its evidence (none should be: publishing refuses them) is
    logged and left without one."""
    pending = [(r["collection"], r["from_id"]) for r in await pool.fetch(_SQL_PENDING_EVIDENCE)]
    written = 0
    for collection, evidence_id in pending:
        async with pool.acquire() as conn:
            links = await conn.fetch(_SQL_PENDING_LINKS, collection, evidence_id)
            text = await conn.fetchval(_SQL_TEXT, evidence_id, collection)
        if not links or text is None:
            continue
        quotes = [(r["id"], r["quote"]) for r in links]
        found = await asyncio.to_thread(_anchor_all, text, quotes)
        del text
        rows: list[tuple[Any, ...]] = []
        for r in links:
            got = found[r["id"]]
            if got is None:
                log.warning("link %s: quote not in evidence %s; no anchor", r["id"], evidence_id)
                continue
            rows.append((r["id"], collection, *anchor_row(got)))
        if rows:
            await pool.executemany(
                f"""INSERT INTO link_anchors ({", ".join(ANCHOR_COLUMNS)})
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                    ON CONFLICT (link_id, collection) DO NOTHING""",
                rows,
            )
            written += len(rows)
    if written:
        log.info("anchored %d links stored before anchors existed", written)
    return written
