"""The links that dispute links: for each of a page's links, the REBUTS links aimed at it.

A link is disputed by publishing a REBUTS link whose `to` is its id (SPEC: "To dispute a link
..., publish a link whose `to` is that event's id"). Wherever a link is shown, its disputes are
shown with it: the claim page and the evidence page mark it (`disputes`), `get_links` lists
their ids (`disputed_by`), and `check_proof` names the cited links that are disputed
(`tms.ledger.read.cited`). A SUPPORTS link aimed at a link backs it and marks nothing.

One statement for a whole page of links, each link's look-up walking its own entries of the
`(collection, to_id)` index and reading at most `MAX_LINK_DISPUTES` + 1 of them (the one more
says that there are more), so a page costs bounded time whatever the collection holds. Every
statement filters on the page's collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tms.ledger.read import records
from tms.ledger.read.excerpts import REASON_CHARS, TITLE_CHARS, Cut
from tms.store.database import Connection
from tms.types import EventId, PubKey, Slug

MAX_LINK_DISPUTES: Final = 10  # REBUTS links read per disputed link, oldest first

# For each link ($2) of one collection ($1), the REBUTS links aimed at it, oldest first, at
# most $3; $4 and $5: how much of each reason and of its evidence's title.
_SQL_LINK_DISPUTES: Final = """
    SELECT t.link_id, d.id, d.pubkey, d.from_id, left(d.reason, $4) AS reason,
           (SELECT left(v.title, $5) FROM evidence v
            WHERE v.id = d.from_id AND v.collection = $1) AS source_title
    FROM unnest($2::text[]) AS t(link_id)
    CROSS JOIN LATERAL (
        SELECT l.id, l.pubkey, l.from_id, l.reason, l.seq FROM links l
        WHERE l.collection = $1 AND l.to_id = t.link_id AND l.relation = 'REBUTS'
        ORDER BY l.seq LIMIT $3) AS d
    ORDER BY t.link_id, d.seq"""


@dataclass(frozen=True, slots=True)
class LinkDispute:
    """A REBUTS link aimed at a shown link, as a page names it: who signed it, the evidence it
    quotes (its title cut) and its reason (cut)."""

    id: EventId
    pubkey: PubKey
    author: str | None
    from_id: EventId
    reason: Cut
    source_title: Cut


@dataclass(frozen=True, slots=True)
class Disputes:
    """The first `MAX_LINK_DISPUTES` REBUTS links aimed at one link, oldest first, and whether
    there are more."""

    first: list[LinkDispute]
    more: bool


async def link_disputes(
    conn: Connection, collection: Slug, link_ids: list[EventId]
) -> dict[EventId, Disputes]:
    """The disputes of each of `link_ids` that has any (the others are absent)."""
    if not link_ids:
        return {}
    rows = await conn.fetch(
        _SQL_LINK_DISPUTES,
        collection,
        list(dict.fromkeys(link_ids)),
        MAX_LINK_DISPUTES + 1,
        REASON_CHARS + 1,
        TITLE_CHARS + 1,
    )
    names = await records.authors(conn, (r["pubkey"] for r in rows))
    found: dict[EventId, Disputes] = {}
    for r in rows:
        disputes = found.setdefault(r["link_id"], Disputes([], False))
        if len(disputes.first) == MAX_LINK_DISPUTES:
            found[r["link_id"]] = Disputes(disputes.first, True)
            continue
        disputes.first.append(
            LinkDispute(
                id=r["id"],
                pubkey=r["pubkey"],
                author=names.get(r["pubkey"]),
                from_id=r["from_id"],
                reason=Cut.of(r["reason"], REASON_CHARS),
                source_title=Cut.of(r["source_title"], TITLE_CHARS),
            )
        )
    return found
