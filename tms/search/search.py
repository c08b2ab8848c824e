"""Search by meaning or by keywords, for claims and for contradictions: the one place that
decides how a query is answered.

`method: "vector"` (the default) embeds the query with the claims' model and orders by cosine
distance through pgvector's HNSW index; `method: "keyword"` is PostgreSQL full text (English
stemming, web-search syntax), the newest `RANKED` matches ranked by `ts_rank`. When no query
vector can be had (vectors are off, or the model failed), keyword search answers and `note`
says why; when some claims of the collection still wait for their vectors, `note` says how many
are missing from the results.

Every search takes the `ReadableCollection` that `tms.ledger.access` made when it checked the
caller, and filters by the collection it holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Final, Literal

from tms.errors import one_line
from tms.ledger.access import ReadableCollection
from tms.ledger.read import records
from tms.ledger.read.records import CONTRADICTION_COLUMNS, limited, page_size
from tms.results import ClaimHit, ContradictionInfo, SearchClaimsResult
from tms.rules.kinds import KINDS
from tms.search.pgvector import HnswTuning, sql_literal, vector_literal
from tms.search.vectors import Vectors
from tms.store.database import Connection, Pool
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, EventId

log = logging.getLogger(__name__)

REASON_INDEXED_CHARS: Final = 100_000  # as for claims (sql/002): a tsvector holds at most 1 MB
TSVECTOR_BYTES: Final = 1_000_000  # PostgreSQL refuses a larger tsvector
VECTORS_OFF: Final = "vector search is off on this server (TMS_EMBED=off): keyword results"
VECTORS_STARTING: Final = (
    "vector search is starting (the model is loading, which takes a few seconds after the "
    "server starts): keyword results"
)

Method = Literal["vector", "keyword"]

# Keyword search ranks the newest RANKED matches of the collection, not every match: a common
# word matches tens of thousands of claims of a million, and ranking each read its row from a
# page of its own (a bitmap scan visits them in the table's order; 0.6 s for 32,000 matches at
# 1,000,000 claims). The newest matches are found without asking the planner to guess how many
# there are (its estimate of a phrase, or of a hyphenated word, which is one, can be 100 times
# too low): a first walk of the newest FIRST_WALK claims measures the query's share of them;
# a query that matches at least WALK_SHARE of them walks on, newest first, as far as that share
# says RANKED matches lie (a common word: a few tens of thousands of rows read in order), and
# a rarer one reads its matches through the GIN index (fewer matches than that walk's rows).
# Each step goes below the oldest match found so far, so together they are exactly the newest
# RANKED matches; they read one snapshot. Only then are those ranked, by `ts_rank`.
RANKED: Final = 1_000  # at least every search's largest limit (the pages' 1,000 best)
FIRST_WALK: Final = 5_000  # claims
WALK_SHARE: Final = 0.01  # of the claims walked first, from which walking on beats the index
MOST_WALKED: Final = 1 << 18  # claims one walk reads at most
_SQL_KEYWORD_WALK: Final = """
    SELECT w.seq FROM (
        SELECT c.seq, c.search FROM claims c WHERE c.collection = $1 AND c.seq < $3
        ORDER BY c.seq DESC LIMIT {walk}) AS w
    WHERE w.search @@ websearch_to_tsquery('english', $2)
    ORDER BY w.seq DESC LIMIT {need}"""
# Every match below $3 through the GIN index (no order for the planner to walk), then the newest.
_SQL_KEYWORD_INDEXED: Final = """
    WITH m AS MATERIALIZED (
        SELECT c.seq FROM claims c
        WHERE c.collection = $1 AND c.seq < $3 AND c.search @@ websearch_to_tsquery('english', $2))
    SELECT seq FROM m ORDER BY seq DESC LIMIT {need}"""
_SQL_CLAIMS_KEYWORD: Final = """
    WITH hits AS (
        SELECT c.id, c.seq, c.pubkey, c.text, ts_rank(c.search, q) AS rank
        FROM claims c, websearch_to_tsquery('english', $2) q
        WHERE c.collection = $1 AND c.seq = ANY($3::bigint[])
        ORDER BY rank DESC, c.seq DESC, c.id LIMIT :limit)
    SELECT h.*, e.received_at FROM hits h JOIN events e ON e.seq = h.seq AND e.collection = $1
    ORDER BY h.rank DESC, h.seq DESC, h.id"""
NEWEST: Final = (1 << 63) - 1  # above every seq

# How many claims a keyword search matches (a page's count; only the newest RANKED of them are
# ranked), counted from the same GIN index.
_SQL_CLAIMS_KEYWORD_COUNT: Final = """
    SELECT count(*) FROM claims c, websearch_to_tsquery('english', $2) q
    WHERE c.collection = $1 AND c.search @@ q"""

# A contradiction searched as one document: its reason, then its claims' stored `search`
# vectors, folded on with `||` (which shifts positions, so a phrase never spans two parts;
# PostgreSQL has no tsvector aggregate). A part that would take the document past a tsvector's
# 1 MB is left out rather than failing the search. Built once per contradiction, in `seq` order
# and at most DOCUMENT_BATCH a statement, for those stored since the collection's last built
# one (within a collection `seq` grows in commit order: tms.ledger.read.filters), and kept in
# `contradiction_search` (sql/016), whose GIN index the search then reads, as claim search reads
# `claims.search`. $2: the reason's indexed prefix.
DOCUMENT_BATCH: Final = 500
_SQL_DOCUMENTS: Final = f"""
    WITH RECURSIVE todo AS MATERIALIZED (
        SELECT c.id, c.seq, c.reason FROM contradictions c
        WHERE c.collection = $1 AND c.seq > (
            SELECT coalesce(max(s.seq), 0) FROM contradiction_search s WHERE s.collection = $1)
        ORDER BY c.seq LIMIT {DOCUMENT_BATCH}),
    parts AS MATERIALIZED (
        SELECT cc.contradiction_id AS id, cl.search,
               row_number() OVER (PARTITION BY cc.contradiction_id ORDER BY cl.seq) AS n
        FROM todo t
        JOIN contradiction_claims cc ON cc.contradiction_id = t.id AND cc.collection = $1
        JOIN claims cl ON cl.id = cc.claim_id AND cl.collection = $1),
    fold (id, n, doc) AS (
        SELECT t.id, 0::bigint, to_tsvector('english', left(t.reason, $2::int)) FROM todo t
        UNION ALL
        SELECT f.id, p.n,
               CASE WHEN pg_column_size(f.doc) + pg_column_size(p.search) < {TSVECTOR_BYTES}
                    THEN f.doc || p.search ELSE f.doc END
        FROM fold f JOIN parts p ON p.id = f.id AND p.n = f.n + 1),
    docs AS (
        SELECT DISTINCT ON (id) id, doc FROM fold ORDER BY id, n DESC)
    SELECT d.id, t.seq, d.doc::text AS doc FROM docs d JOIN todo t ON t.id = d.id"""
# Stored by a statement of its own, from the documents' text (a tsvector's text form reads back
# as the same vector, positions and all): on Citus the fold above is a query of the
# collection's one shard, and this insert is routed there by its collection.
_SQL_STORE_DOCUMENTS: Final = """
    INSERT INTO contradiction_search (contradiction_id, collection, seq, search)
    SELECT d.id, $1::text, d.seq, d.doc::tsvector
    FROM unnest($2::text[], $3::bigint[], $4::text[]) AS d(id, seq, doc)
    ON CONFLICT DO NOTHING"""
_SQL_CONTRADICTIONS_KEYWORD: Final = f"""
    WITH page AS (
        SELECT s.contradiction_id AS id, s.seq, ts_rank(s.search, q) AS rank
        FROM contradiction_search s, websearch_to_tsquery('english', $2) q
        WHERE s.collection = $1 AND s.search @@ q
        ORDER BY rank DESC, s.seq DESC, s.contradiction_id LIMIT :limit)
    SELECT {CONTRADICTION_COLUMNS}, p.rank
    FROM page p JOIN contradictions c ON c.id = p.id AND c.collection = $1
    JOIN events e ON e.seq = c.seq AND e.collection = $1
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
            WHERE x.event_id = cc.claim_id AND x.collection = $1 AND x.model = $3 LIMIT 1) d
        WHERE cc.collection = $1),
    page AS (
        SELECT n.id, c.seq, min(n.distance) AS distance
        FROM near n JOIN contradictions c ON c.id = n.id AND c.collection = $1
        GROUP BY n.id, c.seq
        ORDER BY distance, c.seq DESC, n.id LIMIT :limit)
    SELECT {CONTRADICTION_COLUMNS}, p.distance
    FROM page p JOIN contradictions c ON c.id = p.id AND c.collection = $1
    JOIN events e ON e.seq = c.seq AND e.collection = $1
    ORDER BY p.distance, c.seq DESC, c.id"""


# Any other searchable kind: its vectors, or its entry's text ({table}, {text}: the registry's
# names, never a client's), exactly, within the collection.
_SQL_EVENTS_VECTOR: Final = """
    SELECT x.event_id AS id, x.embedding <=> (SELECT $2::text::vector) AS score FROM embeddings x
    WHERE x.collection = $1 AND x.kind = $3 AND x.model = $4
    ORDER BY score, x.event_id LIMIT :limit"""
_SQL_EVENTS_KEYWORD: Final = """
    SELECT t.id, -ts_rank(to_tsvector('english', left(t.{text}, {chars})), q) AS score
    FROM {table} t, websearch_to_tsquery('english', $2) q
    WHERE t.collection = $1 AND to_tsvector('english', left(t.{text}, {chars})) @@ q
    ORDER BY score, t.id LIMIT :limit"""


async def newest_matches(conn: Connection, slug: str, text: str) -> list[int]:
    """The `seq`s of the newest RANKED claims of the collection matching `text`, newest first
    (see RANKED)."""
    found: list[int] = []
    below = NEWEST

    async def walk(rows: int) -> None:
        nonlocal below
        need = RANKED - len(found)
        sql = _SQL_KEYWORD_WALK.format(walk=rows, need=need)
        found.extend(r["seq"] for r in await conn.fetch(sql, slug, text, below))
        below = found[-1] if found else below

    await walk(FIRST_WALK)
    share = len(found) / FIRST_WALK
    if len(found) < RANKED and share >= WALK_SHARE:
        rows = min(MOST_WALKED, 1 << math.ceil(math.log2(2 * (RANKED - len(found)) / share)))
        await walk(rows)
    if len(found) < RANKED:
        sql = _SQL_KEYWORD_INDEXED.format(need=RANKED - len(found))
        found.extend(r["seq"] for r in await conn.fetch(sql, slug, text, below))
    return found


class Search:
    def __init__(self, pool: Pool, vectors: Vectors | None, *, of: Search | None = None) -> None:
        """`of`: the search whose model this one uses, as it stands (`over`)."""
        self.pool = pool
        self._of = of
        self._vectors = vectors  # None: keyword search only, for the reason `unavailable` gives
        self._unavailable = VECTORS_OFF  # why there are no vectors, while there are none
        self._hnsw = HnswTuning()

    def over(self, pool: Pool) -> Search:
        """The same search on other connections (the relay's own pool), with this one's model
        whenever it loads."""
        return Search(pool, None, of=self)

    @property
    def vectors(self) -> Vectors | None:
        return self._of.vectors if self._of is not None else self._vectors

    @vectors.setter
    def vectors(self, vectors: Vectors | None) -> None:
        self._vectors = vectors

    @property
    def unavailable(self) -> str:
        return self._of.unavailable if self._of is not None else self._unavailable

    @unavailable.setter
    def unavailable(self, why: str) -> None:
        self._unavailable = why

    @property
    def status(self) -> str:
        """For /healthz: "ready", or why vector search answers by keyword."""
        return "ready" if self.vectors is not None else self.unavailable

    # --- what the doors call ---------------------------------------------------------------

    async def claims(
        self, readable: ReadableCollection, text: str, method: Method, limit: int
    ) -> SearchClaimsResult:
        note: str | None = None
        if method == "vector":
            query, note = await self._query_vector(text)
            if query is not None and self.vectors is not None:
                vectors = self.vectors
                items = await self.claims_near(readable, query, vectors.model, vectors.dims, limit)
                pending = await vectors.pending_claims(readable.slug)
                if pending:
                    note = (
                        f"{pending} claims of this collection are still waiting for vectors and "
                        "are missing from these results; they are being embedded now"
                    )
                return {"method": "vector", "note": note, "items": items}
        items = await self.claims_by_keyword(readable, text, limit)
        return {"method": "keyword", "note": note, "items": items}

    async def claims_total(
        self, readable: ReadableCollection, text: str, method: Method, claims: int
    ) -> int:
        """How many claims a search by `method` (as `claims` answered it) ranks in all, for a page
        that shows them a page at a time: by keyword, those matching; by meaning, every claim of
        the collection (`claims`, its kept count) but those still waiting for a vector."""
        vectors = self.vectors
        if method == "vector" and vectors is not None:
            return max(0, claims - await vectors.pending_claims(readable.slug))
        count = await self.pool.fetchval(_SQL_CLAIMS_KEYWORD_COUNT, readable.slug, text)
        return int(count or 0)

    async def contradictions(
        self, readable: ReadableCollection, text: str, limit: int
    ) -> list[ContradictionInfo]:
        """By vector when a query vector can be had, else by keyword."""
        query, _ = await self._query_vector(text)
        if query is not None and self.vectors is not None:
            vectors = self.vectors
            return await self.contradictions_near(
                readable, query, vectors.model, vectors.dims, limit
            )
        return await self.contradictions_by_keyword(readable, text, limit)

    async def events(
        self, readable: ReadableCollection, kind: int, text: str, limit: int
    ) -> list[tuple[float, EventId]]:
        """Any other searchable kind (`tms.rules.kinds.searchable_kinds`), its events ranked
        best first as (score, id), the smallest score best: by cosine distance among its
        vectors when a query vector can be had, else by keyword over the text its entry embeds
        (`Embedding.table`, `Embedding.text`), negated `ts_rank`. Exact and unindexed, as a
        collection's contradictions are searched: a kind of its own has no index of its own."""
        embedding = KINDS[kind].embedding
        if embedding is None:
            return []
        query, _ = await self._query_vector(text)
        async with self.pool.acquire() as conn:
            if query is not None and self.vectors is not None:
                vectors = self.vectors
                rows = await conn.fetch(
                    limited(_SQL_EVENTS_VECTOR, limit),
                    readable.slug,
                    vector_literal(query, vectors.dims),
                    kind,
                    vectors.model,
                )
            else:
                sql = _SQL_EVENTS_KEYWORD.format(
                    table=embedding.table, text=embedding.text, chars=REASON_INDEXED_CHARS
                )
                rows = await conn.fetch(limited(sql, limit), readable.slug, text)
        return [(float(row["score"]), row["id"]) for row in rows]

    # --- the two methods -------------------------------------------------------------------

    async def claims_by_keyword(
        self, readable: ReadableCollection, text: str, limit: int
    ) -> list[ClaimHit]:
        """PostgreSQL full text with web-search syntax (`"a phrase"`, `-word`, `or`), best
        `ts_rank` first, then newest, then id, among the newest RANKED matches. A query of stop
        words only matches nothing."""
        async with self.pool.acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                seqs = await newest_matches(conn, readable.slug, text)
                rows = await conn.fetch(
                    limited(_SQL_CLAIMS_KEYWORD, limit), readable.slug, text, seqs
                )
            return await records.claim_hits(conn, readable.slug, rows, "rank")

    async def claims_near(
        self,
        readable: ReadableCollection,
        vector: Sequence[float],
        model: str,
        dims: int,
        limit: int,
    ) -> list[ClaimHit]:
        """Nearest claims by cosine distance among `model`'s vectors, closest first (ties:
        newest, then id).

        The HNSW index is approximate; with a filter, pgvector ≥ 0.8 keeps scanning until
        `limit` rows pass it (iterative scan). When fewer than `limit` come back anyway (a
        collection smaller than `limit`, an older pgvector, or the scan's tuple budget spent on
        other collections' rows), the same query runs exactly, without the index, so a small
        collection in a big table still gets every claim it has."""
        query = vector_literal(vector, dims)
        literal = sql_literal(model)
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await self._hnsw.apply(conn, limit)
                rows = await conn.fetch(
                    _claims_vector_sql(literal, dims, limit, indexed=True), readable.slug, query
                )
            if len(rows) < limit:
                rows = await conn.fetch(
                    _claims_vector_sql(literal, dims, limit, indexed=False), readable.slug, query
                )
            return await records.claim_hits(conn, readable.slug, rows, "distance")

    async def contradictions_by_keyword(
        self, readable: ReadableCollection, text: str, limit: int
    ) -> list[ContradictionInfo]:
        """Full text over each contradiction as one document (its reason, then its claims'
        texts), so `a -b` means a somewhere in it and b nowhere in it. Best `ts_rank` first,
        then newest, then id. The documents of contradictions stored since the last search are
        built first (once each, a few ms per hundred); the search itself reads the GIN index,
        so it costs what it finds, not what the collection holds."""
        sql = limited(_SQL_CONTRADICTIONS_KEYWORD, limit)
        async with self.pool.acquire() as conn:
            await build_documents(conn, readable.slug)
            rows = await conn.fetch(sql, readable.slug, text)
            return await records.contradictions(conn, readable.slug, rows, "rank")

    async def contradictions_near(
        self,
        readable: ReadableCollection,
        vector: Sequence[float],
        model: str,
        dims: int,
        limit: int,
    ) -> list[ContradictionInfo]:
        """Contradictions by the smallest cosine distance among their reason's vector and their
        claims' vectors, closest first (ties: newest, then id). Exact, not indexed: a
        collection's contradictions and their claims are a small set. Ones with no vector yet
        are left out until the embedder catches up."""
        sql = limited(_SQL_CONTRADICTIONS_VECTOR, limit)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, readable.slug, vector_literal(vector, dims), model)
            return await records.contradictions(conn, readable.slug, rows, "distance")

    async def _query_vector(self, text: str) -> tuple[list[float] | None, str | None]:
        """The query's vector, or None and the note saying why keyword search answers instead."""
        if self.vectors is None:
            return None, self.unavailable
        try:
            return await self.vectors.query(text), None
        except Exception as exc:  # the model failed: keyword search still answers
            log.warning("query embedding failed: %s", exc)
            return None, f"no vector could be computed ({one_line(exc, 300)}): keyword results"


async def build_documents(conn: Connection, slug: str) -> int:
    """Build the keyword documents of the collection's contradictions that have none yet,
    `DOCUMENT_BATCH` a statement (each short, within any statement timeout); how many."""
    built = 0
    while True:
        rows = await conn.fetch(_SQL_DOCUMENTS, slug, REASON_INDEXED_CHARS)
        if rows:
            await conn.execute(
                _SQL_STORE_DOCUMENTS,
                slug,
                [row["id"] for row in rows],
                [row["seq"] for row in rows],
                [row["doc"] for row in rows],
            )
        built += len(rows)
        if len(rows) < DOCUMENT_BATCH:
            return built


def _claims_vector_sql(model_literal: str, dims: int, limit: int, *, indexed: bool) -> str:
    """`indexed`: the partial index's exact expression, so HNSW can serve the ORDER BY. Not
    indexed: a distance the index cannot serve, so the planner reads the collection's rows
    through the B-tree and sorts them exactly."""
    column = f"x.embedding::vector({dims})" if indexed else "x.embedding"
    distance = f"{column} <=> (SELECT $2::text::vector({dims}))"
    return f"""
        WITH hits AS MATERIALIZED (
            SELECT x.event_id, {distance} AS distance FROM embeddings x
            WHERE x.model = {model_literal} AND x.kind = {KIND_CLAIM} AND x.collection = $1
            ORDER BY {distance} LIMIT {page_size(limit)})
        SELECT c.id, c.seq, c.pubkey, c.text, e.received_at, h.distance
        FROM hits h JOIN claims c ON c.id = h.event_id AND c.collection = $1
        JOIN events e ON e.seq = c.seq AND e.collection = $1
        ORDER BY h.distance, c.seq DESC, c.id"""
