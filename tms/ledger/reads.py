"""The read side of the ledger: every query behind the MCP read tools, in SPEC's result shapes.

The caller (the tool layer) has already checked the signed request, the arguments and that the
key may read the collection it names; every method here still filters on that one collection in
every statement, so no query can return another collection's rows whatever ids it is handed.

Results are plain JSON-ready values. Per-record extras (the signer's profile name, links,
contradiction ids, counts) are fetched for the page of results only, in batched `= ANY($n)`
statements, never per row of the collection. Only what cannot be ranked otherwise reads the
whole collection, once: list_claims' count sorts (one aggregate over its links) and
contradiction search (over its contradictions, which are few next to claims).

Vector search works on a dimensionless `embedding` column: the server creates one partial HNSW
index per model over `embedding::vector(<dims>)` (`ensure_vector_index`), and the search SQL
repeats that exact expression and names the model as a literal, because a partial index is only
usable when the planner can prove its predicate from constants in the query.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final

import asyncpg

from tms.nostr.events import Event
from tms.store.database import Connection, Pool
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_NAMES,
    EventId,
    PubKey,
    Slug,
)

SEARCH_QUOTE_CHARS: Final = 300  # quotes inside search_claims' links, ellipsis included
ELLIPSIS: Final = "…"
DEFAULT_SORT: Final = "recent"
CLAIM_SORTS: Final = ("recent", "links", "unsupported", "unchallenged", "contested")
HNSW_MAX_DIMS: Final = 2000  # pgvector's HNSW limit for the `vector` type
# Candidates an HNSW search keeps (pgvector defaults to 40): at 100,000 claims, recall@10 went
# from 0.92 at 40 to 0.97 at 200 for under a millisecond more.
HNSW_EF_SEARCH: Final = 200
REASON_INDEXED_CHARS: Final = 100_000  # as for claims (sql/002): a tsvector holds at most 1 MB
TSVECTOR_BYTES: Final = 1_000_000  # PostgreSQL refuses a larger tsvector
_INDEX_LOCK_SEED: Final = 8  # advisory-lock key space apart from the ledger's (seed 7)

Row = dict[str, Any]


class Reads:
    """Read queries over one pool. Holds no state but what it learns once about the server."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._iterative_scan: bool | None = None  # does this pgvector have iterative scans?

    # --- collections -----------------------------------------------------------------------

    async def readable_collections(self, pubkey: PubKey) -> list[Slug]:
        """Slugs the key owns or is a current member of, in slug order."""
        rows = await self.pool.fetch(_SQL_READABLE, pubkey)
        return [row["slug"] for row in rows]

    async def list_collections(self, pubkey: PubKey) -> list[Row]:
        """The key's collections, oldest first, each with its current member list and counts.
        `members` is the signed list as it stands (the owner appears only if listed)."""
        rows = await self.pool.fetch(_SQL_LIST_COLLECTIONS, pubkey)
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
        self, pubkey: PubKey, event_id: str, offset: int = 0, max_chars: int = 20_000
    ) -> Row | None:
        """One event, or None when it is missing or outside the key's collections: both look
        the same, so ids cannot be probed. Profiles and terms belong to no collection and are
        never returned here.

        Evidence text comes back as the window `[offset, offset + max_chars)` counted in
        Unicode code points, with `chars` (the full length) so a reader knows when to stop."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(_SQL_GET_EVENT, event_id, pubkey)
            if row is None:
                return None
            authors = await _authors(conn, [row["pubkey"]])
        content = json.loads(row["content"])
        result: Row = {
            "id": row["id"],
            "pubkey": row["pubkey"],
            "author": authors.get(row["pubkey"]),
            "kind": row["kind"],
            "kind_name": KIND_NAMES.get(row["kind"]),
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
        return result

    async def events_in_collection(
        self, collection: Slug, ids: Collection[str]
    ) -> dict[str, Event]:
        """The signed events among `ids` that belong to `collection`, for the proof checker. An
        id from elsewhere is simply absent, so a proof can never learn another collection's
        contents (or that the id exists)."""
        if not ids:
            return {}
        rows = await self.pool.fetch(_SQL_EVENTS_IN, collection, list(ids))
        return {
            row["id"]: Event(
                row["id"],
                row["pubkey"],
                row["created_at"],
                row["kind"],
                [] if row["tags"] == "[]" else json.loads(row["tags"]),
                row["content"],
                row["sig"],
            )
            for row in rows
        }

    # --- claims ----------------------------------------------------------------------------

    async def search_claims_keyword(self, collection: Slug, text: str, limit: int) -> list[Row]:
        """PostgreSQL full text with web-search syntax (`"a phrase"`, `-word`, `or`), best
        `ts_rank` first, then newest, then id. A query of stop words only matches nothing."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(_limited(_SQL_CLAIMS_KEYWORD, limit), collection, text)
            return await _claim_hits(conn, collection, rows, "rank")

    async def search_claims_vector(
        self, collection: Slug, vector: Sequence[float], model: str, dims: int, limit: int
    ) -> list[Row]:
        """Nearest claims by cosine distance, closest first (ties: newest, then id).

        The HNSW index is approximate; with a filter, pgvector ≥ 0.8 keeps scanning until
        `limit` rows pass it (iterative scan). When fewer than `limit` come back anyway (a
        collection smaller than `limit`, an older pgvector, or the scan's tuple budget spent on
        other collections' rows), the same query runs exactly, without the index, so a small
        collection in a big table still gets every claim it has."""
        query = vector_literal(vector, dims)
        literal = sql_literal(model)
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await self._tune_hnsw(conn, limit)
                rows = await conn.fetch(
                    _claims_vector_sql(literal, dims, limit, indexed=True), collection, query
                )
            if len(rows) < limit:
                rows = await conn.fetch(
                    _claims_vector_sql(literal, dims, limit, indexed=False), collection, query
                )
            return await _claim_hits(conn, collection, rows, "distance")

    async def list_claims(self, collection: Slug, sort: str | None, limit: int) -> list[Row]:
        """Claims with their SUPPORTS, QUALIFIES and REBUTS link counts and `findings` (the
        contradictions they belong to). With no sort, `recent` (newest first): someone asking
        for claims without saying how most likely wants what was just added.

        Sorts: `links` most links pointing at the claim first; `unsupported` fewest SUPPORTS
        first; `unchallenged` fewest REBUTS plus contradictions first, then most SUPPORTS;
        `contested` most REBUTS plus contradictions first. Ties: newest first, then id. The
        count sorts aggregate the collection's links once (one pass, not one query per claim).
        """
        sort = DEFAULT_SORT if sort is None else sort
        if sort not in CLAIM_SORTS:
            raise ValueError(f"unknown sort {sort!r}")
        async with self.pool.acquire() as conn:
            if sort == "recent":
                rows = await conn.fetch(_limited(_SQL_CLAIMS_RECENT, limit), collection)
                counts = await _claim_counts(conn, collection, [r["id"] for r in rows])
            else:
                async with conn.transaction():
                    await conn.execute(_SQL_AGGREGATE_SETTINGS)
                    rows = await conn.fetch(_claims_sorted_sql(sort, limit), collection)
                counts = {r["id"]: _counts_of(r) for r in rows}
            authors = await _authors(conn, (r["pubkey"] for r in rows))
        return [
            {
                "id": r["id"],
                "pubkey": r["pubkey"],
                "author": authors.get(r["pubkey"]),
                "text": r["text"],
                "received_at": r["received_at"].isoformat(),
                **counts.get(r["id"], _NO_COUNTS),
            }
            for r in rows
        ]

    # --- links and evidence ----------------------------------------------------------------

    async def get_links(
        self,
        collection: Slug,
        to_id: str | None,
        from_id: str | None,
        relation: str | None,
        limit: int,
    ) -> list[Row]:
        """Links matching every filter given, oldest first. The SQL holds only the filters
        present, so each combination gets a plan that uses its own index."""
        where = ["l.collection = $1"]
        args: list[Any] = [collection]
        for column, value in (("to_id", to_id), ("from_id", from_id), ("relation", relation)):
            if value is not None:
                args.append(value)
                where.append(f"l.{column} = ${len(args)}")
        sql = f"""
            WITH page AS (
                SELECT * FROM links l WHERE {" AND ".join(where)}
                ORDER BY l.seq LIMIT {_count(limit)})
            SELECT l.id, l.pubkey, l.from_id, l.to_id, l.relation, l.quote, l.reason,
                   e.received_at
            FROM page l JOIN events e ON e.seq = l.seq ORDER BY l.seq"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, *args)
            authors = await _authors(conn, (r["pubkey"] for r in rows))
        return [_link(r, authors) for r in rows]

    async def list_evidence(
        self, collection: Slug, ungrounded_only: bool, source: str | None, limit: int
    ) -> list[Row]:
        """Evidence without its text, oldest first. `link_count` counts the links that quote
        it (cite it as `from`), so `ungrounded_only` keeps exactly those with a count of 0:
        documents nobody has drawn a claim from yet. `source` matches exactly."""
        where = ["v.collection = $1"]
        args: list[Any] = [collection]
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
                SELECT v.id, v.seq, v.pubkey, v.title, v.url, v.source FROM evidence v
                WHERE {" AND ".join(where)} ORDER BY v.seq LIMIT {_count(limit)})
            SELECT p.id, p.pubkey, p.title, p.url, p.source, e.received_at,
                   (SELECT char_length(v.text) FROM evidence v WHERE v.id = p.id) AS chars,
                   (SELECT count(*) FROM links l
                    WHERE l.collection = $1 AND l.from_id = p.id) AS link_count
            FROM page p JOIN events e ON e.seq = p.seq
            ORDER BY p.seq"""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, *args)
            authors = await _authors(conn, (r["pubkey"] for r in rows))
        return [
            {
                "id": r["id"],
                "pubkey": r["pubkey"],
                "author": authors.get(r["pubkey"]),
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

    async def search_contradictions_by_claim(
        self, collection: Slug, claim_id: str, limit: int
    ) -> list[Row]:
        """The contradictions that include the claim, oldest first."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                _limited(_SQL_CONTRADICTIONS_BY_CLAIM, limit), collection, claim_id
            )
            return await _contradictions(conn, collection, rows)

    async def search_contradictions_keyword(
        self, collection: Slug, text: str, limit: int
    ) -> list[Row]:
        """Full text over each contradiction as one document (its reason, then its claims'
        texts), so `a -b` means a somewhere in it and b nowhere in it. Best `ts_rank` first,
        then newest, then id. Items carry `rank`.

        Documents are built at query time from the claims' stored vectors and the parsed
        reasons, so the cost grows with the collection's contradictions (a few ms per hundred),
        not with its claims."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                _limited(_SQL_CONTRADICTIONS_KEYWORD, limit), collection, text, REASON_INDEXED_CHARS
            )
            return await _contradictions(conn, collection, rows, "rank")

    async def search_contradictions_vector(
        self, collection: Slug, vector: Sequence[float], model: str, dims: int, limit: int
    ) -> list[Row]:
        """Contradictions by the smallest cosine distance among their reason's vector and their
        claims' vectors, closest first (ties: newest, then id); items carry `distance`. Exact,
        not indexed: a collection's contradictions and their claims are a small set. Ones with
        no vector yet are left out until the embedder catches up."""
        query = vector_literal(vector, dims)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                _limited(_SQL_CONTRADICTIONS_VECTOR, limit), collection, query, model
            )
            return await _contradictions(conn, collection, rows, "distance")

    async def list_contradictions(self, collection: Slug, limit: int) -> list[Row]:
        """Newest first: with nothing to search for, the latest findings matter most."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(_limited(_SQL_CONTRADICTIONS_RECENT, limit), collection)
            return await _contradictions(conn, collection, rows)

    # --- vector index ----------------------------------------------------------------------

    async def ensure_vector_index(self, model: str, dims: int) -> None:
        """Create the model's partial HNSW index unless it exists (run at start-up).

        Under an advisory lock, so two servers starting at once do not race on the name. The
        build holds a SHARE lock on `embeddings` (writes to it wait; the ledger does not)."""
        check_dims(dims)
        name = vector_index_name(model, dims)
        sql = (
            f"CREATE INDEX IF NOT EXISTS {name} ON embeddings "
            f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
            f"WHERE model = {sql_literal(model)}"
        )
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, $2))", name, _INDEX_LOCK_SEED
            )
            await conn.execute(sql)

    async def _tune_hnsw(self, conn: Connection, limit: int) -> None:
        """Inside the caller's transaction: enough candidates for `limit`, and (pgvector ≥ 0.8)
        an iterative scan, so a filter on one collection does not starve the result."""
        if self._iterative_scan is None:
            # Load the extension's library first: until then any `hnsw.*` name is accepted as a
            # placeholder, and the check would prove nothing.
            await conn.execute("SELECT '[1]'::vector")
            setting = await conn.fetchval("SELECT current_setting('hnsw.iterative_scan', true)")
            self._iterative_scan = setting is not None
        ef_search = str(max(limit, HNSW_EF_SEARCH))
        if self._iterative_scan:
            await conn.execute(
                "SELECT set_config('hnsw.ef_search', $1, true), "
                "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                ef_search,
            )
        else:
            await conn.execute("SELECT set_config('hnsw.ef_search', $1, true)", ef_search)


# --- SQL helpers -----------------------------------------------------------------------------


def sql_literal(value: str) -> str:
    """A string as an SQL literal, for the model name the partial index's predicate names.

    Quotes are doubled; control characters and backslashes are refused rather than escaped, so
    the literal means the same whatever `standard_conforming_strings` says."""
    if not value or any(ord(ch) < 0x20 or ch in "\\\x7f" for ch in value):
        raise ValueError(f"model name {value!r} is empty or holds control characters")
    return "'" + value.replace("'", "''") + "'"


def check_dims(dims: int) -> None:
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= HNSW_MAX_DIMS:
        raise ValueError(f"dims must be an integer from 1 to {HNSW_MAX_DIMS}, not {dims!r}")


def vector_index_name(model: str, dims: int) -> str:
    """A short, stable index name: model ids are long and hold characters names cannot."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
    return f"embeddings_hnsw_{digest}_{dims}"


def vector_literal(vector: Sequence[float], dims: int) -> str:
    """pgvector's text form, bound as a text parameter, so the pool needs no per-connection
    codec. The SQL casts it inside a scalar subquery, `(SELECT $2::text::vector)`: evaluated
    once per statement, where a bare cast in a generic plan would re-parse the text for every
    row compared (tens of microseconds each). `repr` keeps every float exactly."""
    check_dims(dims)
    if len(vector) != dims:
        raise ValueError(f"query vector has {len(vector)} dimensions, not {dims}")
    values = [float(x) for x in vector]
    if not all(math.isfinite(x) for x in values):
        raise ValueError("query vector holds NaN or infinity")
    return "[" + ",".join(repr(x) for x in values) + "]"


def _count(limit: int) -> int:
    """A page size checked to be a plain integer, so it can be written into the SQL."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative integer, not {limit!r}")
    return limit


def _limited(sql: str, limit: int) -> str:
    """The page size written into the statement, not bound. Under a generic plan (which
    PostgreSQL adopts after five runs of a prepared statement when its estimates favour it) a
    bound LIMIT is guessed at a tenth of the rows, and the joins that assemble the page turn
    into scans of the whole collection; with the number in the text every plan knows it. At
    most a few hundred distinct statements result, which the statement cache absorbs."""
    return sql.replace("LIMIT :limit", f"LIMIT {_count(limit)}")


def _claims_vector_sql(model_literal: str, dims: int, limit: int, *, indexed: bool) -> str:
    """`indexed`: the partial index's exact expression, so HNSW can serve the ORDER BY. Not
    indexed: a distance the index cannot serve, so the planner reads the collection's rows
    through the B-tree and sorts them exactly."""
    column = f"x.embedding::vector({dims})" if indexed else "x.embedding"
    distance = f"{column} <=> (SELECT $2::text::vector({dims}))"
    limit = _count(limit)
    return f"""
        WITH hits AS MATERIALIZED (
            SELECT x.event_id, {distance} AS distance FROM embeddings x
            WHERE x.model = {model_literal} AND x.kind = {KIND_CLAIM} AND x.collection = $1
            ORDER BY {distance} LIMIT {limit})
        SELECT c.id, c.seq, c.pubkey, c.text, e.received_at, h.distance
        FROM hits h JOIN claims c ON c.id = h.event_id JOIN events e ON e.seq = c.seq
        WHERE c.collection = $1
        ORDER BY h.distance, c.seq DESC, c.id"""


_SORT_KEYS: Final[dict[str, str]] = {
    "links": "total DESC",
    "unsupported": "supports",
    "unchallenged": "rebuts + findings, supports DESC",
    "contested": "rebuts + findings DESC",
}


def _claims_sorted_sql(sort: str, limit: int) -> str:
    """One pass: the collection's links and contradiction memberships counted per target in a
    single aggregate, joined once to the collection's claims, then a top-N sort."""
    key, limit = _SORT_KEYS[sort], _count(limit)
    return f"""
        WITH counts AS (
            SELECT id, sum(s) AS supports, sum(q) AS qualifies, sum(r) AS rebuts,
                   sum(f) AS findings, sum(s + q + r) AS total
            FROM (SELECT to_id AS id, (relation = 'SUPPORTS')::int AS s,
                         (relation = 'QUALIFIES')::int AS q, (relation = 'REBUTS')::int AS r,
                         0 AS f
                  FROM links WHERE collection = $1
                  UNION ALL
                  SELECT claim_id, 0, 0, 0, 1 FROM contradiction_claims
                  WHERE collection = $1) AS u
            GROUP BY id),
        scored AS (
            SELECT c.id, c.seq, coalesce(n.total, 0) AS total,
                   coalesce(n.supports, 0) AS supports, coalesce(n.qualifies, 0) AS qualifies,
                   coalesce(n.rebuts, 0) AS rebuts, coalesce(n.findings, 0) AS findings
            FROM claims c LEFT JOIN counts n ON n.id = c.id
            WHERE c.collection = $1),
        page AS (SELECT * FROM scored ORDER BY {key}, seq DESC, id LIMIT {limit})
        SELECT p.*, c.pubkey, c.text, e.received_at
        FROM page p JOIN claims c ON c.id = p.id JOIN events e ON e.seq = p.seq
        ORDER BY {key}, p.seq DESC, p.id"""


# A parallel plan would rebuild the whole aggregate in every worker (the hash join's inner
# side is not shared), tripling the work; and the aggregate of a big collection outgrows the
# default work_mem, spilling to disk.
_SQL_AGGREGATE_SETTINGS: Final = """
    SELECT set_config('max_parallel_workers_per_gather', '0', true),
           set_config('work_mem', '32MB', true)"""


_SQL_READABLE: Final = """
    SELECT slug FROM collections WHERE owner = $1
    UNION SELECT collection FROM memberships WHERE pubkey = $1
    ORDER BY 1"""

_SQL_LIST_COLLECTIONS: Final = """
    WITH mine AS (
        SELECT slug FROM collections WHERE owner = $1
        UNION SELECT collection FROM memberships WHERE pubkey = $1)
    SELECT c.slug, c.owner, c.created_at,
           ARRAY(SELECT m.pubkey FROM memberships m WHERE m.collection = c.slug
                 ORDER BY m.pubkey) AS members,
           (SELECT count(*) FROM evidence x WHERE x.collection = c.slug) AS evidence,
           (SELECT count(*) FROM claims x WHERE x.collection = c.slug) AS claims,
           (SELECT count(*) FROM links x WHERE x.collection = c.slug) AS links,
           (SELECT count(*) FROM contradictions x WHERE x.collection = c.slug) AS contradictions
    FROM collections c JOIN mine ON mine.slug = c.slug
    ORDER BY c.created_at, c.slug"""

_SQL_GET_EVENT: Final = """
    SELECT e.id, e.pubkey, e.created_at, e.kind, e.content, e.collection, e.received_at
    FROM events e
    WHERE e.id = $1 AND e.collection IS NOT NULL
      AND (EXISTS (SELECT 1 FROM collections c WHERE c.slug = e.collection AND c.owner = $2)
           OR EXISTS (SELECT 1 FROM memberships m
                      WHERE m.collection = e.collection AND m.pubkey = $2))"""

_SQL_EVENTS_IN: Final = """
    SELECT id, pubkey, created_at, kind, tags, content, sig FROM events
    WHERE collection = $1 AND id = ANY($2::text[])"""

# The replaceable rule: newest created_at, ties to the lowest id (profiles_current serves it).
_SQL_AUTHORS: Final = """
    SELECT DISTINCT ON (pubkey) pubkey, name FROM profiles
    WHERE pubkey = ANY($1::text[])
    ORDER BY pubkey, created_at DESC, id"""

_SQL_CLAIMS_KEYWORD: Final = """
    WITH hits AS (
        SELECT c.id, c.seq, c.pubkey, c.text, ts_rank(c.search, q) AS rank
        FROM claims c, websearch_to_tsquery('english', $2) q
        WHERE c.collection = $1 AND c.search @@ q
        ORDER BY rank DESC, c.seq DESC, c.id LIMIT :limit)
    SELECT h.*, e.received_at FROM hits h JOIN events e ON e.seq = h.seq
    ORDER BY h.rank DESC, h.seq DESC, h.id"""

_SQL_CLAIMS_RECENT: Final = """
    WITH page AS (
        SELECT id, seq, pubkey, text FROM claims WHERE collection = $1
        ORDER BY seq DESC LIMIT :limit)
    SELECT p.*, e.received_at FROM page p JOIN events e ON e.seq = p.seq
    ORDER BY p.seq DESC"""

_SQL_CLAIM_LINK_COUNTS: Final = """
    SELECT to_id AS id,
           count(*) FILTER (WHERE relation = 'SUPPORTS') AS supports,
           count(*) FILTER (WHERE relation = 'QUALIFIES') AS qualifies,
           count(*) FILTER (WHERE relation = 'REBUTS') AS rebuts
    FROM links WHERE collection = $1 AND to_id = ANY($2::text[]) GROUP BY to_id"""

_SQL_CLAIM_FINDINGS: Final = """
    SELECT claim_id AS id, count(*) AS findings FROM contradiction_claims
    WHERE collection = $1 AND claim_id = ANY($2::text[]) GROUP BY claim_id"""

# $3: cut quotes to this many characters, ellipsis included (null: whole quotes). Cut in SQL so
# a long quote never crosses the wire.
_SQL_LINKS_TO: Final = f"""
    SELECT l.id, l.pubkey, l.from_id, l.to_id, l.relation, l.reason, e.received_at,
           CASE WHEN $3::int IS NOT NULL AND char_length(l.quote) > $3::int
                THEN left(l.quote, $3::int - 1) || '{ELLIPSIS}' ELSE l.quote END AS quote
    FROM links l JOIN events e ON e.seq = l.seq
    WHERE l.collection = $1 AND l.to_id = ANY($2::text[])
    ORDER BY l.seq"""

_SQL_CONTRADICTIONS_OF: Final = """
    SELECT cc.claim_id, cc.contradiction_id FROM contradiction_claims cc
    JOIN contradictions c ON c.id = cc.contradiction_id
    WHERE cc.collection = $1 AND cc.claim_id = ANY($2::text[]) AND c.collection = $1
    ORDER BY c.seq"""

_SQL_CLAIMS_BY_ID: Final = """
    SELECT id, pubkey, text FROM claims WHERE collection = $1 AND id = ANY($2::text[])"""

_CONTRADICTION_COLUMNS: Final = "c.id, c.seq, c.pubkey, c.reason, e.content, e.received_at"

# Every page is cut before it is joined to `events` (for received_at and the signed content):
# joined first, the planner may walk the events index from one end to find a few rows.
_SQL_CONTRADICTIONS_BY_CLAIM: Final = f"""
    WITH page AS (
        SELECT c.* FROM contradiction_claims cc JOIN contradictions c ON c.id = cc.contradiction_id
        WHERE cc.collection = $1 AND cc.claim_id = $2 AND c.collection = $1
        ORDER BY c.seq LIMIT :limit)
    SELECT {_CONTRADICTION_COLUMNS} FROM page c JOIN events e ON e.seq = c.seq
    ORDER BY c.seq"""

_SQL_CONTRADICTIONS_RECENT: Final = f"""
    WITH page AS (
        SELECT * FROM contradictions WHERE collection = $1 ORDER BY seq DESC LIMIT :limit)
    SELECT {_CONTRADICTION_COLUMNS} FROM page c JOIN events e ON e.seq = c.seq
    ORDER BY c.seq DESC"""

# A contradiction searched as one document: its reason, then its claims' stored `search`
# vectors, folded on with `||` (which shifts positions, so a phrase never spans two parts;
# PostgreSQL has no tsvector aggregate). A part that would take the document past a tsvector's
# 1 MB is left out rather than failing the search. $4: the reason's indexed prefix.
_SQL_CONTRADICTIONS_KEYWORD: Final = f"""
    WITH RECURSIVE parts AS MATERIALIZED (
        SELECT cc.contradiction_id AS id, cl.search,
               row_number() OVER (PARTITION BY cc.contradiction_id ORDER BY cl.seq) AS n
        FROM contradiction_claims cc JOIN claims cl ON cl.id = cc.claim_id AND cl.collection = $1
        WHERE cc.collection = $1),
    fold (id, n, doc) AS (
        SELECT c.id, 0::bigint, to_tsvector('english', left(c.reason, $3::int))
        FROM contradictions c WHERE c.collection = $1
        UNION ALL
        SELECT f.id, p.n,
               CASE WHEN pg_column_size(f.doc) + pg_column_size(p.search) < {TSVECTOR_BYTES}
                    THEN f.doc || p.search ELSE f.doc END
        FROM fold f JOIN parts p ON p.id = f.id AND p.n = f.n + 1),
    docs AS (
        SELECT DISTINCT ON (id) id, doc FROM fold ORDER BY id, n DESC),
    page AS (
        SELECT d.id, c.seq, ts_rank(d.doc, q) AS rank
        FROM docs d JOIN contradictions c ON c.id = d.id AND c.collection = $1,
             websearch_to_tsquery('english', $2) q
        WHERE d.doc @@ q
        ORDER BY rank DESC, c.seq DESC, d.id LIMIT :limit)
    SELECT {_CONTRADICTION_COLUMNS}, p.rank
    FROM page p JOIN contradictions c ON c.id = p.id JOIN events e ON e.seq = c.seq
    ORDER BY p.rank DESC, c.seq DESC, c.id"""

# Reasons' vectors come straight from the collection's rows; claims' through their primary key,
# one look-up each (LIMIT 1 keeps the planner from scanning every vector of the collection).
_SQL_CONTRADICTIONS_VECTOR: Final = f"""
    WITH near AS (
        SELECT x.event_id AS id, x.embedding <=> (SELECT $2::text::vector) AS distance
        FROM embeddings x
        WHERE x.collection = $1 AND x.kind = {KIND_CONTRADICTION} AND x.model = $3
        UNION ALL
        SELECT cc.contradiction_id, d.distance
        FROM contradiction_claims cc
        CROSS JOIN LATERAL (
            SELECT x.embedding <=> (SELECT $2::text::vector) AS distance FROM embeddings x
            WHERE x.event_id = cc.claim_id AND x.model = $3 LIMIT 1) d
        WHERE cc.collection = $1),
    page AS (
        SELECT n.id, c.seq, min(n.distance) AS distance
        FROM near n JOIN contradictions c ON c.id = n.id AND c.collection = $1
        GROUP BY n.id, c.seq
        ORDER BY distance, c.seq DESC, n.id LIMIT :limit)
    SELECT {_CONTRADICTION_COLUMNS}, p.distance
    FROM page p JOIN contradictions c ON c.id = p.id JOIN events e ON e.seq = c.seq
    ORDER BY p.distance, c.seq DESC, c.id"""


# --- page assembly ---------------------------------------------------------------------------

_NO_COUNTS: Final[dict[str, int]] = {"supports": 0, "qualifies": 0, "rebuts": 0, "findings": 0}


def _counts_of(row: asyncpg.Record) -> dict[str, int]:
    return {name: row[name] for name in _NO_COUNTS}


async def _authors(conn: Connection, pubkeys: Iterable[PubKey]) -> dict[PubKey, str]:
    """Current profile names of the signers on one page (keys without a profile are absent)."""
    keys = sorted(set(pubkeys))
    if not keys:
        return {}
    return {r["pubkey"]: r["name"] for r in await conn.fetch(_SQL_AUTHORS, keys)}


async def _claim_counts(
    conn: Connection, collection: Slug, ids: list[EventId]
) -> dict[EventId, dict[str, int]]:
    counts = {i: dict(_NO_COUNTS) for i in ids}
    if not ids:
        return counts
    for r in await conn.fetch(_SQL_CLAIM_LINK_COUNTS, collection, ids):
        counts[r["id"]].update(supports=r["supports"], qualifies=r["qualifies"], rebuts=r["rebuts"])
    for r in await conn.fetch(_SQL_CLAIM_FINDINGS, collection, ids):
        counts[r["id"]]["findings"] = r["findings"]
    return counts


async def _links_to(
    conn: Connection, collection: Slug, targets: list[EventId], quote_chars: int | None
) -> dict[EventId, list[asyncpg.Record]]:
    """Links pointing at each target, oldest first."""
    by_target: dict[EventId, list[asyncpg.Record]] = {t: [] for t in targets}
    if targets:
        for r in await conn.fetch(_SQL_LINKS_TO, collection, targets, quote_chars):
            by_target[r["to_id"]].append(r)
    return by_target


def _link(row: asyncpg.Record, authors: dict[PubKey, str]) -> Row:
    return {
        "id": row["id"],
        "pubkey": row["pubkey"],
        "author": authors.get(row["pubkey"]),
        "from": row["from_id"],
        "to": row["to_id"],
        "relation": row["relation"],
        "quote": row["quote"],
        "reason": row["reason"],
        "received_at": row["received_at"].isoformat(),
    }


async def _claim_hits(
    conn: Connection, collection: Slug, rows: list[asyncpg.Record], score: str
) -> list[Row]:
    """search_claims items: each claim with the links pointing at it (quotes cut) and the ids
    of the contradictions it belongs to, oldest first."""
    ids = [r["id"] for r in rows]
    links = await _links_to(conn, collection, ids, SEARCH_QUOTE_CHARS)
    contradictions: dict[EventId, list[EventId]] = {i: [] for i in ids}
    if ids:
        for r in await conn.fetch(_SQL_CONTRADICTIONS_OF, collection, ids):
            contradictions[r["claim_id"]].append(r["contradiction_id"])
    signers = [r["pubkey"] for r in rows]
    signers += [link["pubkey"] for found in links.values() for link in found]
    authors = await _authors(conn, signers)
    return [
        {
            "id": r["id"],
            "pubkey": r["pubkey"],
            "author": authors.get(r["pubkey"]),
            "text": r["text"],
            "received_at": r["received_at"].isoformat(),
            score: float(r[score]),
            "links": [_link(link, authors) for link in links[r["id"]]],
            "contradiction_ids": contradictions[r["id"]],
        }
        for r in rows
    ]


async def _contradictions(
    conn: Connection, collection: Slug, rows: list[asyncpg.Record], score: str | None = None
) -> list[Row]:
    """search_contradictions items: claims in the order the signer listed them, and the links
    pointing at the contradiction (whole quotes)."""
    claim_ids = {r["id"]: list(json.loads(r["content"])["claims"]) for r in rows}
    wanted = sorted({c for ids in claim_ids.values() for c in ids})
    claims: dict[EventId, asyncpg.Record] = {}
    if wanted:
        claims = {r["id"]: r for r in await conn.fetch(_SQL_CLAIMS_BY_ID, collection, wanted)}
    links = await _links_to(conn, collection, [r["id"] for r in rows], None)
    signers = [r["pubkey"] for r in rows] + [c["pubkey"] for c in claims.values()]
    signers += [link["pubkey"] for found in links.values() for link in found]
    authors = await _authors(conn, signers)
    items = []
    for r in rows:
        item: Row = {
            "id": r["id"],
            "pubkey": r["pubkey"],
            "author": authors.get(r["pubkey"]),
            "reason": r["reason"],
            "claim_ids": claim_ids[r["id"]],
            "received_at": r["received_at"].isoformat(),
            "claims": [
                {
                    "id": c["id"],
                    "pubkey": c["pubkey"],
                    "author": authors.get(c["pubkey"]),
                    "text": c["text"],
                }
                for c in (claims.get(i) for i in claim_ids[r["id"]])
                if c is not None
            ],
            "links": [_link(link, authors) for link in links[r["id"]]],
        }
        if score is not None:
            item[score] = float(r[score])
        items.append(item)
    return items
