"""What the reading pages read: links, quotes in context, contradictions, a window of evidence
and the claims a picker offers, every text cut in SQL, so that a page costs bounded memory and
time whatever the collection holds (an evidence text of 2,000,000 characters, a quote as long,
200 of them on one claim).

A quote is shown in context from its stored anchor (sql/005) and the passage stored around it
(sql/012): one short row per link, never the evidence text. A link without an anchor yet (stored
before anchors existed, until the start-up back-fill reaches it) is shown without context, not
looked for in the text. A window of an evidence text is one `substr` of it: PostgreSQL reads the
text up to the window's end (decompressing it, or fetching its TOAST chunks), which costs a few
milliseconds for a deep page and is done once per evidence page, never once per link.

Texts are cut with `left`, which PostgreSQL reads as a prefix of a long value (never the whole,
unlike `char_length` or `right`), asking for one character more than is shown so the page knows
to say that a text goes on. Every statement filters on the page's collection, so ids handed in
from elsewhere can never pull in another collection's rows. The caller has already asked
`tms.ledger.access` whether the key may read that collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

from tms.ledger.read import records
from tms.ledger.read.records import page_size
from tms.store.database import Connection
from tms.types import EventId, PubKey, Slug

QUOTE_CHARS: Final = 1_000  # of a quote, on a page
REASON_CHARS: Final = 2_000  # of a reason
TITLE_CHARS: Final = 300  # of an evidence's title, where it names a link's source
CLAIM_CHARS: Final = 300  # of a claim named by a contradiction, or offered by the picker
CLAIMS_PER_CONTRADICTION: Final = 20  # claims listed under one contradiction
HEADING_CHARS: Final = 1_000  # of an evidence's title and source, on its own page
URL_CHARS: Final = 8_000  # of an evidence's URL (a longer one is shown cut, never linked)


@dataclass(frozen=True, slots=True)
class Cut:
    """A text as a page shows it: at most so many characters, and whether it goes on."""

    text: str
    more: bool

    @classmethod
    def of(cls, value: str | None, limit: int) -> Cut:
        """`value` read as `left(column, limit + 1)`: its first `limit` characters."""
        text = value or ""
        return cls(text[:limit], len(text) > limit)


@dataclass(frozen=True, slots=True)
class ShownLink:
    """A link as a page lists it, its texts cut. `start` and `end` are its anchor (None
    without one); `source_title` is the title of the evidence it quotes."""

    id: EventId
    pubkey: PubKey
    author: str | None
    from_id: EventId
    to_id: EventId
    relation: str
    quote: Cut
    reason: Cut
    received_at: str
    start: int | None
    end: int | None
    source_title: Cut


@dataclass(frozen=True, slots=True)
class QuoteContext:
    """A quote where its evidence has it: the passage before, the quoted characters (cut),
    the passage after, and whether the evidence goes on beyond each passage."""

    before: str
    quote: Cut
    after: str
    more_before: bool
    more_after: bool


@dataclass(frozen=True, slots=True)
class NamedClaim:
    id: EventId
    text: Cut


@dataclass(frozen=True, slots=True)
class ShownContradiction:
    """A contradiction as the claim page lists it: its reason (cut) and, of the claims it
    names, this page's claim first and then the oldest, up to `CLAIMS_PER_CONTRADICTION`
    (`claim_count` says how many it names in all)."""

    id: EventId
    pubkey: PubKey
    author: str | None
    reason: Cut
    received_at: str
    claims: list[NamedClaim]
    claim_count: int


@dataclass(frozen=True, slots=True)
class EvidenceWindow:
    """An evidence as its page shows it: headings cut, and `text` the window of its text
    from `offset` (in code points); `chars` the whole text's length."""

    id: EventId
    pubkey: PubKey
    author: str | None
    collection: Slug
    received_at: str
    title: Cut
    url: Cut
    source: Cut
    chars: int
    offset: int
    text: str


# Links matching the page's filter (`{where}`), oldest first, each with its anchor's offsets
# and the title of the evidence it quotes. $2, $3, $4: how much of the quote, the reason and
# the title. Anchor and title are looked up by key for each link of the page.
_SQL_LINKS: Final = """
    WITH page AS (
        SELECT l.id, l.seq, l.pubkey, l.from_id, l.to_id, l.relation,
               left(l.quote, $2) AS quote, left(l.reason, $3) AS reason
        FROM links l WHERE l.collection = $1 AND {where}
        ORDER BY l.seq LIMIT {limit})
    SELECT p.*, e.received_at, a.start_offset, a.end_offset,
           (SELECT left(v.title, $4) FROM evidence v
            WHERE v.id = p.from_id AND v.collection = $1) AS source_title
    FROM page p JOIN events e ON e.seq = p.seq AND e.collection = $1
    LEFT JOIN link_anchors a ON a.link_id = p.id AND a.collection = $1
    ORDER BY p.seq"""

# The stored context of links ($2) of one collection ($1) that have one, each looked up by its
# id; $3: how much of the quoted characters. `chars` (sql/010) says whether the text goes on
# after the passage.
_SQL_CONTEXTS: Final = """
    SELECT a.link_id, a.start_offset, a.end_offset, a.context_before, a.context_after,
           left(a.exact, $3) AS exact,
           (SELECT v.chars FROM evidence v
            WHERE v.id = (SELECT l.from_id FROM links l
                          WHERE l.id = a.link_id AND l.collection = $1)
              AND v.collection = $1) AS chars
    FROM unnest($2::text[]) AS wanted(id)
    JOIN link_anchors a ON a.link_id = wanted.id AND a.collection = $1
    WHERE a.collection = $1 AND a.context_before IS NOT NULL"""

# The contradictions naming a claim ($2), oldest first, the page cut before it is joined.
_SQL_CONTRADICTIONS: Final = """
    WITH page AS (
        SELECT c.id, c.seq, c.pubkey, left(c.reason, $3) AS reason
        FROM contradiction_claims cc
        JOIN contradictions c ON c.id = cc.contradiction_id AND c.collection = $1
        WHERE cc.collection = $1 AND cc.claim_id = $2
        ORDER BY c.seq LIMIT {limit})
    SELECT p.*, e.received_at,
           (SELECT count(*) FROM contradiction_claims x
            WHERE x.contradiction_id = p.id AND x.collection = $1) AS claim_count
    FROM page p JOIN events e ON e.seq = p.seq AND e.collection = $1
    ORDER BY p.seq"""

# Of each contradiction ($2), the claims it names: $3 first, then the oldest, $4 of them.
_SQL_NAMED_CLAIMS: Final = """
    SELECT p.id AS contradiction_id, k.id, left(k.text, $5) AS text
    FROM unnest($2::text[]) AS p(id)
    CROSS JOIN LATERAL (
        SELECT k.id, k.text, k.seq FROM contradiction_claims cc
        JOIN claims k ON k.id = cc.claim_id AND k.collection = $1
        WHERE cc.contradiction_id = p.id AND cc.collection = $1
        ORDER BY k.id = $3 DESC, k.seq LIMIT $4) AS k
    ORDER BY p.id, k.id = $3 DESC, k.seq"""

# The picker's claims: the newest, the one whose id (or id prefix) is given, or those whose
# words match ($2, web-search syntax) best, as the collection page's keyword search ranks them.
_SQL_CHOICES_RECENT: Final = """
    SELECT id, left(text, $3) AS text FROM claims
    WHERE collection = $1 AND id <> $2 ORDER BY seq DESC LIMIT {limit}"""
_SQL_CHOICES_BY_ID: Final = """
    SELECT id, left(text, $4) AS text FROM claims
    WHERE collection = $1 AND id <> $2 AND id >= $3 AND id < $3 || 'g'
    ORDER BY id LIMIT {limit}"""
_SQL_CHOICES_BY_WORDS: Final = """
    SELECT c.id, left(c.text, $4) AS text
    FROM claims c, websearch_to_tsquery('english', $3) q
    WHERE c.collection = $1 AND c.id <> $2 AND c.search @@ q
    ORDER BY ts_rank(c.search, q) DESC, c.seq DESC, c.id LIMIT {limit}"""

_SQL_EVIDENCE_WINDOW: Final = """
    SELECT v.id, v.pubkey, v.collection, v.chars, e.received_at,
           left(v.title, $5) AS title, left(v.url, $6) AS url, left(v.source, $5) AS source,
           substr(v.text, $3 + 1, $4) AS text
    FROM evidence v JOIN events e ON e.seq = v.seq AND e.collection = $2
    WHERE v.id = $1 AND v.collection = $2"""


def _longer(chars: int) -> int:
    return chars + 1  # read one character more than is shown: is there more?


async def links(
    conn: Connection,
    collection: Slug,
    *,
    to_id: EventId | None = None,
    from_id: EventId | None = None,
    limit: int,
) -> list[ShownLink]:
    """The links pointing at `to_id`, or quoting `from_id` (exactly one of the two), oldest
    first."""
    if (to_id is None) == (from_id is None):
        raise ValueError("links: give exactly one of to_id and from_id")
    where, target = ("l.to_id = $5", to_id) if to_id is not None else ("l.from_id = $5", from_id)
    sql = _SQL_LINKS.format(where=where, limit=page_size(limit))
    rows = await conn.fetch(
        sql,
        collection,
        _longer(QUOTE_CHARS),
        _longer(REASON_CHARS),
        _longer(TITLE_CHARS),
        target,
    )
    names = await records.authors(conn, (r["pubkey"] for r in rows))
    return [
        ShownLink(
            id=r["id"],
            pubkey=r["pubkey"],
            author=names.get(r["pubkey"]),
            from_id=r["from_id"],
            to_id=r["to_id"],
            relation=r["relation"],
            quote=Cut.of(r["quote"], QUOTE_CHARS),
            reason=Cut.of(r["reason"], REASON_CHARS),
            received_at=r["received_at"].isoformat(),
            start=r["start_offset"],
            end=r["end_offset"],
            source_title=Cut.of(r["source_title"], TITLE_CHARS),
        )
        for r in rows
    ]


async def quote_contexts(
    conn: Connection, collection: Slug, link_ids: list[EventId]
) -> dict[EventId, QuoteContext]:
    """Each link's quote in its evidence, from its stored anchor and context: a bounded row
    per link. Links without a stored context (or from another collection) are absent."""
    if not link_ids:
        return {}
    rows = await conn.fetch(_SQL_CONTEXTS, collection, link_ids, _longer(QUOTE_CHARS))
    return {r["link_id"]: _context(r) for r in rows}


def _context(row: asyncpg.Record) -> QuoteContext:
    before: str = row["context_before"]
    after: str = row["context_after"]
    return QuoteContext(
        before=before,
        quote=Cut.of(row["exact"], QUOTE_CHARS),
        after=after,
        more_before=row["start_offset"] > len(before),
        more_after=row["end_offset"] + len(after) < (row["chars"] or 0),
    )


async def contradictions(
    conn: Connection, collection: Slug, claim_id: EventId, limit: int
) -> list[ShownContradiction]:
    """The contradictions naming `claim_id`, oldest first."""
    rows = await conn.fetch(
        _SQL_CONTRADICTIONS.format(limit=page_size(limit)),
        collection,
        claim_id,
        _longer(REASON_CHARS),
    )
    named: dict[EventId, list[NamedClaim]] = {r["id"]: [] for r in rows}
    if rows:
        for r in await conn.fetch(
            _SQL_NAMED_CLAIMS,
            collection,
            list(named),
            claim_id,
            CLAIMS_PER_CONTRADICTION,
            _longer(CLAIM_CHARS),
        ):
            named[r["contradiction_id"]].append(NamedClaim(r["id"], Cut.of(r["text"], CLAIM_CHARS)))
    names = await records.authors(conn, (r["pubkey"] for r in rows))
    return [
        ShownContradiction(
            id=r["id"],
            pubkey=r["pubkey"],
            author=names.get(r["pubkey"]),
            reason=Cut.of(r["reason"], REASON_CHARS),
            received_at=r["received_at"].isoformat(),
            claims=named[r["id"]],
            claim_count=r["claim_count"],
        )
        for r in rows
    ]


async def claim_choices(
    conn: Connection, collection: Slug, words: str, besides: EventId, limit: int
) -> list[NamedClaim]:
    """Claims of the collection other than `besides`, for a picker: with no words the newest;
    with a claim id or the start of one (hex, four characters or more) the claims it names;
    else those matching the words best (PostgreSQL full text, as keyword search)."""
    words = words.strip()
    size = page_size(limit)
    text_chars = _longer(CLAIM_CHARS)
    if not words:
        rows = await conn.fetch(
            _SQL_CHOICES_RECENT.format(limit=size), collection, besides, text_chars
        )
    elif _is_id_prefix(words.rstrip("…").lower()):
        prefix = words.rstrip("…").lower()
        rows = await conn.fetch(
            _SQL_CHOICES_BY_ID.format(limit=size), collection, besides, prefix, text_chars
        )
    else:
        rows = await conn.fetch(
            _SQL_CHOICES_BY_WORDS.format(limit=size), collection, besides, words, text_chars
        )
    return [NamedClaim(r["id"], Cut.of(r["text"], CLAIM_CHARS)) for r in rows]


def _is_id_prefix(text: str) -> bool:
    return 4 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


async def evidence_window(
    conn: Connection, slug: Slug, event_id: EventId, offset: int, chars: int
) -> EvidenceWindow | None:
    """An evidence of the collection, with the window `[offset, offset + chars)` of its text;
    None when it is missing or in another collection (the same answer for both)."""
    row = await conn.fetchrow(
        _SQL_EVIDENCE_WINDOW,
        event_id,
        slug,
        offset,
        chars,
        _longer(HEADING_CHARS),
        _longer(URL_CHARS),
    )
    if row is None:
        return None
    names = await records.authors(conn, [row["pubkey"]])
    return EvidenceWindow(
        id=row["id"],
        pubkey=row["pubkey"],
        author=names.get(row["pubkey"]),
        collection=row["collection"],
        received_at=row["received_at"].isoformat(),
        title=Cut.of(row["title"], HEADING_CHARS),
        url=Cut.of(row["url"], URL_CHARS),
        source=Cut.of(row["source"], HEADING_CHARS),
        chars=row["chars"],
        offset=offset,
        text=row["text"],
    )
