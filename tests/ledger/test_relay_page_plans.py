"""A relay page over a realistic ledger (60,000 events by 1,000 authors in one collection) is
answered from indexes, whatever its filter: the plan holds no sequential scan of `events`, and
each arm stops after a page. Before sql/016 and the per-value walks, every page of a filter of
1,000 authors scanned and sorted the collection (issue 26, item 5). The answers are checked
against the rows themselves, so the faster plan is also the right one."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import cluster
import pytest
from factories import fresh_database

from tms.ledger.read.filters import page_sql
from tms.nostr.filters import parse_filter

pytestmark = pytest.mark.anyio

EVENTS = 60_000
AUTHORS = 1_000
SLUG = "big"
KINDS = (4701, 4702, 4703, 4704)


def author(n: int) -> str:
    return hashlib.sha256(f"author {n}".encode()).hexdigest()


def event_id(n: int) -> str:
    return hashlib.sha256(f"event {n}".encode()).hexdigest()


# Rows straight into the table (the publish path is not what is measured): event g by author
# g % 1000, kind 4701 + g % 4, created_at growing with g.
_SEED = f"""
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT encode(sha256(('event ' || g)::bytea), 'hex'),
           encode(sha256(('author ' || (g % {AUTHORS}))::bytea), 'hex'),
           1700000000 + g, {KINDS[0]} + g % {len(KINDS)}, '[]', 'x', repeat('0', 128), '{SLUG}'
    FROM generate_series(1, {EVENTS}) AS g"""


async def _seed(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_SEED)
        await conn.execute("VACUUM (ANALYZE) events")  # as autovacuum does an append-only table
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def big_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    """One database of 60,000 events for the module (seeding takes a few seconds)."""
    with fresh_database(pg_server_url, template_url, "tms_pages") as url:
        asyncio.run(_seed(url))
        yield url


@pytest.fixture
async def big(big_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(big_url)
    try:
        yield conn
    finally:
        await conn.close()


async def plan(conn: asyncpg.Connection, raw: dict[str, Any], before: int | None) -> dict[str, Any]:
    found = page_sql([SLUG], parse_filter(raw, max_limit=1000), before=before, size=100)
    assert found is not None
    sql, args = found
    rows = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    return json.loads(rows)[0]


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(nodes(child))
    return found


def scans_of_events(node: dict[str, Any]) -> list[str]:
    return [n["Node Type"] for n in nodes(node) if n.get("Relation Name") == "events"]


FILTERS = {
    "1,000 authors": {"authors": [author(n) for n in range(AUTHORS)]},
    "1,000 absent authors": {"authors": [author(n) for n in range(AUTHORS, 2 * AUTHORS)]},
    "authors and kinds": {"authors": [author(n) for n in range(AUTHORS - 1)], "kinds": [4702]},
    "kinds": {"kinds": [4702, 4704]},
    "ids": {"ids": [event_id(n) for n in range(1, 1001)]},
    "everything": {},
    "until, old": {"until": 1700000000 + 500},
    "since and until": {"since": 1700000000 + 30000, "until": 1700000000 + 30100},
    "tag values": {"#p": [author(n) for n in range(AUTHORS)]},
}


# A cluster's coordinator plans a distributed scan and its shell table holds no pages: the
# shape of a shard's plan is a single PostgreSQL's, which this checks (the answers are checked
# on every backend below).
@pytest.mark.skipif(bool(cluster.CITUS_URL), reason="a single PostgreSQL's plans")
@pytest.mark.parametrize("name", list(FILTERS))
async def test_a_page_is_answered_from_indexes(big: asyncpg.Connection, name: str) -> None:
    """No sequential scan of `events`, and a page reads a bounded number of its blocks: at
    most a few thousand, where the collection holds many more."""
    for before in (None, 40_000):
        explained = await plan(big, FILTERS[name], before)
        scans = scans_of_events(explained["Plan"])
        assert "Seq Scan" not in scans, (name, scans)
        # Every buffer the page touched, well under a scan's (the table's pages, plus indexes).
        table_pages = await big.fetchval("SELECT relpages FROM pg_class WHERE relname = 'events'")
        touched = explained["Plan"]["Shared Hit Blocks"] + explained["Plan"]["Shared Read Blocks"]
        assert touched < max(table_pages, 1) * 8, (name, touched, table_pages)


async def test_pages_of_many_authors_match_the_rows(big: asyncpg.Connection) -> None:
    """The walks return exactly the newest matches, page after page."""
    wanted = [author(n) for n in range(0, AUTHORS, 7)]  # about 1 in 7 events
    raw = {"authors": wanted, "kinds": [4701, 4703]}
    expected = [
        row["seq"]
        for row in await big.fetch(
            "SELECT seq FROM events WHERE collection = $1 AND pubkey = ANY($2::text[]) "
            "AND kind = ANY($3::int[]) ORDER BY seq DESC LIMIT 300",
            SLUG,
            wanted,
            [4701, 4703],
        )
    ]
    got: list[int] = []
    before = None
    filt = parse_filter(raw, max_limit=1000)
    while len(got) < 300:
        found = page_sql([SLUG, "elsewhere"], filt, before=before, size=100)
        assert found is not None
        rows = await big.fetch(found[0], *found[1])
        got.extend(row["seq"] for row in rows)
        before = rows[-1]["seq"]
    assert got == expected
