"""A collection's links with what their W3C annotations name (`tms.rules.annotations`): each
link's signed event, the text of the claim it points at, its evidence's URL and its anchor.

Read as the export reads: from one snapshot, through a cursor in ledger order, on the export
pool (`Exporter.annotated_links`), so memory stays flat whatever the collection's size and a
stalled download never holds up publishing. No evidence text is read: an evidence row gives its
URL only, and the anchor its stored selectors.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Final

import asyncpg

from tms.ledger.access import ReadableCollection
from tms.nostr.events import Event
from tms.rules.annotations import AnnotatedLink, Selectors
from tms.store.database import Pool

ANNOTATION_BATCH: Final = 500  # rows fetched per round trip

# Every join names the collection as well as the id (on Citus that keeps it on one worker).
_SQL_LINKS: Final = """
    SELECT e.id, e.pubkey, e.created_at, e.kind, e.tags, e.content, e.sig,
           c.text AS claim_text, v.url AS evidence_url,
           a.start_offset, a.end_offset, a.exact, a.prefix, a.suffix
    FROM links l
    JOIN events e ON e.collection = l.collection AND e.seq = l.seq
    LEFT JOIN claims c ON c.collection = l.collection AND c.id = l.to_id
    LEFT JOIN evidence v ON v.collection = l.collection AND v.id = l.from_id
    LEFT JOIN link_anchors a ON a.collection = l.collection AND a.link_id = l.id
    WHERE l.collection = $1
    ORDER BY l.seq"""


async def annotated_links(
    pool: Pool, readable: ReadableCollection
) -> AsyncGenerator[AnnotatedLink, None]:
    """Every link of the collection, oldest first, with what its annotation names. Holds a
    pooled connection until exhausted or closed: callers close it (`aclosing`)."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        async for row in conn.cursor(_SQL_LINKS, readable.slug, prefetch=ANNOTATION_BATCH):
            yield _annotated(row)


def _annotated(row: asyncpg.Record) -> AnnotatedLink:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # links carry none
    event = Event(
        row["id"], row["pubkey"], row["created_at"], row["kind"], tags, row["content"], row["sig"]
    )
    anchor = None
    if row["start_offset"] is not None:
        anchor = Selectors(
            row["start_offset"], row["end_offset"], row["exact"], row["prefix"], row["suffix"]
        )
    return AnnotatedLink(event, row["claim_text"], row["evidence_url"], anchor)
