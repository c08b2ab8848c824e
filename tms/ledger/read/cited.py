"""What a proof's tree prints of the events it cites, read from one collection: kinds and short
fields from the typed tables (never a document's text), a link's anchor, and what disputes each
claim and each link the proof rests on (`tms.rules.cited`).

Called by `Reads.cited` (`tms.ledger.read.reads`) with the collection of a `ReadableCollection`;
every statement filters on it, so an id from elsewhere is simply absent and a proof can never
learn another collection's contents (or that the id exists). The disputes are read as the proof
is checked, never kept, so a dispute stored since the last check shows.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from tms.rules.cited import (
    CITED_TEXT_CHARS,
    DISPUTE_REASON_CHARS,
    MAX_DISPUTES,
    Cited,
    Dispute,
)
from tms.store.database import Connection
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    EventId,
    Slug,
)

# What a proof's tree prints of each cited event of one collection ($1): $2 the ids, $3 how
# much of each text (never a document's text). Links come with their anchors; any other kind
# (a member list) with its kind alone.
_SQL_CITED: Final = f"""
    SELECT id, {KIND_CLAIM} AS kind, left(text, $3) AS text, NULL AS title,
           NULL AS url, NULL AS source, NULL AS relation, NULL AS from_id,
           NULL AS to_id, NULL AS quote, NULL AS reason, NULL::bigint AS claims,
           NULL::int AS start_offset, NULL::int AS end_offset, NULL::int AS occurrences
    FROM claims WHERE collection = $1 AND id = ANY($2::text[])
    UNION ALL
    SELECT id, {KIND_EVIDENCE}, NULL, left(title, $3), left(url, $3),
           left(source, $3), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM evidence WHERE collection = $1 AND id = ANY($2::text[])
    UNION ALL
    SELECT l.id, {KIND_LINK}, NULL, NULL, NULL, NULL, l.relation, l.from_id, l.to_id,
           left(l.quote, $3), NULL, NULL, a.start_offset, a.end_offset, a.occurrences
    FROM links l LEFT JOIN link_anchors a ON a.link_id = l.id AND a.collection = $1
    WHERE l.collection = $1 AND l.id = ANY($2::text[])
    UNION ALL
    SELECT c.id, {KIND_CONTRADICTION}, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, left(c.reason, $3),
           (SELECT count(*) FROM contradiction_claims x
            WHERE x.contradiction_id = c.id AND x.collection = $1),
           NULL, NULL, NULL
    FROM contradictions c WHERE c.collection = $1 AND c.id = ANY($2::text[])
    UNION ALL
    SELECT id, kind, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL
    FROM events WHERE collection = $1 AND id = ANY($2::text[])
      AND kind NOT IN ({KIND_CLAIM}, {KIND_EVIDENCE}, {KIND_LINK}, {KIND_CONTRADICTION})"""

# The disputes of claims and links ($2) in one collection ($1): REBUTS links pointing at each
# and the contradictions naming each (only a claim is ever named), the first $3 of each kind
# per event, oldest first, reasons cut to $4 characters (ellipsis included). Each event's
# look-ups walk its own index entries. (`claim_id` names the event, claim or link.)
_SQL_DISPUTES: Final = """
    SELECT c.claim_id, d.is_link, d.id,
           CASE WHEN char_length(d.reason) > $4 THEN left(d.reason, $4 - 1) || '…'
                ELSE d.reason END AS reason
    FROM unnest($2::text[]) AS c(claim_id)
    CROSS JOIN LATERAL (
        (SELECT true AS is_link, l.id, l.reason, l.seq FROM links l
         WHERE l.collection = $1 AND l.to_id = c.claim_id AND l.relation = 'REBUTS'
         ORDER BY l.seq LIMIT $3)
        UNION ALL
        (SELECT false, k.id, k.reason, k.seq FROM contradiction_claims cc
         JOIN contradictions k ON k.id = cc.contradiction_id AND k.collection = $1
         WHERE cc.collection = $1 AND cc.claim_id = c.claim_id AND k.collection = $1
         ORDER BY k.seq LIMIT $3)) AS d
    ORDER BY c.claim_id, d.seq"""


async def cited_events(
    conn: Connection, collection: Slug, ids: Collection[str]
) -> dict[EventId, Cited]:
    """The cited events of `collection` among `ids`, as `Cited` records, each claim and each
    link with its disputes (`disputes`)."""
    rows = await conn.fetch(_SQL_CITED, collection, list(ids), CITED_TEXT_CHARS)
    # Claims and links are disputed alike by a REBUTS link aimed at them; a claim also by a
    # contradiction naming it (which never names a link).
    disputable = [r["id"] for r in rows if r["kind"] in (KIND_CLAIM, KIND_LINK)]
    disputes_of = await disputes(conn, collection, disputable)
    none: tuple[list[Dispute], list[Dispute]] = ([], [])
    return {
        r["id"]: Cited(
            r["kind"],
            text=r["text"],
            title=r["title"],
            url=r["url"],
            source=r["source"],
            relation=r["relation"],
            from_=r["from_id"],
            to=r["to_id"],
            quote=r["quote"],
            anchor=None
            if r["start_offset"] is None
            else (r["start_offset"], r["end_offset"], r["occurrences"]),
            reason=r["reason"],
            claims=r["claims"],
            rebuts=tuple(disputes_of.get(r["id"], none)[0]),
            contradictions=tuple(disputes_of.get(r["id"], none)[1]),
        )
        for r in rows
    }


async def disputes(
    conn: Connection, collection: Slug, claims: list[EventId]
) -> dict[EventId, tuple[list[Dispute], list[Dispute]]]:
    """For each claim or link, the REBUTS links of `collection` pointing at it and the
    contradictions of `collection` naming it (a claim's only): the first `MAX_DISPUTES` of
    each, oldest first, reasons cut. One statement for all of them, read as the proof is
    checked, so a dispute stored since the last check shows."""
    found: dict[EventId, tuple[list[Dispute], list[Dispute]]] = {}
    if not claims:
        return found
    rows = await conn.fetch(_SQL_DISPUTES, collection, claims, MAX_DISPUTES, DISPUTE_REASON_CHARS)
    for r in rows:
        rebuts, contradictions = found.setdefault(r["claim_id"], ([], []))
        (rebuts if r["is_link"] else contradictions).append(Dispute(r["id"], r["reason"]))
    return found
