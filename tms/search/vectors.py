"""Vectors for search: computed after a publish commits, and caught up in the background.

Every claim, evidence and contradiction enters `embedding_queue` in its publish transaction.
Vectors are made outside it, so a slow or broken model never holds a batch back or loses one:

- `embed_published` embeds the claims and contradictions just stored (what search reads), chunk
  by chunk, until done or until the wait budget (`TMS_EMBED_WAIT`) is spent; `publish` reports
  how many it embedded;
- a background task empties the rest of the queue: evidence, what a publish left over, what
  failed earlier, and at start-up every event without a vector from the current model (so a changed
  model is re-embedded by the same path).

Queue rows are taken with `FOR UPDATE SKIP LOCKED`, so a publish, the background task and other
server processes never embed the same event at once; one collection at a time, so that each take
is a statement about one collection's rows (on Citus, its own shard: a locking read across
shards is not something Citus does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from tms.errors import is_database_down, one_line
from tms.rules.kinds import embedded_kinds
from tms.search.model import TEXT_CHARS, Embedder, embedding_text
from tms.search.pgvector import vector_literal
from tms.store.database import Connection, Pool
from tms.store.outage import Outage
from tms.types import EventId, Slug

log = logging.getLogger("tms.search.vectors")

CHUNK: Final = 32  # events per transaction; also the longest a search query waits for the model
# Chunks in flight at once. The model runs one chunk at a time (the embedder's lock); with two
# lanes, one chunk's vectors are stored (the HNSW index upkeep costs about a third of the model's
# time) while the next is being embedded, so the model never waits on the database.
LANES: Final = 2
RETRY_SECONDS: Final = 30.0  # after a failed catch-up round


class Vectors:
    def __init__(
        self, pool: Pool, embedder: Embedder, *, wait_seconds: float, outage: Outage | None = None
    ) -> None:
        self.pool = pool
        self.outage = outage or Outage()  # where the database found down is told
        self.embedder = embedder
        self.wait_seconds = wait_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def model(self) -> str:
        return self.embedder.model_id

    @property
    def dims(self) -> int:
        return self.embedder.dims

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Queue every event that lacks a vector from this model (all of them, after a model
        change), then start catching up in the background."""
        await self.pool.execute(_sql_enqueue_missing(), self.model)
        self._task = asyncio.create_task(self._catch_up_forever(), name="tms-vectors")
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # --- work --------------------------------------------------------------------------------

    async def embed_published(self, published: Sequence[tuple[Slug, EventId]]) -> int:
        """Embed these just-published events (each with its collection) until done or the wait
        budget is spent; return how many this call embedded. What is left stays queued for the
        background task."""
        deadline = time.monotonic() + self.wait_seconds
        by_collection: dict[Slug, list[EventId]] = {}
        for slug, event_id in published:
            by_collection.setdefault(slug, []).append(event_id)
        chunks = iter(
            [
                (slug, ids[i : i + CHUNK])
                for slug, ids in by_collection.items()
                for i in range(0, len(ids), CHUNK)
            ]
        )

        async def lane() -> int:
            done = 0
            for slug, chunk in chunks:  # shared: each lane takes the next chunk
                if time.monotonic() >= deadline:
                    break
                done += await self._embed_chunk(slug, chunk)
            return done

        try:
            return sum(await asyncio.gather(*(lane() for _ in range(LANES))))
        finally:
            self._wake.set()

    async def query(self, text: str) -> list[float]:
        vectors = await asyncio.to_thread(self.embedder.embed, [text])
        return vectors[0]

    async def pending_claims(self, collection: Slug) -> int:
        """Claims of the collection still waiting for a vector (missing from vector search)."""
        count = await self.pool.fetchval(
            """SELECT count(*) FROM embedding_queue q
               JOIN claims c ON c.id = q.event_id AND c.collection = q.collection
               WHERE q.collection = $1""",
            collection,
        )
        return int(count or 0)

    async def _catch_up_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await asyncio.gather(*(self._catch_up_lane() for _ in range(LANES)))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the model or the database failed: retry later
                if is_database_down(exc):
                    self.outage.failed("the embedding catch-up", exc)
                else:
                    log.warning(
                        "embedding catch-up failed, retrying in %ss: %s",
                        RETRY_SECONDS,
                        one_line(exc, 300),
                    )
                with contextlib.suppress(TimeoutError):  # or sooner, when a publish wakes us
                    await asyncio.wait_for(self._wake.wait(), RETRY_SECONDS)
                self._wake.set()

    async def _catch_up_lane(self) -> None:
        while await self._embed_oldest():
            pass

    async def _embed_oldest(self) -> int:
        """Embed a chunk of the oldest queued collection's events; 0 when nothing is left
        that another taker does not hold. A collection whose queued rows are all taken is
        passed over: there are at most a chunk per taker of them, so looking past them is
        cheap."""
        passed: list[Slug] = []
        for _ in range(LANES + 1):
            slug = await self.pool.fetchval(_SQL_OLDEST, passed)
            if slug is None:
                return 0
            done = await self._embed_chunk(slug, None)
            if done:
                return done
            passed.append(slug)
        return 0

    async def _embed_chunk(self, collection: Slug, ids: list[EventId] | None) -> int:
        """Embed one chunk of a collection's queued events (these ids, or its oldest queued)
        in one transaction; returns how many got a vector."""
        async with self.pool.acquire() as conn, conn.transaction():
            if ids is None:
                taken = await conn.fetch(_SQL_TAKE_OLDEST, collection, CHUNK)
            else:
                taken = await conn.fetch(_SQL_TAKE_IDS, collection, ids)
            if not taken:
                return 0
            taken_ids = [r["event_id"] for r in taken]
            # no more than `embedding_text` reads: the vector is the same as from the whole text
            rows = await conn.fetch(_sql_texts(), collection, taken_ids, TEXT_CHARS)
            texts = [embedding_text(r["text"], r["title"]) for r in rows]
            vectors = await asyncio.to_thread(self.embedder.embed, texts) if texts else []
            await _store(conn, self.model, collection, rows, vectors)
            await conn.execute(
                "DELETE FROM embedding_queue WHERE collection = $1 AND event_id = ANY($2::text[])",
                collection,
                taken_ids,
            )
            return len(rows)


async def _store(
    conn: Connection,
    model: str,
    collection: Slug,
    rows: Sequence[Any],
    vectors: Sequence[Sequence[float]],
) -> None:
    if not rows:
        return
    ids = [r["id"] for r in rows]
    await conn.execute(
        """DELETE FROM embeddings
           WHERE collection = $1 AND event_id = ANY($2::text[]) AND model <> $3""",
        collection,
        ids,
        model,
    )
    await conn.execute(
        """INSERT INTO embeddings (event_id, model, collection, kind, embedding)
           SELECT u.id, $2, $3, u.kind, u.embedding::vector
           FROM unnest($1::text[], $4::int[], $5::text[]) AS u(id, kind, embedding)
           ON CONFLICT (event_id, model, collection) DO NOTHING""",
        ids,
        model,
        collection,
        [r["kind"] for r in rows],
        [vector_literal(v, len(v)) for v in vectors],
    )


# The collection of the oldest queued event, passing over those in $1.
_SQL_OLDEST: Final = """
    SELECT collection FROM embedding_queue WHERE collection <> ALL($1::text[])
    ORDER BY seq LIMIT 1"""
_SQL_TAKE_OLDEST: Final = """
    SELECT event_id FROM embedding_queue WHERE collection = $1
    ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED"""
_SQL_TAKE_IDS: Final = """
    SELECT event_id FROM embedding_queue WHERE collection = $1 AND event_id = ANY($2::text[])
    ORDER BY seq FOR UPDATE SKIP LOCKED"""


def _sql_texts() -> str:
    """What each searchable kind embeds (`Kind.embedding`), read from its typed table: the
    text, and the title where it has one (`embedding_text` joins them). $1 the collection, $2
    the ids, $3: characters read of each field, no more than `embedding_text` uses. Made at
    each call, from the registry as it stands (a kind registered later is embedded too)."""
    return "\nUNION ALL\n".join(
        f"SELECT id, {kind} AS kind, left({e.text}, $3) AS text, "
        f"{f'left({e.title}, $3)' if e.title else 'NULL::text'} AS title "
        f"FROM {e.table} WHERE collection = $1 AND id = ANY($2::text[])"
        for kind, e in embedded_kinds().items()
    )


def _sql_enqueue_missing() -> str:
    stored = " UNION ALL ".join(
        f"SELECT id, seq, collection FROM {e.table}" for e in embedded_kinds().values()
    )
    return f"""
    INSERT INTO embedding_queue (event_id, seq, collection)
    SELECT t.id, t.seq, t.collection FROM ({stored}) AS t
    WHERE NOT EXISTS (SELECT 1 FROM embeddings e
                      WHERE e.event_id = t.id AND e.collection = t.collection AND e.model = $1)
    ON CONFLICT (event_id, collection) DO NOTHING"""
