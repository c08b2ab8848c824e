"""Records made whole: database rows as SPEC's result shapes, with their per-record extras.

Every list the reads and the search return goes through here. The extras (the signer's profile
name, the links pointing at each record, the contradictions a claim belongs to, a claim's link
counts) are fetched for the page only, in one batched `= ANY($n)` statement each, never per row
and never for the whole collection. Every statement still filters on the page's collection, so
ids handed in from elsewhere can never pull in another collection's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Final, Literal

import asyncpg

from tms.results import AnchorInfo, ClaimBrief, ClaimHit, ContradictionInfo, LinkInfo
from tms.store.database import Connection
from tms.types import EventId, PubKey, Slug

SEARCH_QUOTE_CHARS: Final = 300  # quotes inside search_claims' links, ellipsis included
ELLIPSIS: Final = "…"
COUNT_NAMES: Final = ("supports", "qualifies", "rebuts", "findings")
# What `contradictions` reads of each row: `c` a contradiction, `e` its event.
CONTRADICTION_COLUMNS: Final = "c.id, c.seq, c.pubkey, c.reason, e.content, e.received_at"

# What `anchor` reads of a row joined to `link_anchors` as `a`.
ANCHOR_COLUMNS: Final = "a.start_offset, a.end_offset, a.exact, a.prefix, a.suffix, a.occurrences"
# $1 the link, $2 its collection.
SQL_ANCHOR: Final = f"""
    SELECT {ANCHOR_COLUMNS} FROM link_anchors a WHERE a.link_id = $1 AND a.collection = $2"""

Score = Literal["distance", "rank"]
Counts = dict[str, int]

# The replaceable rule: newest created_at, ties to the lowest id (profiles_current serves it).
_SQL_AUTHORS: Final = """
    SELECT DISTINCT ON (pubkey) pubkey, name FROM profiles
    WHERE pubkey = ANY($1::text[])
    ORDER BY pubkey, created_at DESC, id"""

# $3: cut quotes to this many characters, ellipsis included (null: whole quotes). Cut in SQL so
# a long quote never crosses the wire.
_SQL_LINKS_TO: Final = f"""
    SELECT l.id, l.pubkey, l.from_id, l.to_id, l.relation, l.reason, e.received_at,
           CASE WHEN $3::int IS NOT NULL AND char_length(l.quote) > $3::int
                THEN left(l.quote, $3::int - 1) || '{ELLIPSIS}' ELSE l.quote END AS quote
    FROM links l JOIN events e ON e.seq = l.seq AND e.collection = $1
    WHERE l.collection = $1 AND l.to_id = ANY($2::text[])
    ORDER BY l.seq"""

_SQL_CONTRADICTIONS_OF: Final = """
    SELECT cc.claim_id, cc.contradiction_id FROM contradiction_claims cc
    JOIN contradictions c ON c.id = cc.contradiction_id AND c.collection = $1
    WHERE cc.collection = $1 AND cc.claim_id = ANY($2::text[]) AND c.collection = $1
    ORDER BY c.seq"""

_SQL_CLAIMS_BY_ID: Final = """
    SELECT id, pubkey, text FROM claims WHERE collection = $1 AND id = ANY($2::text[])"""

_SQL_CLAIM_LINK_COUNTS: Final = """
    SELECT to_id AS id,
           count(*) FILTER (WHERE relation = 'SUPPORTS') AS supports,
           count(*) FILTER (WHERE relation = 'QUALIFIES') AS qualifies,
           count(*) FILTER (WHERE relation = 'REBUTS') AS rebuts
    FROM links WHERE collection = $1 AND to_id = ANY($2::text[]) GROUP BY to_id"""

_SQL_CLAIM_FINDINGS: Final = """
    SELECT claim_id AS id, count(*) AS findings FROM contradiction_claims
    WHERE collection = $1 AND claim_id = ANY($2::text[]) GROUP BY claim_id"""


async def authors(conn: Connection, pubkeys: Iterable[PubKey]) -> dict[PubKey, str]:
    """Current profile names of the signers on one page (keys without a profile are absent)."""
    keys = sorted(set(pubkeys))
    if not keys:
        return {}
    return {r["pubkey"]: r["name"] for r in await conn.fetch(_SQL_AUTHORS, keys)}


def link(row: asyncpg.Record, names: dict[PubKey, str]) -> LinkInfo:
    return {
        "id": row["id"],
        "pubkey": row["pubkey"],
        "author": names.get(row["pubkey"]),
        "from": row["from_id"],
        "to": row["to_id"],
        "relation": row["relation"],
        "quote": row["quote"],
        "reason": row["reason"],
        "received_at": row["received_at"].isoformat(),
    }


def anchor(row: asyncpg.Record | None) -> AnchorInfo | None:
    """A link's anchor from its `link_anchors` columns; None for a link without one (stored
    before anchors existed, until the start-up back-fill reaches it)."""
    if row is None or row["start_offset"] is None:
        return None
    return {
        "start": row["start_offset"],
        "end": row["end_offset"],
        "exact": row["exact"],
        "prefix": row["prefix"],
        "suffix": row["suffix"],
        "occurrences": row["occurrences"],
    }


def anchored_link(row: asyncpg.Record, names: dict[PubKey, str]) -> LinkInfo:
    """A link with its anchor (`get_links`): the row carries `ANCHOR_COLUMNS`."""
    found = link(row, names)
    found["anchor"] = anchor(row)
    return found


async def links_to(
    conn: Connection, collection: Slug, targets: list[EventId], quote_chars: int | None
) -> dict[EventId, list[asyncpg.Record]]:
    """Links pointing at each target, oldest first."""
    by_target: dict[EventId, list[asyncpg.Record]] = {t: [] for t in targets}
    if targets:
        for r in await conn.fetch(_SQL_LINKS_TO, collection, targets, quote_chars):
            by_target[r["to_id"]].append(r)
    return by_target


async def claim_counts(
    conn: Connection, collection: Slug, ids: list[EventId]
) -> dict[EventId, Counts]:
    """SUPPORTS, QUALIFIES and REBUTS links pointing at each claim, and its `findings`."""
    counts = {i: dict.fromkeys(COUNT_NAMES, 0) for i in ids}
    if not ids:
        return counts
    for r in await conn.fetch(_SQL_CLAIM_LINK_COUNTS, collection, ids):
        counts[r["id"]].update(supports=r["supports"], qualifies=r["qualifies"], rebuts=r["rebuts"])
    for r in await conn.fetch(_SQL_CLAIM_FINDINGS, collection, ids):
        counts[r["id"]]["findings"] = r["findings"]
    return counts


async def claim_hits(
    conn: Connection, collection: Slug, rows: Sequence[asyncpg.Record], score: Score
) -> list[ClaimHit]:
    """search_claims items: each claim with the links pointing at it (quotes cut) and the ids
    of the contradictions it belongs to, oldest first."""
    ids = [r["id"] for r in rows]
    links = await links_to(conn, collection, ids, SEARCH_QUOTE_CHARS)
    contradictions: dict[EventId, list[EventId]] = {i: [] for i in ids}
    if ids:
        for r in await conn.fetch(_SQL_CONTRADICTIONS_OF, collection, ids):
            contradictions[r["claim_id"]].append(r["contradiction_id"])
    signers = [r["pubkey"] for r in rows]
    signers += [found["pubkey"] for linked in links.values() for found in linked]
    names = await authors(conn, signers)
    hits: list[ClaimHit] = []
    for r in rows:
        hit: ClaimHit = {
            "id": r["id"],
            "pubkey": r["pubkey"],
            "author": names.get(r["pubkey"]),
            "text": r["text"],
            "received_at": r["received_at"].isoformat(),
            "links": [link(found, names) for found in links[r["id"]]],
            "contradiction_ids": contradictions[r["id"]],
        }
        hit[score] = float(r[score])
        hits.append(hit)
    return hits


async def contradictions(
    conn: Connection,
    collection: Slug,
    rows: Sequence[asyncpg.Record],
    score: Score | None = None,
) -> list[ContradictionInfo]:
    """search_contradictions items: claims in the order the signer listed them, and the links
    pointing at the contradiction (whole quotes). Rows carry the signed `content`, whose
    `claims` list keeps that order."""
    claim_ids = {r["id"]: list(json.loads(r["content"])["claims"]) for r in rows}
    wanted = sorted({c for ids in claim_ids.values() for c in ids})
    claims: dict[EventId, asyncpg.Record] = {}
    if wanted:
        claims = {r["id"]: r for r in await conn.fetch(_SQL_CLAIMS_BY_ID, collection, wanted)}
    links = await links_to(conn, collection, [r["id"] for r in rows], None)
    signers = [r["pubkey"] for r in rows] + [c["pubkey"] for c in claims.values()]
    signers += [found["pubkey"] for linked in links.values() for found in linked]
    names = await authors(conn, signers)
    items: list[ContradictionInfo] = []
    for r in rows:
        item: ContradictionInfo = {
            "id": r["id"],
            "pubkey": r["pubkey"],
            "author": names.get(r["pubkey"]),
            "reason": r["reason"],
            "claim_ids": claim_ids[r["id"]],
            "received_at": r["received_at"].isoformat(),
            "claims": [
                _claim_brief(c, names)
                for c in (claims.get(i) for i in claim_ids[r["id"]])
                if c is not None
            ],
            "links": [link(found, names) for found in links[r["id"]]],
        }
        if score is not None:
            item[score] = float(r[score])
        items.append(item)
    return items


def _claim_brief(row: asyncpg.Record, names: dict[PubKey, str]) -> ClaimBrief:
    return {
        "id": row["id"],
        "pubkey": row["pubkey"],
        "author": names.get(row["pubkey"]),
        "text": row["text"],
    }


def page_size(limit: int) -> int:
    """A page size checked to be a plain integer, so it can be written into the SQL."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative integer, not {limit!r}")
    return limit


def limited(sql: str, limit: int) -> str:
    """The page size written into the statement, not bound. Under a generic plan (which
    PostgreSQL adopts after five runs of a prepared statement when its estimates favour it) a
    bound LIMIT is guessed at a tenth of the rows, and the joins that assemble the page turn
    into scans of the whole collection; with the number in the text every plan knows it. At
    most a few hundred distinct statements result, which the statement cache absorbs."""
    return sql.replace("LIMIT :limit", f"LIMIT {page_size(limit)}")
