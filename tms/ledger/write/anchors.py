"""Anchors in the database: the rows of `link_anchors` (sql/005, their context sql/012), and the
one-off back-fill of the links stored before there were anchors, or before anchors kept their
context.

A new link's anchor is written by the publish that stores it (its row made by
`tms.ledger.write.rows`), computed in the same pass that finds its quote. Links stored earlier get
theirs at start-up: `backfill` reads the evidence they quote one document at a time, anchors every
quote of it off the event loop, and inserts the rows; an anchor stored before its context was
(sql/012) gets its context from the same read. A link whose anchor is whole is never looked at
again, so once every link has one a start-up costs two anti-joins. Two servers starting at once may
both compute an anchor; the first insert wins and the other is dropped (`ON CONFLICT DO NOTHING`),
and a context is only ever written where there is none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from tms.rules.anchors import Anchor, anchor, context
from tms.rules.quotes import PreparedText
from tms.store.database import Pool
from tms.types import EventId

log = logging.getLogger(__name__)

# The columns of `link_anchors`; `anchor_row` gives the ones after `link_id` and `collection`.
ANCHOR_COLUMNS: Final = [
    *("link_id", "collection", "start_offset", "end_offset"),
    *("exact", "prefix", "suffix", "occurrences", "context_before", "context_after"),
]

# The evidence quoted by links without an anchor, or with one still without its context.
# Every join names the collection as well as the id: a link and its anchor share it, and on
# Citus that keeps the join on each worker (co-located), never across them.
_SQL_PENDING_EVIDENCE: Final = """
    SELECT l.collection, l.from_id FROM links l
    WHERE NOT EXISTS (SELECT 1 FROM link_anchors a
                      WHERE a.link_id = l.id AND a.collection = l.collection)
    UNION
    SELECT l.collection, l.from_id FROM link_anchors a
    JOIN links l ON l.id = a.link_id AND l.collection = a.collection
    WHERE a.context_before IS NULL"""
# A link and the evidence it quotes share a collection, which leads the index on (collection,
# from_id).
_SQL_PENDING_LINKS: Final = """
    SELECT l.id, l.quote FROM links l
    WHERE l.collection = $1 AND l.from_id = $2
      AND NOT EXISTS (SELECT 1 FROM link_anchors a
                      WHERE a.link_id = l.id AND a.collection = l.collection)
    ORDER BY l.seq"""
_SQL_PENDING_CONTEXTS: Final = """
    SELECT a.link_id, a.start_offset, a.end_offset FROM links l
    JOIN link_anchors a
      ON a.link_id = l.id AND a.collection = l.collection AND a.context_before IS NULL
    WHERE l.collection = $1 AND l.from_id = $2"""
_SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1 AND collection = $2"
_SQL_SET_CONTEXT: Final = """
    UPDATE link_anchors SET context_before = $2, context_after = $3
    WHERE link_id = $1 AND collection = $4 AND context_before IS NULL"""


def anchor_row(found: Anchor) -> tuple[int, int, str, str, str, int, str, str]:
    """An anchor as the columns of `link_anchors` after `link_id` and `collection`."""
    return (
        found.start,
        found.end,
        found.exact,
        found.prefix,
        found.suffix,
        found.occurrences,
        found.context_before,
        found.context_after,
    )


def _anchor_all(
    text: str, quotes: Sequence[tuple[EventId, str]], spans: Sequence[tuple[EventId, int, int]]
) -> tuple[dict[EventId, Anchor | None], list[tuple[EventId, str, str]]]:
    prepared = PreparedText(text) if quotes else None
    anchors = {
        link_id: anchor(prepared, quote) for link_id, quote in quotes if prepared is not None
    }
    contexts = [(link_id, *context(text, start, end)) for link_id, start, end in spans]
    return anchors, contexts


async def backfill(pool: Pool) -> int:
    """Anchor every stored link that has no anchor yet, and give every anchor without its
    context one; returns how many rows were written or completed. A link whose quote is not
    found in its evidence (none should be: publishing refuses them) is logged and left without
    an anchor."""
    pending = [(r["collection"], r["from_id"]) for r in await pool.fetch(_SQL_PENDING_EVIDENCE)]
    written = 0
    for collection, evidence_id in pending:
        async with pool.acquire() as conn:
            links = await conn.fetch(_SQL_PENDING_LINKS, collection, evidence_id)
            spans = await conn.fetch(_SQL_PENDING_CONTEXTS, collection, evidence_id)
            text = (
                await conn.fetchval(_SQL_TEXT, evidence_id, collection) if links or spans else None
            )
        if text is None:
            continue
        quotes = [(r["id"], r["quote"]) for r in links]
        bounds = [(r["link_id"], r["start_offset"], r["end_offset"]) for r in spans]
        found, contexts = await asyncio.to_thread(_anchor_all, text, quotes, bounds)
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
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                    ON CONFLICT (link_id, collection) DO NOTHING""",
                rows,
            )
            written += len(rows)
        if contexts:
            await pool.executemany(_SQL_SET_CONTEXT, [(*c, collection) for c in contexts])
            written += len(contexts)
    if written:
        log.info("anchored %d links stored before anchors (or their context) existed", written)
    return written
