"""Keyword search ranks the newest matches, not every match (issue 36 item 3e): ranking every
claim a common word matched read each one's row, 0.4 to 0.8 s a search at 1,000,000 claims.
What is ranked is exactly the newest `RANKED` matches of the collection, whichever way they are
found (a first walk of the newest claims, a longer walk for a common word, the GIN index for a
rare one); the answers are checked against the rows themselves."""

from __future__ import annotations

import pytest
from publishing import readable

from tms.search import search as search_module
from tms.search.search import Search, newest_matches
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

SLUG = "lab"
OTHER = "elsewhere"
CLAIMS = 4_000

# Claim g says "common" when g is even (1 in 2), "middling" when g % 40 == 0 (1 in 40), "rare"
# when g % 500 == 0 (1 in 500), and the phrase "oat bran" when g % 7 == 0; claim 1, the oldest,
# says "zebra" five times (the best rank of any), the others "zebra" once when g % 3 == 0.
# Another collection's claims say every word, newer than all of these.
_SEED = f"""
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT encode(sha256(('event ' || g)::bytea), 'hex'), repeat('a', 64), 1700000000 + g,
           4702, '[]', '{{}}', repeat('0', 128),
           CASE WHEN g > {CLAIMS} THEN '{OTHER}' ELSE '{SLUG}' END
    FROM generate_series(1, {CLAIMS + 500}) AS g;
    INSERT INTO claims (id, seq, collection, pubkey, text)
    SELECT encode(sha256(('claim ' || g)::bytea), 'hex'), g,
           CASE WHEN g > {CLAIMS} THEN '{OTHER}' ELSE '{SLUG}' END, repeat('a', 64),
           CASE WHEN g = 1 THEN 'zebra zebra zebra zebra zebra'
                WHEN g > {CLAIMS} THEN 'common middling rare oat bran zebra'
                ELSE concat_ws(' ', 'Claim', g,
                    CASE WHEN g % 2 = 0 THEN 'common' END,
                    CASE WHEN g % 40 = 0 THEN 'middling' END,
                    CASE WHEN g % 500 = 0 THEN 'rare' END,
                    CASE WHEN g % 7 = 0 THEN 'about oat bran' END,
                    CASE WHEN g % 3 = 0 THEN 'zebra' END) END
    FROM generate_series(1, {CLAIMS + 500}) AS g;
    ANALYZE"""

QUERIES = [
    "common",
    "middling",
    "rare",
    "common -middling",
    '"oat bran"',
    "middling or rare",
    "nothing",
    "zebra",
]


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds scaled to the seed, so that each way of finding matches is taken."""
    monkeypatch.setattr(search_module, "RANKED", 60)
    monkeypatch.setattr(search_module, "FIRST_WALK", 200)
    monkeypatch.setattr(search_module, "MOST_WALKED", 1_024)


@pytest.mark.usefixtures("small")
async def test_the_newest_matches_are_found_whichever_way(db_url: str) -> None:
    pool = await open_pool(db_url, min_size=1, max_size=2)
    try:
        await pool.execute(_SEED)
        async with pool.acquire() as conn:
            for text in QUERIES:
                expected = [
                    row["seq"]
                    for row in await conn.fetch(
                        "SELECT seq FROM claims WHERE collection = $1 "
                        "AND search @@ websearch_to_tsquery('english', $2) "
                        "ORDER BY seq DESC LIMIT 60",
                        SLUG,
                        text,
                    )
                ]
                assert await newest_matches(conn, SLUG, text) == expected, text
    finally:
        await pool.close()


@pytest.mark.usefixtures("small")
async def test_an_old_match_outside_the_newest_is_not_ranked(db_url: str) -> None:
    """The oldest claim says "zebra" five times: the best rank, but more than `RANKED` newer
    claims match, so it is not among the results; ranking every match put it first."""
    pool = await open_pool(db_url, min_size=1, max_size=2)
    try:
        await pool.execute(_SEED)
        search = Search(pool, None)
        lab = await readable(search, SLUG)
        found = await search.claims_by_keyword(lab, "zebra", 20)
        assert len(found) == 20
        oldest = [f for f in found if f["text"].startswith("zebra zebra")]
        assert oldest == []
        # All of them among the newest 60 that say it (claims 3 to 3999 say it once).
        assert all(int(f["text"].split()[1]) > 3999 - 3 * 60 for f in found), found
        # Without a newer match the oldest is found and ranked first.
        found = await search.claims_by_keyword(lab, "zebra -claim", 20)
        assert [f["text"] for f in found] == ["zebra zebra zebra zebra zebra"]
    finally:
        await pool.close()
