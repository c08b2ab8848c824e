"""The read side: every result shape, sort, filter and search, on real signed events in real
PostgreSQL. Vectors are written straight into `embeddings` (not a ledger table) from hand-made
unit vectors, so the queries are tested apart from the model."""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import asyncpg
import cluster
import pytest
from factories import (
    MEMBER,
    MEMBER2,
    OWNER,
    OWNER2,
    STRANGER,
    T0,
    EventDict,
    claim,
    contradiction,
    evidence,
    ids,
    link,
    members,
    profile,
    signed,
    terms,
)
from publishing import join, open_collection, publish, readable, reader_of

from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.search.pgvector import (
    ensure_vector_index,
    sql_literal,
    vector_index_name,
    vector_literal,
)
from tms.search.search import Search, _claims_vector_sql
from tms.store import citus

pytestmark = pytest.mark.anyio

DIMS: Final = 384
MODEL: Final = "test/mini-lm'384"  # a quote in the name: the literal must be quoted safely
OTHER_MODEL: Final = "test/tiny-8"

LINK_KEYS: Final = {"id", "pubkey", "author", "from", "to", "relation", "quote", "reason"}
LINK_KEYS_ALL: Final = LINK_KEYS | {"received_at"}
CLAIM_HIT_KEYS: Final = {"id", "pubkey", "author", "text", "received_at", "links"}
CONTRADICTION_KEYS: Final = {
    "id",
    "pubkey",
    "author",
    "reason",
    "claim_ids",
    "received_at",
    "claims",
    "links",
}

LONG_QUOTE: Final = " ".join(f"word{i:03d}" for i in range(60))  # 479 characters
EXACT_QUOTE: Final = ("x" * 299) + "y"  # exactly 300 characters: not cut
DOC_TEXT: Final = (
    "Histamine intolerance is thought to result from reduced diamine oxidase activity. "
    "Wine holds histamine. Migraine patients often show low DAO. "
    f"{LONG_QUOTE} {EXACT_QUOTE} The end."
)


@pytest.fixture
async def reads(ledger: Ledger) -> Reads:
    return Reads(ledger.pool)


@pytest.fixture
async def search(ledger: Ledger) -> Search:
    return Search(ledger.pool, None)


def iso(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is not None, value
    return parsed


def unit(*coords: tuple[int, float], dims: int = DIMS) -> list[float]:
    """A unit vector from a few nonzero coordinates."""
    vector = [0.0] * dims
    for index, value in coords:
        vector[index] = value
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def cosine_distance(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def embed(
    reads: Reads,
    rows: Sequence[tuple[str, str, int, Sequence[float]]],
    model: str = MODEL,
) -> None:
    """(event id, collection, kind, vector) rows, as the embedder would store them."""
    await reads.pool.executemany(
        "INSERT INTO embeddings (event_id, model, collection, kind, embedding) "
        "VALUES ($1, $2, $3, $4, $5::text::vector)",
        [(i, model, slug, kind, vector_literal(v, len(v))) for i, slug, kind, v in rows],
    )


async def read_event(reads: Reads, reader: str, event_id: str, **window: int) -> dict[str, Any]:
    """`get_event` of an event `reader` may read: it must be found."""
    got = await reads.get_event(await reader_of(reads, reader), event_id, **window)
    assert got is not None, f"{event_id} is not readable by {reader}"
    return got


def fake_id(n: int) -> str:
    return f"{n:064x}"


# --- a small world: "lab" (OWNER, with MEMBER writing) and "other" (OWNER2) -------------------


@dataclass(frozen=True)
class World:
    doc: EventDict
    doc2: EventDict
    claims: list[EventDict]  # c1..c5, in publish order
    links: dict[str, EventDict]
    contra: EventDict
    other_claim: EventDict
    other_doc: EventDict
    other_link: EventDict
    other_contra: EventDict


def cid(world: World, n: int) -> str:
    return str(world.claims[n - 1]["id"])


async def build_world(ledger: Ledger) -> World:
    """c1: 2 SUPPORTS. c2: 1 SUPPORTS, 1 REBUTS, in a contradiction. c3: no links, in the
    contradiction. c4: 1 QUALIFIES. c5: 1 SUPPORTS. A REBUTS link aimed at c1's first link
    and a SUPPORTS link aimed at the contradiction count for no claim.

    "other" holds look-alikes of everything (same texts, same kinds), which no query for
    "lab" may ever return."""
    await open_collection(ledger, OWNER, "lab", [MEMBER, MEMBER2])
    await open_collection(ledger, OWNER2, "other", [])
    await join(ledger, MEMBER)
    await publish(
        ledger,
        profile(OWNER, "owner"),
        profile(MEMBER, "bot"),
        profile(OWNER2, "owner two"),
    )
    doc = evidence(MEMBER, "lab", DOC_TEXT, title="HIT review", url="https://x.org", source="J1")
    doc2 = evidence(OWNER, "lab", "An unread document.", source="J2")
    texts = [
        "Histamine intolerance results from reduced DAO activity.",
        "DAO activity is reduced in migraine patients.",
        "Histamine in wine triggers headaches.",
        "Mast cells release histamine.",
        "Histamine, histamine everywhere: histamine.",
    ]
    claims = [
        claim(MEMBER if i % 2 else OWNER, "lab", text, created_at=T0 + i)
        for i, text in enumerate(texts)
    ]
    c = [e["id"] for e in claims]
    d = doc["id"]
    links = {
        "s1a": link(MEMBER, "lab", d, c[0], LONG_QUOTE, reason="long quote"),
        "s1b": link(OWNER, "lab", d, c[0], EXACT_QUOTE, reason="exact quote"),
        "s2": link(MEMBER, "lab", d, c[1], "Migraine patients often show low DAO"),
        "r2": link(MEMBER, "lab", d, c[1], "Wine holds histamine", relation="REBUTS"),
        "q4": link(MEMBER, "lab", d, c[3], "The end", relation="QUALIFIES"),
        "s5": link(OWNER, "lab", d, c[4], "Wine holds histamine."),
    }
    contra = contradiction(MEMBER, "lab", [c[2], c[1]], reason="Wine and migraine disagree")
    links["r_link"] = link(
        OWNER, "lab", d, links["s1a"]["id"], "reduced diamine oxidase", relation="REBUTS"
    )
    links["s_contra"] = link(OWNER, "lab", d, contra["id"], "thought to result")
    await publish(ledger, doc, doc2, *claims, contra, *links.values())

    other_doc = evidence(OWNER2, "other", DOC_TEXT, title="HIT review", source="J1")
    other_claim = claim(OWNER2, "other", texts[0])
    other_claim2 = claim(OWNER2, "other", texts[2])
    other_link = link(OWNER2, "other", other_doc["id"], other_claim["id"], LONG_QUOTE)
    other_contra = contradiction(
        OWNER2, "other", [other_claim["id"], other_claim2["id"]], reason="Wine and migraine"
    )
    await publish(ledger, other_doc, other_claim, other_claim2, other_link, other_contra)
    return World(doc, doc2, claims, links, contra, other_claim, other_doc, other_link, other_contra)


# --- collections ------------------------------------------------------------------------------


async def test_collections_of_each_key(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)

    async def slugs(pubkey: str) -> list[str]:
        return [c["slug"] for c in await reads.list_collections(await reader_of(reads, pubkey))]

    assert await slugs(OWNER.pubkey) == ["lab"]
    assert await slugs(MEMBER2.pubkey) == ["lab"]
    assert await reads.list_collections(await reader_of(reads, STRANGER.pubkey)) == []

    # MEMBER joins "other" too, then "alpha", made last: oldest first, whatever the slugs.
    await publish(ledger, members(OWNER2, "other", [MEMBER.pubkey], created_at=T0 + 5))
    await publish(ledger, members(OWNER2, "alpha", [MEMBER.pubkey]))
    listed = await reads.list_collections(await reader_of(reads, MEMBER.pubkey))
    assert [c["slug"] for c in listed] == ["lab", "other", "alpha"]
    lab, other, _ = listed
    assert set(lab) == {
        "slug",
        "owner",
        "created_at",
        "members",
        "evidence",
        "claims",
        "links",
        "contradictions",
    }
    assert lab["owner"] == OWNER.pubkey
    assert lab["members"] == sorted([MEMBER.pubkey, MEMBER2.pubkey])
    assert (lab["evidence"], lab["claims"], lab["links"], lab["contradictions"]) == (
        2,
        len(world.claims),
        len(world.links),
        1,
    )
    assert (other["evidence"], other["claims"], other["links"], other["contradictions"]) == (
        1,
        2,
        1,
        1,
    )
    assert other["members"] == [MEMBER.pubkey]
    assert iso(lab["created_at"]) <= iso(other["created_at"])
    json.dumps(listed)  # JSON-ready

    # Removed from lab: gone at once, while the owner keeps it.
    await publish(ledger, members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 9))
    assert await slugs(MEMBER.pubkey) == ["other", "alpha"]
    assert await slugs(OWNER.pubkey) == ["lab"]


# --- get_event --------------------------------------------------------------------------------


async def test_get_event_shape_and_access(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    c1 = world.claims[0]
    got = await read_event(reads, MEMBER2.pubkey, c1["id"])
    assert got == {
        "id": c1["id"],
        "pubkey": OWNER.pubkey,
        "author": "owner",
        "kind": 4702,
        "kind_name": "claim",
        "collection": "lab",
        "created_at": T0,
        "received_at": got["received_at"],
        "content": json.loads(c1["content"]),
    }
    iso(got["received_at"])
    json.dumps(got)
    contra = await read_event(reads, OWNER.pubkey, world.contra["id"])
    assert contra["kind_name"] == "contradiction"
    assert contra["author"] == "bot"

    # Missing, elsewhere, outside any collection, or a reader who isn't a member: all None.
    assert (
        await reads.get_event(await reader_of(reads, OWNER.pubkey), world.other_claim["id"]) is None
    )
    assert await reads.get_event(await reader_of(reads, OWNER2.pubkey), c1["id"]) is None
    assert await reads.get_event(await reader_of(reads, STRANGER.pubkey), c1["id"]) is None
    assert await reads.get_event(await reader_of(reads, OWNER.pubkey), fake_id(7)) is None
    own_profile = profile(OWNER, "owner")
    assert await reads.get_event(await reader_of(reads, OWNER.pubkey), own_profile["id"]) is None
    assert await reads.get_event(await reader_of(reads, OWNER.pubkey), terms(OWNER)["id"]) is None
    theirs = await read_event(reads, OWNER2.pubkey, world.other_claim["id"])
    assert (theirs["id"], theirs["collection"]) == (world.other_claim["id"], "other")


async def test_get_event_evidence_windows(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    doc_id = world.doc["id"]
    whole = await read_event(reads, MEMBER.pubkey, doc_id)
    assert whole["content"]["text"] == DOC_TEXT
    assert whole["chars"] == len(DOC_TEXT) and whole["offset"] == 0
    assert whole["content"]["title"] == "HIT review" and whole["content"]["source"] == "J1"
    assert set(whole) == {
        "id",
        "pubkey",
        "author",
        "kind",
        "kind_name",
        "collection",
        "created_at",
        "received_at",
        "content",
        "chars",
        "offset",
    }

    window = await read_event(reads, MEMBER.pubkey, doc_id, offset=10, max_chars=25)
    assert window["content"]["text"] == DOC_TEXT[10:35]
    assert (window["chars"], window["offset"]) == (len(DOC_TEXT), 10)

    tail = await read_event(reads, MEMBER.pubkey, doc_id, offset=len(DOC_TEXT) - 3)
    assert tail["content"]["text"] == DOC_TEXT[-3:]
    beyond = await read_event(reads, MEMBER.pubkey, doc_id, offset=len(DOC_TEXT) + 100)
    assert beyond["content"]["text"] == "" and beyond["chars"] == len(DOC_TEXT)

    # Non-evidence events carry no window fields.
    got = await read_event(reads, MEMBER.pubkey, world.claims[0]["id"], offset=5, max_chars=3)
    assert "chars" not in got and "offset" not in got
    assert got["content"]["text"] == json.loads(world.claims[0]["content"])["text"]


async def test_get_event_counts_characters_not_bytes(ledger: Ledger, reads: Reads) -> None:
    await open_collection(ledger, OWNER, "lab")
    text = "ünï 🧪🧬 中文 text"
    doc = evidence(OWNER, "lab", text)
    await publish(ledger, doc)
    got = await read_event(reads, OWNER.pubkey, doc["id"], offset=4, max_chars=2)
    assert got["content"]["text"] == "🧪🧬" and got["chars"] == len(text)
    # Listing evidence gives the same count, stored with the text (sql/010), never bytes.
    [listed] = await reads.list_evidence(await readable(reads, "lab"), False, None, 10)
    assert listed["chars"] == len(text)


# --- author -----------------------------------------------------------------------------------


async def test_author_is_the_current_profile_by_the_replaceable_rule(
    ledger: Ledger, reads: Reads, search: Search
) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    anonymous = claim(MEMBER, "lab", "Signed before any profile.")
    await publish(ledger, anonymous)
    got = await read_event(reads, OWNER.pubkey, anonymous["id"])
    assert got["author"] is None

    # The newer created_at wins even when it arrived first.
    await publish(ledger, profile(MEMBER, "newest", created_at=T0 + 20))
    await publish(ledger, profile(MEMBER, "older", created_at=T0 + 5))
    got = await read_event(reads, OWNER.pubkey, anonymous["id"])
    assert got["author"] == "newest"

    # A tie on created_at goes to the lowest id, whichever arrived first.
    tied = [profile(MEMBER, name, created_at=T0 + 30) for name in ("tie-a", "tie-b", "tie-c")]
    winner = min(tied, key=lambda e: e["id"])
    for event in sorted(tied, key=lambda e: e["id"], reverse=True):
        await publish(ledger, event)
    expected = json.loads(winner["content"])["name"]
    got = await read_event(reads, OWNER.pubkey, anonymous["id"])
    assert got["author"] == expected
    # The same rule everywhere an author appears.
    listed = await reads.list_claims(await readable(reads, "lab"), "recent", 10)
    assert [c["author"] for c in listed] == [expected]
    hits = await search.claims_by_keyword(await readable(search, "lab"), "profile", 10)
    assert [h["author"] for h in hits] == [expected]


# --- search_claims (keyword) ------------------------------------------------------------------


async def test_keyword_search_shape_rank_and_ties(
    ledger: Ledger, reads: Reads, search: Search
) -> None:
    world = await build_world(ledger)
    hits = await search.claims_by_keyword(await readable(search, "lab"), "histamine", 10)
    # c5 says it three times; c1, c3 and c4 once each, tied on rank: newest first.
    assert [h["id"] for h in hits] == [cid(world, n) for n in (5, 4, 3, 1)]
    assert hits[0]["rank"] > hits[1]["rank"] == hits[2]["rank"] == hits[3]["rank"] > 0
    for hit in hits:
        assert set(hit) == CLAIM_HIT_KEYS | {"rank", "contradiction_ids"}
        assert isinstance(hit["rank"], float)
        iso(hit["received_at"])
    json.dumps(hits)
    assert hits[0]["author"] == "owner" and hits[1]["author"] == "bot"
    assert [
        h["id"]
        for h in await search.claims_by_keyword(await readable(search, "lab"), "histamine", 2)
    ] == [
        cid(world, 5),
        cid(world, 4),
    ]


async def test_keyword_search_web_syntax(ledger: Ledger, reads: Reads, search: Search) -> None:
    world = await build_world(ledger)

    async def found(text: str) -> set[str]:
        return {
            h["id"] for h in await search.claims_by_keyword(await readable(search, "lab"), text, 50)
        }

    assert await found("reduced DAO") == {cid(world, 1), cid(world, 2)}
    assert await found('"reduced DAO activity"') == {cid(world, 1)}
    assert await found("histamine -wine") == {cid(world, n) for n in (1, 4, 5)}
    assert await found("wine or migraine") == {cid(world, 2), cid(world, 3)}
    assert await found("migraines") == {cid(world, 2)}  # English stemming
    assert await found("the and of") == set()  # stop words only
    assert await found("") == set()
    assert await found("nothing-like-this") == set()


async def test_search_claims_links_cut_quotes_and_contradictions(
    ledger: Ledger, reads: Reads, search: Search
) -> None:
    world = await build_world(ledger)
    hits = {
        h["id"]: h
        for h in await search.claims_by_keyword(await readable(search, "lab"), "histamine", 10)
    }
    c1 = hits[cid(world, 1)]
    assert [lk["id"] for lk in c1["links"]] == [world.links["s1a"]["id"], world.links["s1b"]["id"]]
    long_link, exact_link = c1["links"]
    assert set(long_link) == LINK_KEYS_ALL
    assert len(LONG_QUOTE) > 300
    assert long_link["quote"] == LONG_QUOTE[:299] + "…" and len(long_link["quote"]) == 300
    assert exact_link["quote"] == EXACT_QUOTE  # 300 exactly: whole
    assert long_link["from"] == world.doc["id"] and long_link["to"] == cid(world, 1)
    assert (long_link["relation"], long_link["reason"]) == ("SUPPORTS", "long quote")
    assert long_link["author"] == "bot" and exact_link["author"] == "owner"
    iso(long_link["received_at"])
    # The link aimed at c1's link is not one of c1's links.
    assert c1["contradiction_ids"] == []
    assert hits[cid(world, 3)]["contradiction_ids"] == [world.contra["id"]]
    assert hits[cid(world, 3)]["links"] == []

    # Elsewhere quotes come back whole.
    full = await reads.get_links(await readable(reads, "lab"), cid(world, 1), None, None, 10)
    assert full[0]["quote"] == LONG_QUOTE
    assert {k: v for k, v in full[0].items() if k not in ("quote", "anchor", "disputed_by")} == {
        k: v for k, v in long_link.items() if k != "quote"
    }
    assert "anchor" not in long_link  # get_links only


# --- search_claims (vector) -------------------------------------------------------------------

E0: Final = unit((0, 1.0))
E1: Final = unit((1, 1.0))


async def vector_world(ledger: Ledger, reads: Reads) -> World:
    """Claim vectors: c1 = e0, c2 = e0 + e1/2, c3 = e1, c4 = -e0, c5 = e0 (ties c1). Vectors
    that must never come back sit beside them: lab's evidence and contradiction at e0, the
    other collection's claim at e0, and another model's (8-dimensional) rows for lab's claims."""
    world = await build_world(ledger)
    vectors = [E0, unit((0, 1.0), (1, 0.5)), E1, unit((0, -1.0)), E0]
    rows: list[tuple[str, str, int, Sequence[float]]] = [
        (cid(world, n), "lab", 4702, v) for n, v in enumerate(vectors, start=1)
    ]
    rows.append((world.doc["id"], "lab", 4701, E0))
    rows.append((world.contra["id"], "lab", 4704, unit((2, 1.0))))
    rows.append((world.other_claim["id"], "other", 4702, E0))
    await embed(reads, rows)
    tiny = [(cid(world, n), "lab", 4702, unit((0, 1.0), dims=8)) for n in range(1, 6)]
    await embed(reads, tiny, model=OTHER_MODEL)
    return world


@pytest.mark.parametrize("indexed", [False, True])
async def test_vector_search_order_shape_and_scope(
    ledger: Ledger, reads: Reads, indexed: bool, search: Search
) -> None:
    world = await vector_world(ledger, reads)
    if indexed:
        await ensure_vector_index(reads.pool, MODEL, DIMS)
        await ensure_vector_index(reads.pool, MODEL, DIMS)  # idempotent
    hits = await search.claims_near(await readable(search, "lab"), E0, MODEL, DIMS, 10)
    assert [h["id"] for h in hits] == [cid(world, n) for n in (5, 1, 2, 3, 4)]
    expected = [0.0, 0.0, cosine_distance(E0, unit((0, 1.0), (1, 0.5))), 1.0, 2.0]
    assert [h["distance"] for h in hits] == pytest.approx(expected, abs=1e-6)
    for hit in hits:
        assert set(hit) == CLAIM_HIT_KEYS | {"distance", "contradiction_ids"}
        iso(hit["received_at"])
    json.dumps(hits)
    by_id = {h["id"]: h for h in hits}
    assert by_id[cid(world, 1)]["links"][0]["quote"].endswith("…")
    assert by_id[cid(world, 2)]["contradiction_ids"] == [world.contra["id"]]

    top = await search.claims_near(await readable(search, "lab"), E1, MODEL, DIMS, 2)
    assert [h["id"] for h in top] == [cid(world, 3), cid(world, 2)]
    assert (
        await search.claims_near(await readable(search, "lab"), E0, "no-such-model", DIMS, 5) == []
    )
    tiny = await search.claims_near(
        await readable(search, "lab"), unit((1, 1.0), dims=8), OTHER_MODEL, 8, 5
    )
    assert [h["id"] for h in tiny][:5] == [cid(world, n) for n in (5, 4, 3, 2, 1)]
    other = await search.claims_near(await readable(search, "other"), E0, MODEL, DIMS, 5)
    assert [h["id"] for h in other] == [world.other_claim["id"]]


def test_vector_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        vector_literal([1.0, 0.0], 3)
    with pytest.raises(ValueError, match="NaN"):
        vector_literal([math.nan, 1.0], 2)
    with pytest.raises(ValueError, match="dims"):
        vector_literal([], 0)
    assert vector_literal([1, 0.5], 2) == "[1.0,0.5]"
    assert sql_literal("a'b") == "'a''b'"
    for bad in ("", "a\\b", "a\nb", "a\x00b"):
        with pytest.raises(ValueError):
            sql_literal(bad)
    name = vector_index_name(MODEL, DIMS)
    assert name == vector_index_name(MODEL, DIMS) != vector_index_name(OTHER_MODEL, DIMS)
    assert len(name) <= 63 and name.isidentifier()


async def test_limits_are_plain_integers(reads: Reads) -> None:
    """The page size is written into the SQL (see `_limited`), so anything but an int is
    refused before it gets there."""
    for bad in (-1, True, 2.0, "5", "5; DROP TABLE events"):
        with pytest.raises(ValueError, match="limit"):
            await reads.get_links(await readable(reads, "lab"), None, None, None, bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            await reads.list_contradictions(await readable(reads, "lab"), bad)  # type: ignore[arg-type]
    assert await reads.list_claims(await readable(reads, "lab"), "links", 0) == []


@pytest.fixture
async def planner_pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    """Connections on which the planner avoids sorting, so it takes the HNSW index even for
    a small collection (it would rightly read a few rows through the B-tree otherwise)."""
    pool = await asyncpg.create_pool(
        db_url,
        min_size=1,
        max_size=2,
        server_settings={"enable_sort": "off", "enable_seqscan": "off"},
    )
    try:
        yield pool
    finally:
        await pool.close()


async def crowd(reads: Reads, n: int = 2000) -> None:
    """`n` vectors of another collection, all nearer to e0 than any lab claim but c1 and c5."""
    rng = random.Random(4702)
    rows: list[tuple[str, str, int, Sequence[float]]] = []
    for i in range(n):
        vector = [0.0] * DIMS
        vector[0] = 1.0
        for j in rng.sample(range(3, DIMS), 4):
            vector[j] = rng.uniform(-0.15, 0.15)
        rows.append((fake_id(10_000 + i), "crowd", 4702, unit(*enumerate(vector))))
    await embed(reads, rows)


async def test_hnsw_serves_a_collection_filtered_query_with_iterative_scan(
    ledger: Ledger, reads: Reads, planner_pool: asyncpg.Pool, search: Search
) -> None:
    """The partial index is used (its predicate matched through the model literal, even in a
    generic plan), and a small collection among many nearer rows still gets `limit` results:
    without the iterative scan the first 40 candidates hold at most c1 and c5."""
    if cluster.CITUS_URL:
        pytest.skip("a single PostgreSQL's plans (Citus makes no generic plan for a shard)")
    world = await vector_world(ledger, reads)
    await crowd(reads)
    await ensure_vector_index(reads.pool, MODEL, DIMS)
    await reads.pool.execute("ANALYZE embeddings")
    literal = sql_literal(MODEL)
    indexed_sql = _claims_vector_sql(literal, DIMS, 5, indexed=True)
    query = vector_literal(unit((0, 1.0), (5, 0.01)), DIMS)  # near e0, nearer the crowd
    index = vector_index_name(MODEL, DIMS)
    planned = Search(planner_pool, None)
    async with planner_pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE near(text, text) AS {indexed_sql}")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE near('lab', '{query}')"))
        assert f"Index Scan using {index}" in plan, plan
        await conn.execute("DEALLOCATE near")

        async with conn.transaction():
            await planned._hnsw.apply(conn, 5)
            assert planned._hnsw._iterative_scan is True  # the embedded server has pgvector 0.8
            rows = await conn.fetch(indexed_sql, "lab", query)
        assert len(rows) == 5
        async with conn.transaction():
            await conn.execute("SET LOCAL hnsw.iterative_scan = off")
            starved = await conn.fetch(indexed_sql, "lab", query)
        assert len(starved) <= 2

    hits = await planned.claims_near(await readable(planned, "lab"), E0, MODEL, DIMS, 5)
    assert [h["id"] for h in hits] == [cid(world, n) for n in (5, 1, 2, 3, 4)]
    exact = await search.claims_near(await readable(search, "lab"), E0, MODEL, DIMS, 5)
    assert exact == hits


async def test_vector_search_falls_back_to_exact_without_iterative_scan(
    ledger: Ledger, reads: Reads, planner_pool: asyncpg.Pool
) -> None:
    """An older pgvector (no iterative scan) is simulated by never setting it: the short answer
    of the index is completed by the exact query."""
    world = await vector_world(ledger, reads)
    await crowd(reads, 600)
    await ensure_vector_index(reads.pool, MODEL, DIMS)
    old = Search(planner_pool, None)
    old._hnsw._iterative_scan = False
    hits = await old.claims_near(await readable(old, "lab"), E0, MODEL, DIMS, 5)
    assert [h["id"] for h in hits] == [cid(world, n) for n in (5, 1, 2, 3, 4)]


# --- list_claims ------------------------------------------------------------------------------


async def test_list_claims_shape_and_counts(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    listed = await reads.list_claims(await readable(reads, "lab"), None, 10)  # no sort: recent
    assert [c["id"] for c in listed] == [cid(world, n) for n in (5, 4, 3, 2, 1)]
    for item in listed:
        assert set(item) == {
            "id",
            "pubkey",
            "author",
            "text",
            "received_at",
            "supports",
            "qualifies",
            "rebuts",
            "findings",
        }
        iso(item["received_at"])
    json.dumps(listed)
    counts = {c["id"]: (c["supports"], c["qualifies"], c["rebuts"], c["findings"]) for c in listed}
    assert counts == {
        cid(world, 1): (2, 0, 0, 0),
        cid(world, 2): (1, 0, 1, 1),
        cid(world, 3): (0, 0, 0, 1),
        cid(world, 4): (0, 1, 0, 0),
        cid(world, 5): (1, 0, 0, 0),
    }
    # The count sorts compute the same numbers in their single pass.
    for sort in ("links", "unsupported", "unchallenged", "contested"):
        sorted_items = await reads.list_claims(await readable(reads, "lab"), sort, 10)
        assert {c["id"]: c for c in sorted_items} == {c["id"]: c for c in listed}, sort


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        ("recent", (5, 4, 3, 2, 1)),
        ("links", (2, 1, 5, 4, 3)),  # 2 and 2, then 1 and 1, then 0: ties newest first
        ("unsupported", (4, 3, 5, 2, 1)),  # supports 0,0,1,1,2
        ("unchallenged", (1, 5, 4, 3, 2)),  # challenges 0 (supports 2,1,0), then 1, then 2
        ("contested", (2, 3, 5, 4, 1)),  # challenges 2, 1, then the zeros newest first
    ],
)
async def test_list_claims_sorts(
    ledger: Ledger, reads: Reads, sort: str, order: tuple[int, ...]
) -> None:
    world = await build_world(ledger)
    listed = await reads.list_claims(await readable(reads, "lab"), sort, 10)
    assert [c["id"] for c in listed] == [cid(world, n) for n in order]
    assert [c["id"] for c in await reads.list_claims(await readable(reads, "lab"), sort, 2)] == [
        cid(world, n) for n in order[:2]
    ]


async def test_list_claims_ties_fall_to_the_newest(ledger: Ledger, reads: Reads) -> None:
    """With no links at all every count sort is one big tie, so each gives the recent order.
    (Seqs are unique, so the final tie-break on id never decides anything observable.)"""
    await open_collection(ledger, OWNER, "lab")
    batch = [claim(OWNER, "lab", f"claim number {i}") for i in range(6)]
    await publish(ledger, *batch)
    newest_first = [e["id"] for e in reversed(batch)]
    for sort in ("recent", "links", "unsupported", "unchallenged", "contested"):
        assert [
            c["id"] for c in await reads.list_claims(await readable(reads, "lab"), sort, 10)
        ] == newest_first
    with pytest.raises(ValueError):
        await reads.list_claims(await readable(reads, "lab"), "random", 10)


async def test_claims_nobody_linked_count_as_zero_in_every_sort(
    ledger: Ledger, reads: Reads
) -> None:
    """A claim no link or contradiction names has no row in the aggregate: its counts are 0,
    never null (a null would sort first in a descending sort)."""
    await open_collection(ledger, OWNER, "lab")
    doc = evidence(OWNER, "lab", "Rebutting words here.")
    old, rebutted, new = (claim(OWNER, "lab", f"claim {name}") for name in ("a", "b", "c"))
    await publish(ledger, doc, old, rebutted, new)
    rebuttal = link(OWNER, "lab", doc["id"], rebutted["id"], "Rebutting words", relation="REBUTS")
    await publish(ledger, rebuttal)
    order = {
        sort: [c["id"] for c in await reads.list_claims(await readable(reads, "lab"), sort, 10)]
        for sort in ("links", "contested", "unchallenged", "unsupported")
    }
    assert order["links"] == order["contested"] == ids([rebutted, new, old])
    assert order["unchallenged"] == ids([new, old, rebutted])
    assert order["unsupported"] == ids([new, rebutted, old])
    for sort, listed in order.items():  # the page's own cut, not only the final order
        assert [
            c["id"] for c in await reads.list_claims(await readable(reads, "lab"), sort, 1)
        ] == listed[:1], sort


# Each claim's counts, counted afresh from the ledger's own tables (sql/008 keeps them instead).
# Aggregates joined on the collection and the id, which Citus runs on each worker.
_SQL_COUNTED: Final = """
    SELECT c.id, c.collection, c.seq,
           coalesce(l.supports, 0)::int, coalesce(l.qualifies, 0)::int,
           coalesce(l.rebuts, 0)::int, coalesce(f.findings, 0)::int
    FROM claims c
    LEFT JOIN (SELECT collection, to_id,
                      count(*) FILTER (WHERE relation = 'SUPPORTS') AS supports,
                      count(*) FILTER (WHERE relation = 'QUALIFIES') AS qualifies,
                      count(*) FILTER (WHERE relation = 'REBUTS') AS rebuts
               FROM links GROUP BY collection, to_id) AS l
        ON l.collection = c.collection AND l.to_id = c.id
    LEFT JOIN (SELECT collection, claim_id, count(*) AS findings
               FROM contradiction_claims GROUP BY collection, claim_id) AS f
        ON f.collection = c.collection AND f.claim_id = c.id
    ORDER BY c.id"""
_SQL_KEPT: Final = """
    SELECT claim_id, collection, seq, supports, qualifies, rebuts, findings
    FROM claim_counts ORDER BY claim_id"""
# Each collection's records, counted afresh (sql/009 keeps them), and as kept.
_SQL_COLLECTIONS_COUNTED: Final = """
    SELECT c.slug, coalesce(v.n, 0), coalesce(k.n, 0), coalesce(l.n, 0), coalesce(x.n, 0)
    FROM collections c
    LEFT JOIN (SELECT collection, count(*) AS n FROM evidence GROUP BY 1) v ON v.collection = c.slug
    LEFT JOIN (SELECT collection, count(*) AS n FROM claims GROUP BY 1) k ON k.collection = c.slug
    LEFT JOIN (SELECT collection, count(*) AS n FROM links GROUP BY 1) l ON l.collection = c.slug
    LEFT JOIN (SELECT collection, count(*) AS n FROM contradictions GROUP BY 1) x
        ON x.collection = c.slug
    ORDER BY c.slug"""
_SQL_COLLECTIONS_KEPT: Final = """
    SELECT collection, evidence, claims, links, contradictions
    FROM collection_counts ORDER BY collection"""


async def test_the_counts_kept_are_the_ledgers_and_the_backfills_compute_the_same(
    ledger: Ledger,
) -> None:
    """The counts a publish keeps equal a fresh count of links and contradictions: for claims
    and the links to them stored in one batch, links to a link and to a contradiction (which
    count for no claim), a second collection, and later batches adding to standing counts. The
    migration's back-fill, run again over the same ledger, writes the same rows."""
    world = await build_world(ledger)
    c = [e["id"] for e in world.claims]
    await publish(ledger, link(MEMBER, "lab", world.doc["id"], c[0], EXACT_QUOTE, reason="again"))
    await publish(ledger, contradiction(OWNER, "lab", [c[3], c[4]], reason="a second one"))
    await open_collection(ledger, OWNER, "empty")  # a collection with no record yet

    async def rows(sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await ledger.pool.fetch(sql)]

    kept = await rows(_SQL_KEPT)
    assert kept == await rows(_SQL_COUNTED)
    assert len(kept) == len(world.claims) + 2  # and "other"'s two claims: no row for non-claims
    collections = await rows(_SQL_COLLECTIONS_KEPT)
    assert collections == await rows(_SQL_COLLECTIONS_COUNTED)
    assert [slug for slug, *_ in collections] == ["empty", "lab", "other"]
    async with ledger.pool.acquire() as conn:
        if await citus.is_distributed(conn):
            return  # the back-fills ran before the tables were distributed, as migrations do
    for table, number in (("claim_counts", "008"), ("collection_counts", "009")):
        migration = next((Path(__file__).parents[2] / "sql").glob(f"{number}_*.sql")).read_text()
        backfill = f"INSERT INTO {table}" + migration.split(f"INSERT INTO {table}", 1)[1]
        async with ledger.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM {table}")
            await conn.execute(backfill)
    assert await rows(_SQL_KEPT) == kept
    assert await rows(_SQL_COLLECTIONS_KEPT) == collections


# --- get_links --------------------------------------------------------------------------------


async def test_get_links_filters(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    L = {name: e["id"] for name, e in world.links.items()}
    in_order = list(L.values())  # published in this order

    async def got(
        to_id: str | None = None,
        from_id: str | None = None,
        relation: str | None = None,
        limit: int = 100,
    ) -> list[str]:
        return [
            lk["id"]
            for lk in await reads.get_links(
                await readable(reads, "lab"), to_id, from_id, relation, limit
            )
        ]

    assert await got() == in_order
    assert await got(limit=3) == in_order[:3]
    assert await got(to_id=cid(world, 1)) == [L["s1a"], L["s1b"]]
    assert await got(to_id=L["s1a"]) == [L["r_link"]]
    assert await got(to_id=world.contra["id"]) == [L["s_contra"]]
    assert await got(from_id=world.doc["id"]) == in_order
    assert await got(from_id=world.doc2["id"]) == []
    assert await got(relation="REBUTS") == [L["r2"], L["r_link"]]
    assert await got(relation="QUALIFIES") == [L["q4"]]
    assert await got(to_id=cid(world, 2), relation="REBUTS") == [L["r2"]]
    assert await got(to_id=cid(world, 2), relation="QUALIFIES") == []
    assert await got(from_id=world.doc["id"], relation="SUPPORTS", limit=2) == [
        L["s1a"],
        L["s1b"],
    ]
    three = await got(to_id=cid(world, 2), from_id=world.doc["id"], relation="SUPPORTS")
    assert three == [L["s2"]]
    # Another collection's ids match nothing here.
    assert await got(to_id=world.other_claim["id"]) == []
    assert await got(from_id=world.other_doc["id"]) == []

    links = await reads.get_links(await readable(reads, "lab"), None, None, "QUALIFIES", 10)
    assert (
        links
        == [
            {
                "id": L["q4"],
                "pubkey": MEMBER.pubkey,
                "author": "bot",
                "from": world.doc["id"],
                "to": cid(world, 4),
                "relation": "QUALIFIES",
                "quote": "The end",
                "reason": "the quote says so",
                "received_at": links[0]["received_at"],
                "anchor": {  # where "The end" sits in the evidence as signed
                    "start": DOC_TEXT.index("The end"),
                    "end": DOC_TEXT.index("The end") + 7,
                    "exact": "The end",
                    "prefix": DOC_TEXT[DOC_TEXT.index("The end") - 32 : DOC_TEXT.index("The end")],
                    "suffix": DOC_TEXT[DOC_TEXT.index("The end") + 7 :][:32],
                    "occurrences": 1,
                },
                "disputed_by": [],
            }
        ]
    )
    iso(links[0]["received_at"])
    # A link that a REBUTS link is aimed at lists it: the first 10, oldest first.
    disputed = {
        lk["id"]: lk["disputed_by"]
        for lk in await reads.get_links(await readable(reads, "lab"), None, None, None, 100)
    }
    assert disputed[L["s1a"]] == [L["r_link"]]
    assert all(ids == [] for link_id, ids in disputed.items() if link_id != L["s1a"])


# --- list_evidence ----------------------------------------------------------------------------


async def test_list_evidence(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    doc3 = evidence(MEMBER, "lab", "Third, with no source.", title="Third")
    await publish(ledger, doc3)
    listed = await reads.list_evidence(await readable(reads, "lab"), False, None, 10)
    assert [e["id"] for e in listed] == [world.doc["id"], world.doc2["id"], doc3["id"]]
    first = listed[0]
    assert first == {
        "id": world.doc["id"],
        "pubkey": MEMBER.pubkey,
        "author": "bot",
        "title": "HIT review",
        "url": "https://x.org",
        "source": "J1",
        "received_at": first["received_at"],
        "chars": len(DOC_TEXT),
        "link_count": len(world.links),
    }
    iso(first["received_at"])
    assert listed[1]["link_count"] == 0 and listed[1]["url"] is None
    assert listed[2]["source"] is None
    json.dumps(listed)

    async def got(ungrounded: bool, source: str | None, limit: int = 10) -> list[str]:
        return [
            e["id"]
            for e in await reads.list_evidence(
                await readable(reads, "lab"), ungrounded, source, limit
            )
        ]

    assert await got(True, None) == [world.doc2["id"], doc3["id"]]
    assert await got(True, None, 1) == [world.doc2["id"]]
    assert await got(False, "J1") == [world.doc["id"]]
    assert await got(False, "j1") == []  # exact
    assert await got(True, "J1") == []
    assert await got(True, "J2") == [world.doc2["id"]]
    assert await got(False, None, 2) == [world.doc["id"], world.doc2["id"]]


# --- contradictions ---------------------------------------------------------------------------


async def test_contradiction_shape(ledger: Ledger, reads: Reads) -> None:
    world = await build_world(ledger)
    long_rebuttal = link(
        MEMBER, "lab", world.doc["id"], world.contra["id"], LONG_QUOTE, relation="REBUTS"
    )
    await publish(ledger, long_rebuttal)
    found = await reads.contradictions_with_claim(await readable(reads, "lab"), cid(world, 3), 10)
    assert len(found) == 1
    item = found[0]
    assert set(item) == CONTRADICTION_KEYS
    assert item["id"] == world.contra["id"]
    assert (item["pubkey"], item["author"]) == (MEMBER.pubkey, "bot")
    assert item["reason"] == "Wine and migraine disagree"
    assert item["claim_ids"] == [cid(world, 3), cid(world, 2)]  # as signed
    assert item["claims"] == [
        {
            "id": cid(world, 3),
            "pubkey": OWNER.pubkey,
            "author": "owner",
            "text": "Histamine in wine triggers headaches.",
        },
        {
            "id": cid(world, 2),
            "pubkey": MEMBER.pubkey,
            "author": "bot",
            "text": "DAO activity is reduced in migraine patients.",
        },
    ]
    assert [lk["id"] for lk in item["links"]] == ids([world.links["s_contra"], long_rebuttal])
    assert set(item["links"][0]) == LINK_KEYS_ALL
    assert item["links"][1]["quote"] == LONG_QUOTE  # whole: only search_claims cuts quotes
    iso(item["received_at"])
    json.dumps(found)


async def contradiction_world(ledger: Ledger) -> tuple[World, list[EventDict]]:
    """Three more contradictions in lab, after the world's own (x0)."""
    world = await build_world(ledger)
    c = [cid(world, n) for n in range(1, 6)]
    extra = [
        contradiction(OWNER, "lab", [c[0], c[3]], reason="Mast cells are not the whole story"),
        contradiction(OWNER, "lab", [c[0], c[4], c[2]], reason="Everywhere versus only in wine"),
        contradiction(MEMBER, "lab", [c[3], c[4]], reason="Release versus presence"),
    ]
    await publish(ledger, *extra)
    return world, [world.contra, *extra]


async def test_contradictions_by_claim_and_newest_first(ledger: Ledger, reads: Reads) -> None:
    world, xs = await contradiction_world(ledger)
    x = [e["id"] for e in xs]

    async def by_claim(n: int, limit: int = 10) -> list[str]:
        return [
            i["id"]
            for i in await reads.contradictions_with_claim(
                await readable(reads, "lab"), cid(world, n), limit
            )
        ]

    assert await by_claim(1) == [x[1], x[2]]  # oldest first
    assert await by_claim(5) == [x[2], x[3]]
    assert await by_claim(4, 1) == [x[1]]
    assert await by_claim(2) == [x[0]]
    found = await reads.contradictions_with_claim(
        await readable(reads, "lab"), world.other_claim["id"], 10
    )
    assert found == []
    recent = await reads.list_contradictions(await readable(reads, "lab"), 10)
    assert [i["id"] for i in recent] == list(reversed(x))
    assert [i["id"] for i in await reads.list_contradictions(await readable(reads, "lab"), 2)] == [
        x[3],
        x[2],
    ]
    assert recent[1]["claim_ids"] == [cid(world, 1), cid(world, 5), cid(world, 3)]
    assert [c["id"] for c in recent[1]["claims"]] == recent[1]["claim_ids"]


async def test_contradictions_keyword(ledger: Ledger, reads: Reads, search: Search) -> None:
    world, xs = await contradiction_world(ledger)
    x = [e["id"] for e in xs]

    async def found(text: str) -> list[str]:
        return [
            i["id"]
            for i in await search.contradictions_by_keyword(await readable(search, "lab"), text, 10)
        ]

    assert await found("story") == [x[1]]  # in the reason only
    assert set(await found("mast cells")) == {x[1], x[3]}  # x1's reason, c4's text in x3
    assert set(await found("migraine")) == {x[0]}  # the reason and a claim's text
    assert set(await found("headaches")) == {x[0], x[2]}  # only in a claim's text (c3)
    assert set(await found("headaches -wine")) == set()
    assert set(await found("headaches -migraine")) == {x[2]}
    assert set(await found('"release versus"')) == {x[3]}
    assert set(await found("release or everywhere")) == {x[1], x[2], x[3]}
    assert await found("the") == []
    items = await search.contradictions_by_keyword(await readable(search, "lab"), "histamine", 10)
    assert items and all(set(i) == CONTRADICTION_KEYS | {"rank"} for i in items)
    ranks = [i["rank"] for i in items]
    assert ranks == sorted(ranks, reverse=True)
    # x2 holds c1, c5 and c3: "histamine" five times; it ranks first.
    assert items[0]["id"] == x[2]
    assert world.other_contra["id"] not in await found("wine or migraine or histamine")


async def test_contradictions_vector(ledger: Ledger, reads: Reads, search: Search) -> None:
    world, xs = await contradiction_world(ledger)
    x = [e["id"] for e in xs]
    c = [cid(world, n) for n in range(1, 6)]
    # Claims at distinct directions; x0's reason sits at e9. x3 has no vector of its own, and
    # its claims (c4, c5) none either: it cannot be found by vector until the embedder runs.
    await embed(
        reads,
        [
            (c[0], "lab", 4702, unit((0, 1.0))),
            (c[1], "lab", 4702, unit((1, 1.0))),
            (c[2], "lab", 4702, unit((2, 1.0))),
            (x[0], "lab", 4704, unit((9, 1.0))),
            (x[1], "lab", 4704, unit((0, 1.0), (9, 1.0))),
        ],
    )
    await embed(
        reads,
        [
            (world.other_contra["id"], "other", 4704, unit((9, 1.0))),
            (world.other_claim["id"], "other", 4702, unit((9, 1.0))),
        ],
    )
    items = await search.contradictions_near(
        await readable(search, "lab"), unit((9, 1.0)), MODEL, DIMS, 10
    )
    # x0: its reason exactly (0). x1: its reason at 45° (1 - cos 45°) beats its claims.
    # x2: claims c1 and c3, both orthogonal (1).
    assert [i["id"] for i in items] == [x[0], x[1], x[2]]
    assert [i["distance"] for i in items] == pytest.approx([0.0, 1 - math.sqrt(0.5), 1.0], abs=1e-6)
    assert all(set(i) == CONTRADICTION_KEYS | {"distance"} for i in items)
    # Nearest to c3 (e2): x0 holds c3 and so does x2; a tie at 0, newest first.
    near_c3 = await search.contradictions_near(
        await readable(search, "lab"), unit((2, 1.0)), MODEL, DIMS, 10
    )
    assert [i["id"] for i in near_c3][:2] == [x[2], x[0]]
    one = await search.contradictions_near(
        await readable(search, "lab"), unit((2, 1.0)), MODEL, DIMS, 1
    )
    assert [i["id"] for i in one] == [x[2]]
    assert (
        await search.contradictions_near(await readable(search, "lab"), E0, "no-model", DIMS, 10)
        == []
    )


# --- events for the proof checker, and the collection wall -------------------------------------


def _all_ids(value: Any) -> set[str]:
    """Every 64-hex string anywhere in a result."""
    found: set[str] = set()
    if isinstance(value, dict):
        for item in value.values():
            found |= _all_ids(item)
    elif isinstance(value, list):
        for item in value:
            found |= _all_ids(item)
    elif isinstance(value, str) and len(value) == 64:
        found.add(value)
    return found


async def test_nothing_from_another_collection_ever_comes_back(
    ledger: Ledger, reads: Reads, search: Search
) -> None:
    """Every read for "lab", fed with look-alike texts and the other collection's own ids,
    returns no id, key or text that exists only in "other"."""
    world = await vector_world(ledger, reads)
    other_ids = {
        world.other_claim["id"],
        world.other_doc["id"],
        world.other_contra["id"],
        world.other_link["id"],
        OWNER2.pubkey,
    }
    await embed(reads, [(world.other_contra["id"], "other", 4704, E0)])
    results: list[Any] = [
        await search.claims_by_keyword(
            await readable(search, "lab"), "histamine or wine or migraine", 200
        ),
        await search.claims_near(await readable(search, "lab"), E0, MODEL, DIMS, 200),
        await reads.list_claims(await readable(reads, "lab"), None, 200),
        await reads.get_links(await readable(reads, "lab"), None, None, None, 1000),
        await reads.get_links(
            await readable(reads, "lab"), world.other_claim["id"], None, None, 1000
        ),
        await reads.get_links(
            await readable(reads, "lab"), None, world.other_doc["id"], None, 1000
        ),
        await reads.list_evidence(await readable(reads, "lab"), False, "J1", 500),
        await reads.list_contradictions(await readable(reads, "lab"), 200),
        await reads.contradictions_with_claim(
            await readable(reads, "lab"), world.other_claim["id"], 200
        ),
        await search.contradictions_by_keyword(
            await readable(search, "lab"), "wine or migraine", 200
        ),
        await search.contradictions_near(await readable(search, "lab"), E0, MODEL, DIMS, 200),
        [
            asdict(c)
            for c in (await reads.cited(await readable(reads, "lab"), list(other_ids))).values()
        ],
        await reads.get_event(await reader_of(reads, OWNER.pubkey), world.other_claim["id"]),
        await reads.list_collections(await reader_of(reads, OWNER.pubkey)),
    ]
    results += [
        await reads.list_claims(await readable(reads, "lab"), s, 200)
        for s in ("links", "contested")
    ]
    for result in results:
        assert not (_all_ids(result) & other_ids), result
        assert '"other"' not in json.dumps(result)


async def test_signed_but_unpublished_ids_are_unknown(ledger: Ledger, reads: Reads) -> None:
    """An id that was signed but never stored reads like any missing id."""
    await open_collection(ledger, OWNER, "lab")
    ghost = signed(OWNER, 4702, {"collection": "lab", "text": "never published"})
    assert await reads.get_event(await reader_of(reads, OWNER.pubkey), ghost["id"]) is None
    assert await reads.cited(await readable(reads, "lab"), [ghost["id"]]) == {}
    assert (
        await reads.contradictions_with_claim(await readable(reads, "lab"), ghost["id"], 10) == []
    )
