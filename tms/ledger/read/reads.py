"""The read side of the ledger: every listing and look-up behind the read tools.

Every read takes what `tms.ledger.access` made when it checked the caller: a `Reader` (the
collections a key may read) or a `ReadableCollection` (one of them); every statement filters on
what it holds, so no query can return another collection's rows whatever ids it is handed.
Searching by text is `tms.search`'s job.

Each method's SQL sits in the method, but for what a proof's tree prints of the events it cites
(`tms.ledger.read.cited`); results come out in SPEC's shapes through `tms.ledger.read.records`.
Every listing reads a page, never the whole collection: list_claims' count sorts read the top of an
index over counts kept as links are stored (sql/008). What the reading pages show (texts cut, quotes
in their stored context, never an evidence text read whole) is read by `tms.ledger.read.excerpts`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, Final

from tms.ledger.access import ReadableCollection, Reader
from tms.ledger.read import disputes, excerpts, records
from tms.ledger.read.cited import cited_events
from tms.ledger.read.disputes import Disputes
from tms.ledger.read.excerpts import (
    EvidenceWindow,
    NamedClaim,
    QuoteContext,
    ShownContradiction,
    ShownLink,
)
from tms.ledger.read.records import limited, page_size
from tms.results import (
    ClaimSummary,
    CollectionInfo,
    ContradictionInfo,
    EventInfo,
    EvidenceSummary,
    LinkInfo,
)
from tms.rules.cited import Cited
from tms.rules.kinds import kind_name
from tms.store.database import Pool
from tms.types import (
    KIND_EVIDENCE,
    KIND_JOIN,
    KIND_LEAVE,
    KIND_LINK,
    KIND_MEMBER_CHANGE,
    EventId,
)

DEFAULT_SORT: Final = "recent"
CLAIM_SORTS: Final = ("recent", "links", "unsupported", "unchallenged", "contested")
DEFAULT_WINDOW: Final = 20_000  # characters of evidence text `get_event` returns by default

# The count sorts, as ORDER BY keys over claim_counts (sql/008, one index in each order);
# ties: newest first, then id.
_SORT_KEYS: Final[dict[str, str]] = {
    "links": "(supports + qualifies + rebuts) DESC",
    "unsupported": "supports",
    "unchallenged": "(rebuts + findings), supports DESC",
    "contested": "(rebuts + findings) DESC",
}


class Reads:
    """Read queries over one pool; stateless."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    # --- collections -----------------------------------------------------------------------

    async def list_collections(self, reader: Reader) -> list[CollectionInfo]:
        """The reader's collections, oldest first, each with its current member list and
        counts. `members` is the signed list as it stands (the owner appears only if listed)."""
        rows = await self.pool.fetch(
            """SELECT c.slug, c.owner, c.created_at,
                      ARRAY(SELECT m.pubkey FROM memberships m WHERE m.collection = c.slug
                            ORDER BY m.pubkey) AS members,
                      n.evidence, n.claims, n.links, n.contradictions
               FROM collections c
               -- kept by every publish (sql/009); every collection has its row. The filter on
               -- the counts' own column lets Citus send this to the collections' shards only.
               JOIN collection_counts n ON n.collection = c.slug
               WHERE c.slug = ANY($1::text[]) AND n.collection = ANY($1::text[])
               ORDER BY c.created_at, c.slug""",
            list(reader.slugs),
        )
        return [
            {
                "slug": row["slug"],
                "owner": row["owner"],
                "created_at": row["created_at"].isoformat(),
                "members": list(row["members"]),
                "evidence": row["evidence"],
                "claims": row["claims"],
                "links": row["links"],
                "contradictions": row["contradictions"],
            }
            for row in rows
        ]

    # --- single events ---------------------------------------------------------------------

    async def get_event(
        self, reader: Reader, event_id: str, offset: int = 0, max_chars: int = DEFAULT_WINDOW
    ) -> EventInfo | None:
        """One event, or None when it is missing or outside the reader's collections: both
        look the same, so ids cannot be probed. Profiles and terms belong to no collection and are
        never returned here.

        Evidence text comes back as the window `[offset, offset + max_chars)` counted in
        Unicode code points, with `chars` (the full length) so a reader knows when to stop."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                """SELECT e.id, e.pubkey, e.created_at, e.kind, e.content, e.collection,
                          e.received_at
                   FROM events e WHERE e.id = $1 AND e.collection = ANY($2::text[])""",
                event_id,
                list(reader.slugs),
            )
            if row is None:
                return None
            body = None
            if row["kind"] in (KIND_MEMBER_CHANGE, KIND_JOIN, KIND_LEAVE):
                # a statement of its own, on the collection's shard (Citus): a subquery in the
                # one above would send it to every shard of the reader's collections
                body = await conn.fetchval(
                    "SELECT body FROM member_changes WHERE collection = $1 AND id = $2",
                    row["collection"],
                    event_id,
                )
            names = await records.authors(conn, [row["pubkey"]])
            anchored = None
            if row["kind"] == KIND_LINK:
                anchored = await conn.fetchrow(records.SQL_ANCHOR, event_id, row["collection"])
        if row["kind"] in (KIND_JOIN, KIND_LEAVE):
            # A NIP-43 join or leave (sql/026): its signer joins or leaves; its body is the AUTH
            # event that names the collection, its content empty.
            content = {
                "collection": row["collection"],
                "method": "join" if row["kind"] == KIND_JOIN else "leave",
            }
        elif body is not None:
            # A membership change (sql/025): what it changes is in the body its signed
            # `payload` tag hashes, not in its (empty) content.
            request = json.loads(body)
            content = {
                "collection": row["collection"],
                "method": request["method"],
                "params": request["params"],
            }
        else:
            content = json.loads(row["content"])
        result: EventInfo = {
            "id": row["id"],
            "pubkey": row["pubkey"],
            "author": names.get(row["pubkey"]),
            "kind": row["kind"],
            "kind_name": kind_name(row["kind"]),
            "collection": row["collection"],
            "created_at": row["created_at"],
            "received_at": row["received_at"].isoformat(),
            "content": content,
        }
        if row["kind"] == KIND_EVIDENCE:
            text: str = content["text"]
            content["text"] = text[offset : offset + max_chars]
            result["chars"] = len(text)
            result["offset"] = offset
        elif row["kind"] == KIND_LINK:
            result["anchor"] = records.anchor(anchored)
        return result

    async def cited(
        self, readable: ReadableCollection, ids: Collection[str]
    ) -> dict[EventId, Cited]:
        """What a proof's tree prints of the cited events in the readable collection: kinds
        and short fields from the typed tables, never a document's text; a link's anchor; and
        what disputes each claim in this collection (`tms.ledger.read.cited`). An id from elsewhere
        is simply absent, so a proof can never learn another collection's contents (or that
        the id exists)."""
        if not ids:
            return {}
        async with self.pool.acquire() as conn:
            return await cited_events(conn, readable.slug, ids)

    # --- claims ----------------------------------------------------------------------------

    async def list_claims(
        self, readable: ReadableCollection, sort: str | None, limit: int, offset: int = 0
    ) -> list[ClaimSummary]:
        """Claims with their SUPPORTS, QUALIFIES and REBUTS link counts and `findings` (the
        contradictions they belong to).

        Sorts: `recent` newest first; `links` most links pointing at the claim first;
        `unsupported` fewest SUPPORTS first; `unchallenged` fewest REBUTS plus contradictions
        first, then most SUPPORTS; `contested` most REBUTS plus contradictions first. Ties:
        newest first, then id. The count sorts read the top of their index over the counts
        kept as links and contradictions are stored (sql/008), never the collection's links.
        No sort is `recent`: someone asking for claims without saying how most likely wants
        what was just added. `offset` skips that many first (the collection page's later pages):
        the index is walked past them, a cost that grows with the offset, not the collection."""
        collection = readable.slug
        sort = DEFAULT_SORT if sort is None else sort
        if sort not in CLAIM_SORTS:
            raise ValueError(f"unknown sort {sort!r}")
        async with self.pool.acquire() as conn:
            if sort == "recent":
                rows = await conn.fetch(
                    limited(
                        f"""WITH page AS (
                               SELECT id, seq, pubkey, text FROM claims WHERE collection = $1
                               ORDER BY seq DESC LIMIT :limit OFFSET {page_size(offset)})
                           SELECT p.*, e.received_at FROM page p
                           JOIN events e ON e.seq = p.seq AND e.collection = $1
                           ORDER BY p.seq DESC""",
                        limit,
                    ),
                    collection,
                )
                counts = await records.claim_counts(conn, collection, [r["id"] for r in rows])
            else:
                rows = await conn.fetch(_claims_sorted_sql(sort, limit, offset), collection)
                counts = {r["id"]: {name: r[name] for name in records.COUNT_NAMES} for r in rows}
            names = await records.authors(conn, (r["pubkey"] for r in rows))
        return [
            {
                "id": r["id"],
                "pubkey": r["pubkey"],
                "author": names.get(r["pubkey"]),
                "text": r["text"],
                "received_at": r["received_at"].isoformat(),
                "supports": counts[r["id"]]["supports"],
                "qualifies": counts[r["id"]]["qualifies"],
                "rebuts": counts[r["id"]]["rebuts"],
                "findings": counts[r["id"]]["findings"],
            }
            for r in rows
        ]

    # --- links and evidence ----------------------------------------------------------------

    async def get_links(
        self,
        readable: ReadableCollection,
        to_id: str | None,
        from_id: str | None,
        relation: str | None,
        limit: int,
    ) -> list[LinkInfo]:
        """Links matching every filter given, oldest first. The SQL holds only the filters
        present, so each combination gets a plan that uses its own index."""
        where = ["l.collection = $1"]
        args: list[Any] = [readable.slug]
        for column, value in (("to_id", to_id), ("from_id", from_id), ("relation", relation)):
            if value is not None:
                args.append(value)
                where.append(f"l.{column} = ${len(args)}")
        sql = f"""
            WITH page AS (
                SELECT * FROM links l WHERE {" AND ".join(where)}
                ORDER BY l.seq LIMIT {page_size(limit)})
            SELECT l.id, l.pubkey, l.from_id, l.to_id, l.relation, l.quote, l.reason,
                   e.received_at, {records.ANCHOR_COLUMNS}
            FROM page l JOIN events e ON e.seq = l.seq AND e.collection = $1
            LEFT JOIN link_anchors a ON a.link_id = l.id AND a.collection = $1
            ORDER BY l.seq"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, *args)
            names = await records.authors(conn, (r["pubkey"] for r in rows))
            disputed = await disputes.link_disputes(conn, readable.slug, [r["id"] for r in rows])
        found = [records.anchored_link(r, names) for r in rows]
        for item in found:
            against = disputed.get(item["id"])
            item["disputed_by"] = [d.id for d in against.first] if against else []
        return found

    async def list_evidence(
        self, readable: ReadableCollection, ungrounded_only: bool, source: str | None, limit: int
    ) -> list[EvidenceSummary]:
        """Evidence without its text, oldest first. `link_count` counts the links that quote
        it (cite it as `from`), so `ungrounded_only` keeps exactly those with a count of 0:
        documents nobody has drawn a claim from yet. `source` matches exactly."""
        where = ["v.collection = $1"]
        args: list[Any] = [readable.slug]
        if source is not None:
            args.append(source)
            where.append(f"v.source = ${len(args)}")
        if ungrounded_only:
            where.append(
                "NOT EXISTS (SELECT 1 FROM links l WHERE l.collection = v.collection "
                "AND l.from_id = v.id)"
            )
        sql = f"""
            WITH page AS (
                SELECT v.id, v.seq, v.pubkey, v.title, v.url, v.source, v.chars  -- sql/010
                FROM evidence v
                WHERE {" AND ".join(where)} ORDER BY v.seq LIMIT {page_size(limit)})
            SELECT p.id, p.pubkey, p.title, p.url, p.source, e.received_at, p.chars,
                   (SELECT count(*) FROM links l
                    WHERE l.collection = $1 AND l.from_id = p.id) AS link_count
            FROM page p JOIN events e ON e.seq = p.seq AND e.collection = $1
            ORDER BY p.seq"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, *args)
            names = await records.authors(conn, (r["pubkey"] for r in rows))
        return [
            {
                "id": r["id"],
                "pubkey": r["pubkey"],
                "author": names.get(r["pubkey"]),
                "title": r["title"],
                "url": r["url"],
                "source": r["source"],
                "received_at": r["received_at"].isoformat(),
                "chars": r["chars"],
                "link_count": r["link_count"],
            }
            for r in rows
        ]

    # --- contradictions --------------------------------------------------------------------

    async def contradictions_with_claim(
        self, readable: ReadableCollection, claim_id: str, limit: int
    ) -> list[ContradictionInfo]:
        """The contradictions that include the claim, oldest first. The page is cut before it
        is joined to `events`: joined first, the planner may walk the events index from one
        end to find a few rows."""
        sql = f"""
            WITH page AS (
                SELECT c.* FROM contradiction_claims cc
                JOIN contradictions c ON c.id = cc.contradiction_id AND c.collection = $1
                WHERE cc.collection = $1 AND cc.claim_id = $2
                ORDER BY c.seq LIMIT {page_size(limit)})
            SELECT {records.CONTRADICTION_COLUMNS} FROM page c
            JOIN events e ON e.seq = c.seq AND e.collection = $1
            ORDER BY c.seq"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, readable.slug, claim_id)
            return await records.contradictions(conn, readable.slug, rows)

    async def list_contradictions(
        self, readable: ReadableCollection, limit: int
    ) -> list[ContradictionInfo]:
        """Newest first: with nothing to search for, the latest findings matter most."""
        sql = f"""
            WITH page AS (
                SELECT * FROM contradictions WHERE collection = $1
                ORDER BY seq DESC LIMIT {page_size(limit)})
            SELECT {records.CONTRADICTION_COLUMNS} FROM page c
            JOIN events e ON e.seq = c.seq AND e.collection = $1
            ORDER BY c.seq DESC"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, readable.slug)
            return await records.contradictions(conn, readable.slug, rows)

    # --- what the reading pages show: every text cut (tms.ledger.read.excerpts) -----------------

    async def shown_links(
        self,
        readable: ReadableCollection,
        *,
        to_id: EventId | None = None,
        from_id: EventId | None = None,
        limit: int,
    ) -> list[ShownLink]:
        """The links pointing at `to_id`, or quoting `from_id`, oldest first, texts cut."""
        async with self.pool.acquire() as conn:
            return await excerpts.links(
                conn, readable.slug, to_id=to_id, from_id=from_id, limit=limit
            )

    async def link_disputes(
        self, readable: ReadableCollection, link_ids: list[EventId]
    ) -> dict[EventId, Disputes]:
        """The REBUTS links aimed at each of the links a page shows (`tms.ledger.read.disputes`)."""
        async with self.pool.acquire() as conn:
            return await disputes.link_disputes(conn, readable.slug, link_ids)

    async def quote_contexts(
        self, readable: ReadableCollection, link_ids: list[EventId]
    ) -> dict[EventId, QuoteContext]:
        """Each link's quote in its evidence, from its stored anchor: bounded, whatever the
        length of the text."""
        async with self.pool.acquire() as conn:
            return await excerpts.quote_contexts(conn, readable.slug, link_ids)

    async def shown_contradictions(
        self, readable: ReadableCollection, claim_id: EventId, limit: int
    ) -> list[ShownContradiction]:
        """The contradictions naming the claim, oldest first, texts cut."""
        async with self.pool.acquire() as conn:
            return await excerpts.contradictions(conn, readable.slug, claim_id, limit)

    async def claim_choices(
        self, readable: ReadableCollection, words: str, besides: EventId, limit: int
    ) -> list[NamedClaim]:
        """The claims a picker offers: the newest, those an id names, or those words match."""
        async with self.pool.acquire() as conn:
            return await excerpts.claim_choices(conn, readable.slug, words, besides, limit)

    async def evidence_window(
        self, readable: ReadableCollection, event_id: EventId, offset: int, chars: int
    ) -> EvidenceWindow | None:
        """An evidence of the collection with one window of its text (None: missing or
        elsewhere, alike)."""
        async with self.pool.acquire() as conn:
            return await excerpts.evidence_window(conn, readable.slug, event_id, offset, chars)


def _claims_sorted_sql(sort: str, limit: int, offset: int = 0) -> str:
    """The top of the sort's own index over the counts kept as links are stored (sql/008):
    the cost of a page, not of the collection."""
    key = _SORT_KEYS[sort]
    return f"""
        WITH page AS (
            SELECT claim_id AS id, seq, supports, qualifies, rebuts, findings
            FROM claim_counts WHERE collection = $1
            ORDER BY {key}, seq DESC, claim_id LIMIT {page_size(limit)} OFFSET {page_size(offset)})
        SELECT p.*, c.pubkey, c.text, e.received_at
        FROM page p JOIN claims c ON c.id = p.id AND c.collection = $1
        JOIN events e ON e.seq = p.seq AND e.collection = $1
        ORDER BY {key}, p.seq DESC, p.id"""
