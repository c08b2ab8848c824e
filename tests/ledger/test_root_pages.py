"""A page over many collections (a key's REQ on the root relay) is looked for among the newest
entries of every collection first (sql/024), not asked of each collection: over 1,000
collections the per-collection statement had 1,000 arms, each planned and each reading its
own newest page, 0.8 s for a page of 100 (issue 36 item 3e). The pages are checked against the
rows themselves, page after page: when the window does not hold a whole page (rare kinds, a
narrow range, a few collections among many) the per-collection arms answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import cluster
import pytest
from factories import fresh_database

from tms.ledger.read.filters import WALK_FROM, StoredEvents, page_sql, walk_sql
from tms.nostr.filters import parse_filter
from tms.store.database import Pool, open_pool

pytestmark = pytest.mark.anyio

COLLECTIONS = 1_000
PER = 40
T0 = 1_700_000_000

# Rows straight into the table: event g in collection c<g % 1000>, kind 4702 but for every
# 97th (4704) and every 1,009th (4703), created_at growing with g.
_SEED = f"""
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT encode(sha256(('event ' || g)::bytea), 'hex'), repeat('a', 64), {T0} + g,
           CASE WHEN g % 1009 = 0 THEN 4703 WHEN g % 97 = 0 THEN 4704 ELSE 4702 END,
           '[]', 'x', repeat('0', 128), 'c' || (g % {COLLECTIONS})
    FROM generate_series(1, {COLLECTIONS * PER}) AS g"""


async def _seed(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_SEED)
        await conn.execute("VACUUM (ANALYZE) events")  # as autovacuum does an append-only table
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def many_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    with fresh_database(pg_server_url, template_url, "tms_root") as url:
        asyncio.run(_seed(url))
        yield url


@pytest.fixture
async def many(many_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(many_url, min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


ALL = [f"c{n}" for n in range(COLLECTIONS)]
FILTERS: dict[str, dict[str, Any]] = {
    "claims": {"kinds": [4702]},
    "everything": {},
    "two kinds": {"kinds": [4702, 4704]},
    "a rare kind": {"kinds": [4703]},
    "since": {"kinds": [4702], "since": T0 + 20_000},
    "until, old": {"until": T0 + 3_000},
    "nothing of theirs": {"kinds": [4701]},
}


async def pages(pool: Pool, slugs: list[str], raw: dict[str, Any], count: int) -> list[int]:
    """`count` pages of 100 through `StoredEvents.rows`, as the relay reads them."""
    stored = StoredEvents(pool)
    wanted = parse_filter(raw, max_limit=1000)
    reader = _Reader(slugs)
    got: list[int] = []
    before = None
    for _ in range(count):
        rows = await stored.rows(reader, wanted, before=before, size=100)  # type: ignore[arg-type]
        got.extend(row["seq"] for row in rows)
        if len(rows) < 100:
            break
        before = rows[-1]["seq"]
    return got


class _Reader:
    """A key's every collection, as `tms.ledger.access.Reader` holds them."""

    def __init__(self, slugs: list[str]) -> None:
        self.slugs = tuple(sorted(slugs))


async def the_rows(pool: Pool, slugs: list[str], raw: dict[str, Any], count: int) -> list[int]:
    """What `count` pages must hold: the newest matching rows, read from the table itself."""
    args: list[Any] = [slugs]
    where = ["collection = ANY($1::text[])"]
    for field, test in (
        ("kinds", "kind = ANY(${}::int[])"),
        ("since", "created_at >= ${}"),
        ("until", "created_at <= ${}"),
    ):
        if field in raw:
            args.append(raw[field])
            where.append(test.format(len(args)))
    sql = (
        f"SELECT seq FROM events WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT {count * 100}"
    )
    return [row["seq"] for row in await pool.fetch(sql, *args)]


# On Citus the window is never asked (each arm is one shard's query; the window would ask every
# shard): there the pages are the per-collection statement's, 84 pages here, 28 of them over
# 1,000 arms, several seconds each; `test_the_rows_themselves` reads them over fewer collections.
@pytest.mark.skipif(bool(cluster.CITUS_URL), reason="Citus reads a page by its arms alone")
@pytest.mark.parametrize("name", list(FILTERS))
async def test_pages_over_many_collections_are_the_newest_rows(many: Pool, name: str) -> None:
    for slugs in (ALL, ALL[::3], ALL[:WALK_FROM]):
        expected = await the_rows(many, slugs, FILTERS[name], 4)
        assert await pages(many, slugs, FILTERS[name], 4) == expected, (name, len(slugs))


async def test_the_rows_themselves(many: Pool) -> None:
    slugs = ALL[::7]
    expected = [
        row["seq"]
        for row in await many.fetch(
            "SELECT seq FROM events WHERE collection = ANY($1::text[]) AND kind = 4702 "
            "ORDER BY seq DESC LIMIT 300",
            slugs,
        )
    ]
    assert await pages(many, slugs, {"kinds": [4702]}, 3) == expected


@pytest.mark.skipif(bool(cluster.CITUS_URL), reason="a single PostgreSQL's plans")
async def test_a_page_over_1000_collections_reads_one_window(many: Pool) -> None:
    """One statement of a few hundred buffers, where the per-collection statement touches
    each of the 1,000 collections' indexes and rows."""
    wanted = parse_filter({"kinds": [4702]}, max_limit=1000)
    found = walk_sql(ALL, wanted, before=None, size=100)
    assert found is not None
    sql, args = found
    assert await many.fetchval(f"SELECT max(walked) FROM ({sql}) AS page", *args) == 100
    raw = await many.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    plan: dict[str, Any] = json.loads(raw)[0]["Plan"]
    touched = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    per = page_sql(ALL, wanted, before=None, size=100)
    assert per is not None
    raw = await many.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {per[0]}", *per[1])
    arms = json.loads(raw)[0]["Plan"]
    assert touched * 10 < arms["Shared Hit Blocks"] + arms["Shared Read Blocks"]
    assert touched < 1_000, touched
