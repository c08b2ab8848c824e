"""Vectors with the real default model: computed after publish within the wait budget, caught
up in the background when the budget runs out or embedding fails, re-made after a model change,
and searched by the tools; with embedding off, keyword search answers with a note."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from factories import OWNER, EventDict, claim
from publishing import open_collection

from tms.config import Settings
from tms.ledger.service import Ledger
from tms.mcp.tools import Tools
from tms.rules.admission import OPERATOR
from tms.runtime import load_embedder
from tms.search.pgvector import ensure_vector_index
from tms.search.vectors import Vectors
from tms.services import Services
from tms.store.database import Pool, open_pool

pytestmark = pytest.mark.anyio

SLUG = "vec"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Pool]:
    p = await open_pool(db_url, min_size=1, max_size=6)
    try:
        yield p
    finally:
        await p.close()


async def _vectors(pool: Pool, wait: float = 30.0) -> Vectors:
    embedder = load_embedder(Settings.from_env({}).embedding)
    await ensure_vector_index(pool, embedder.model_id, embedder.dims)
    vectors = Vectors(pool, embedder, wait_seconds=wait)
    await vectors.start()
    return vectors


async def _stored(pool: Pool) -> dict[str, tuple[str, int]]:
    rows = await pool.fetch("SELECT event_id, model, vector_dims(embedding) AS d FROM embeddings")
    return {r["event_id"]: (r["model"], r["d"]) for r in rows}


async def _eventually(pool: Pool, count: int, seconds: float = 30.0) -> dict[str, tuple[str, int]]:
    deadline = time.monotonic() + seconds
    while True:
        stored = await _stored(pool)
        current = {k: v for k, v in stored.items() if v[0] == MODEL}
        if len(current) >= count or time.monotonic() > deadline:
            return stored
        await anyio.sleep(0.1)


_numbers = itertools.count()


def _claims(n: int) -> list[EventDict]:
    """`n` claims never signed before (the same text signed at the same time would be one event)."""
    return [
        claim(OWNER, SLUG, f"Claim {i} about histamine.") for i in itertools.islice(_numbers, n)
    ]


async def test_publish_embeds_its_batch_and_reports_how_many(pool: Pool) -> None:
    vectors = await _vectors(pool)
    try:
        ledger = Ledger(pool, vectors=vectors)
        await open_collection(ledger, OWNER, SLUG)
        claims = _claims(3)
        result = await ledger.submit(claims, origin=OPERATOR)
        assert result["embedded"] == 3 and "embedding_error" not in result
        stored = await _stored(pool)
        assert {c["id"]: stored[c["id"]] for c in claims} == dict.fromkeys(
            [c["id"] for c in claims], (MODEL, 384)
        )
        assert await pool.fetchval("SELECT count(*) FROM embedding_queue") == 0
    finally:
        await vectors.close()


async def test_what_the_budget_leaves_is_caught_up_in_the_background(pool: Pool) -> None:
    vectors = await _vectors(pool, wait=0.0)
    try:
        ledger = Ledger(pool, vectors=vectors)
        await open_collection(ledger, OWNER, SLUG)
        result = await ledger.submit(_claims(100), origin=OPERATOR)
        assert result["embedded"] == 0
        stored = await _eventually(pool, 100)
        assert len(stored) == 100
    finally:
        await vectors.close()


async def test_vectors_missing_at_start_up_are_caught_up(pool: Pool) -> None:
    ledger = Ledger(pool)  # embedding off: events are queued, nothing embeds them
    await open_collection(ledger, OWNER, SLUG)
    assert (await ledger.submit(_claims(5), origin=OPERATOR))["embedded"] == 0
    assert await pool.fetchval("SELECT count(*) FROM embedding_queue") == 5
    vectors = await _vectors(pool)
    try:
        assert len(await _eventually(pool, 5)) == 5
    finally:
        await vectors.close()


async def test_a_changed_model_is_re_embedded_by_the_catch_up(pool: Pool) -> None:
    vectors = await _vectors(pool)
    ledger = Ledger(pool, vectors=vectors)
    await open_collection(ledger, OWNER, SLUG)
    await ledger.submit(_claims(4), origin=OPERATOR)
    await vectors.close()
    # as if these vectors came from an earlier model (embeddings are not ledger: may change)
    await pool.execute("UPDATE embeddings SET model = 'old/model'")
    vectors = await _vectors(pool)
    try:
        stored = await _eventually(pool, 4)
        assert set(stored.values()) == {(MODEL, 384)}, "old vectors are replaced, not kept"
    finally:
        await vectors.close()


async def test_a_failed_embedding_is_reported_and_caught_up_later(pool: Pool) -> None:
    vectors = await _vectors(pool)
    try:
        ledger = Ledger(pool, vectors=vectors)
        await open_collection(ledger, OWNER, SLUG)
        # the database refuses vectors for a while: a real failure on the embedding path
        await pool.execute("ALTER TABLE embeddings ADD CONSTRAINT refuse CHECK (false) NOT VALID")
        claims = _claims(2)
        result = await ledger.submit(claims, origin=OPERATOR)
        assert "embedded" not in result
        assert result["embedding_error"].startswith("embedding failed (")
        assert result["accepted"] == [c["id"] for c in claims], "the events are stored anyway"
        await pool.execute("ALTER TABLE embeddings DROP CONSTRAINT refuse")
        await ledger.submit(_claims(1), origin=OPERATOR)  # a later publish wakes the catch-up
        assert len(await _eventually(pool, 3)) == 3
    finally:
        await vectors.close()


async def test_with_embedding_off_search_is_keyword_with_a_note(pool: Pool) -> None:
    ledger = Ledger(pool)
    await open_collection(ledger, OWNER, SLUG)
    dao = claim(OWNER, SLUG, "Reduced DAO activity.")
    await ledger.submit([dao], origin=OPERATOR)
    tools = Tools(Services.over(pool, None), signer=OWNER)
    result = await tools.call("search_claims", {"collection": SLUG, "text": "DAO"})
    assert result["method"] == "keyword"
    assert "TMS_EMBED=off" in result["note"]
    assert [item["id"] for item in result["items"]] == [dao["id"]]


async def test_claims_still_waiting_are_named_in_the_note(pool: Pool) -> None:
    ledger = Ledger(pool)
    await open_collection(ledger, OWNER, SLUG)
    await ledger.submit(_claims(2), origin=OPERATOR)  # queued, not embedded
    embedder = load_embedder(Settings.from_env({}).embedding)
    await ensure_vector_index(pool, embedder.model_id, embedder.dims)
    vectors = Vectors(pool, embedder, wait_seconds=10)  # not started: nothing catches up
    tools = Tools(Services.over(pool, vectors), signer=OWNER)
    result = await tools.call("search_claims", {"collection": SLUG, "text": "histamine"})
    assert result["method"] == "vector"
    assert result["note"].startswith("2 claims of this collection are still waiting for vectors")
