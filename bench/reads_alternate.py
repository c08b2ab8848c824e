"""The two reads of issue 36 item 3e, each statement before and after, alternated in process on
`bench/scale.py --keep`'s databases: `uv run python bench/reads_alternate.py --keep DIR`.

On a machine shared with other work a figure moves with the load more than with the code (the
same unchanged REQ on one collection took 13 ms in one run and 132 ms in the next), so this
times the old and the new statement one after the other, query by query, without a server:

- keyword search at 1,000,000 claims (`DIR/1000000`): `bench/search.py`'s 50 queries (those
  `bench/scale.py` sends), ranking every match (the statement before) against the newest
  1,000 (`tms.search.search.newest_matches`, then the ranking);
- a page of the newest 100 claims over 1,000 collections (`DIR/1000x1000`): one arm per
  collection (`page_sql`, the statement before) against the window of the newest entries of
  every collection (`walk_sql`, sql/024).

Targets (issue 36 item 3e, through the server): keyword p99 <= 100 ms, the root REQ p50 <= 50
ms. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import asyncpg
from search import keyword_queries

from tms.ledger.read.filters import page_sql, walk_sql
from tms.ledger.read.records import limited
from tms.nostr.filters import parse_filter
from tms.search.search import _SQL_CLAIMS_KEYWORD, newest_matches
from tms.store.database import embedded_url, start_embedded

# The statement before issue 36: every match ranked, then the best 20 kept.
EVERY_MATCH: Final = """
    WITH hits AS (
        SELECT c.id, c.seq, c.pubkey, c.text, ts_rank(c.search, q) AS rank
        FROM claims c, websearch_to_tsquery('english', $2) q
        WHERE c.collection = $1 AND c.search @@ q
        ORDER BY rank DESC, c.seq DESC, c.id LIMIT 20)
    SELECT h.*, e.received_at FROM hits h JOIN events e ON e.seq = h.seq AND e.collection = $1
    ORDER BY h.rank DESC, h.seq DESC, h.id"""


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def connect(data_dir: Path) -> asyncpg.Connection:
    return await asyncpg.connect(await embedded_url(await start_embedded(data_dir)))


async def keyword(conn: asyncpg.Connection) -> None:
    queries = keyword_queries(random.Random(31), 55)[5:]  # bench/scale.py's, less its warm-up
    before: list[float] = []
    after: list[float] = []
    for text in queries:
        started = time.perf_counter()
        await conn.fetch(EVERY_MATCH, "bench", text)
        before.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            seqs = await newest_matches(conn, "bench", text)
            await conn.fetch(limited(_SQL_CLAIMS_KEYWORD, 20), "bench", text, seqs)
        after.append((time.perf_counter() - started) * 1000)
    print(
        f"keyword, 1,000,000 claims, {len(queries)} queries alternated (load {load()}):\n"
        f"   every match ranked: p50 {pct(before, 0.5):7.2f} ms, p99 {pct(before, 0.99):7.2f} ms\n"
        f"   the newest 1,000:   p50 {pct(after, 0.5):7.2f} ms, p99 {pct(after, 0.99):7.2f} ms",
        flush=True,
    )


async def root_page(conn: asyncpg.Connection, rounds: int) -> None:
    slugs = [row["slug"] for row in await conn.fetch("SELECT slug FROM collections")]
    wanted = parse_filter({"kinds": [4702], "limit": 100}, max_limit=1000)
    before: list[float] = []
    after: list[float] = []
    for _ in range(rounds):
        arms = page_sql(slugs, wanted, before=None, size=100)
        window = walk_sql(slugs, wanted, before=None, size=100)
        assert arms is not None and window is not None
        started = time.perf_counter()
        expected = [row["seq"] for row in await conn.fetch(arms[0], *arms[1])]
        before.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        rows = await conn.fetch(window[0], *window[1])
        after.append((time.perf_counter() - started) * 1000)
        assert rows[0]["walked"] == 100 and [row["seq"] for row in rows] == expected
    print(
        f"newest 100 claims over {len(slugs):,} collections, {rounds} rounds alternated "
        f"(load {load()}):\n"
        f"   an arm per collection:  p50 {pct(before, 0.5):7.2f} ms\n"
        f"   the newest entries:     p50 {pct(after, 0.5):7.2f} ms",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="bench/scale.py --keep's DIR")
    parser.add_argument("--rounds", type=int, default=20, help="root pages timed (20)")
    ns = parser.parse_args()
    conn = await connect(ns.keep / "1000000" / "data")
    try:
        await keyword(conn)
    finally:
        await conn.close()
    conn = await connect(ns.keep / "1000x1000" / "data")
    try:
        await root_page(conn, ns.rounds)
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
