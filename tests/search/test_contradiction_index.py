"""Contradiction keyword search reads an index (issue 26, item 10): each contradiction's
document (its reason, then its claims) is built once into `contradiction_search` (sql/016) and
the search reads its GIN index, where it used to fold every document of the collection at each
query (2 s a filter over a few thousand). Documents of contradictions stored later are built by
the next search, and the answers are those of the folded documents."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import cluster
import pytest
from publishing import readable

from tms.search.search import DOCUMENT_BATCH, Search, build_documents
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

SLUG = "lab"
CONTRADICTIONS = 1_200  # more than two batches of documents

# Rows straight into the tables (the search is what is measured, not the publish path):
# claims 2n and 2n+1 belong to contradiction n; contradiction 7's second claim says "zanzibar",
# contradiction 8's reason says "zanzibar" and its claim "quokka".
_SEED = f"""
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT encode(sha256(('event ' || g)::bytea), 'hex'), repeat('a', 64), 1700000000 + g,
           4704, '[]', '{{"claims": []}}', repeat('0', 128), '{SLUG}'
    FROM generate_series(1, {3 * CONTRADICTIONS}) AS g;
    INSERT INTO claims (id, seq, collection, pubkey, text)
    SELECT encode(sha256(('claim ' || g)::bytea), 'hex'), g, '{SLUG}', repeat('a', 64),
           CASE WHEN g = 15 THEN 'Histamine zanzibar intolerance'
                WHEN g = 17 THEN 'A quokka smiles' ELSE 'Claim number ' || g || ' on diets' END
    FROM generate_series(1, {2 * CONTRADICTIONS}) AS g;
    INSERT INTO contradictions (id, seq, collection, pubkey, reason)
    SELECT encode(sha256(('contradiction ' || n)::bytea), 'hex'), {2 * CONTRADICTIONS} + n,
           '{SLUG}', repeat('a', 64),
           CASE WHEN n = 8 THEN 'These disagree about zanzibar' ELSE 'They disagree' END
    FROM generate_series(1, {CONTRADICTIONS}) AS n;
    INSERT INTO contradiction_claims (contradiction_id, claim_id, collection)
    SELECT encode(sha256(('contradiction ' || n)::bytea), 'hex'),
           encode(sha256(('claim ' || (2 * n + k))::bytea), 'hex'), '{SLUG}'
    FROM generate_series(1, {CONTRADICTIONS}) AS n, generate_series(0, 1) AS k
    WHERE 2 * n + k <= {2 * CONTRADICTIONS};
    ANALYZE"""


def contradiction(n: int) -> str:
    import hashlib

    return hashlib.sha256(f"contradiction {n}".encode()).hexdigest()


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(nodes(child))
    return found


# A coordinator's plan is a distributed scan whose shard plans it does not show: the plan's
# shape is a single PostgreSQL's (the answers are checked on every backend by the next test).
@pytest.mark.skipif(bool(cluster.CITUS_URL), reason="a single PostgreSQL's plans")
async def test_contradiction_search_reads_its_index(db_url: str) -> None:
    pool = await open_pool(db_url, min_size=1, max_size=2)
    try:
        await pool.execute(_SEED)
        search = Search(pool, None)
        lab = await readable(search, SLUG)
        found = await search.contradictions_by_keyword(lab, "zanzibar", 10)
        assert {f["id"] for f in found} == {contradiction(7), contradiction(8)}
        # "a -b": a somewhere in the document, b nowhere in it (8's claim says quokka)
        found = await search.contradictions_by_keyword(lab, "zanzibar -quokka", 10)
        assert [f["id"] for f in found] == [contradiction(7)]
        async with pool.acquire() as conn:
            built = await conn.fetchval("SELECT count(*) FROM contradiction_search")
            assert built == CONTRADICTIONS
            assert await build_documents(conn, SLUG) == 0  # each built once
            await conn.execute("VACUUM (ANALYZE) contradiction_search")  # as autovacuum does
            plan = await explain(conn, "zanzibar")
            # The planner may read a table this small straight through; the index serves it
            # as soon as that would cost more.
            await conn.execute("SET enable_seqscan = off; SET enable_indexscan = off")
            indexed = await explain(conn, "zanzibar")
        # Nothing is folded at query time: neither claims nor contradiction_claims are read.
        read = {n.get("Relation Name") for n in nodes(plan)} - {None}
        assert read == {"contradiction_search", "contradictions", "events"}, read
        assert not [n for n in nodes(plan) if n["Node Type"] in ("Recursive Union", "CTE Scan")]
        used = {n.get("Index Name") for n in nodes(indexed)}
        assert "contradiction_search_search" in used, used
    finally:
        await pool.close()


async def explain(conn: asyncpg.Connection, text: str) -> dict[str, Any]:
    from tms.ledger.read.records import limited
    from tms.search.search import _SQL_CONTRADICTIONS_KEYWORD

    sql = limited(_SQL_CONTRADICTIONS_KEYWORD, 10)
    raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", SLUG, text)
    plan: dict[str, Any] = json.loads(raw)[0]["Plan"]
    return plan


async def test_a_contradiction_stored_after_a_search_is_found_by_the_next(db_url: str) -> None:
    pool = await open_pool(db_url, min_size=1, max_size=2)
    try:
        await pool.execute(_SEED)
        search = Search(pool, None)
        lab = await readable(search, SLUG)
        assert await search.contradictions_by_keyword(lab, "wombat", 10) == []
        later = contradiction(CONTRADICTIONS + 1)
        seq = await pool.fetchval(
            "INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection) "
            "VALUES ($1, $2, 1800000000, 4704, '[]', '{\"claims\": []}', $3, $4) RETURNING seq",
            later,
            "a" * 64,
            "0" * 128,
            SLUG,
        )
        await pool.execute(
            "INSERT INTO contradictions (id, seq, collection, pubkey, reason) "
            "VALUES ($1, $2, $3, $4, 'A wombat disagrees')",
            later,
            seq,
            SLUG,
            "a" * 64,
        )
        found = await search.contradictions_by_keyword(lab, "wombat", 10)
        assert [f["id"] for f in found] == [later]
        assert DOCUMENT_BATCH < CONTRADICTIONS
    finally:
        await pool.close()
