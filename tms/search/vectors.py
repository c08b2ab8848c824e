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
server processes never embed the same event at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from tms.errors import one_line
from tms.rules.kinds import embedded_kinds
from tms.search.model import TEXT_CHARS, Embedder, embedding_text
from tms.search.pgvector import vector_literal
from tms.store.database import Connection, Pool, is_database_down
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

    async def embed_published(self, ids: Sequence[EventId]) -> int:
        """Embed these just-published events until done or the wait budget is spent; return
        how many this call embedded. What is left stays queued for the background task."""
        deadline = time.monotonic() + self.wait_seconds
        chunks = iter([list(ids[i : i + CHUNK]) for i in range(0, len(ids), CHUNK)])

        async def lane() -> int:
            done = 0
            for chunk in chunks:  # shared: each lane takes the next chunk
                if time.monotonic() >= deadline:
                    break
                done += await self._embed_chunk(chunk)
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
            """SELECT count(*) FROM embedding_queue q JOIN claims c ON c.id = q.event_id
               WHERE c.collection = $1""",
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
        while await self._embed_chunk(None):
            pass

    async def _embed_chunk(self, ids: list[EventId] | None) -> int:
        """Embed one chunk of queued events (these ids, or the oldest queued) in one
        transaction; returns how many got a vector."""
        async with self.pool.acquire() as conn, conn.transaction():
            if ids is None:
                taken = await conn.fetch(_SQL_TAKE_OLDEST, CHUNK)
            else:
                taken = await conn.fetch(_SQL_TAKE_IDS, ids)
            if not taken:
                return 0
            taken_ids = [r["event_id"] for r in taken]
            # no more than `embedding_text` reads: the vector is the same as from the whole text
            rows = await conn.fetch(_sql_texts(), taken_ids, TEXT_CHARS)
            texts = [embedding_text(r["text"], r["title"]) for r in rows]
            vectors = await asyncio.to_thread(self.embedder.embed, texts) if texts else []
            await _store(conn, self.model, rows, vectors)
            await conn.execute(
                "DELETE FROM embedding_queue WHERE event_id = ANY($1::text[])", taken_ids
            )
            return len(rows)


async def _store(
    conn: Connection, model: str, rows: Sequence[Any], vectors: Sequence[Sequence[float]]
) -> None:
    if not rows:
        return
    ids = [r["id"] for r in rows]
    await conn.execute(
        "DELETE FROM embeddings WHERE event_id = ANY($1::text[]) AND model <> $2", ids, model
    )
    await conn.execute(
        """INSERT INTO embeddings (event_id, model, collection, kind, embedding)
           SELECT u.id, $2, u.collection, u.kind, u.embedding::vector
           FROM unnest($1::text[], $3::text[], $4::int[], $5::text[])
                AS u(id, collection, kind, embedding)
           ON CONFLICT (event_id, model) DO NOTHING""",
        ids,
        model,
        [r["collection"] for r in rows],
        [r["kind"] for r in rows],
        [vector_literal(v, len(v)) for v in vectors],
    )


_SQL_TAKE_OLDEST: Final = """
    SELECT event_id FROM embedding_queue ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED"""
_SQL_TAKE_IDS: Final = """
    SELECT event_id FROM embedding_queue WHERE event_id = ANY($1::text[])
    ORDER BY seq FOR UPDATE SKIP LOCKED"""


def _sql_texts() -> str:
    """What each searchable kind embeds (`Kind.embedding`), read from its typed table: the
    text, and the title where it has one (`embedding_text` joins them). $2: characters read of
    each field, no more than `embedding_text` uses."""
    return "\nUNION ALL\n".join(
        f"SELECT id, collection, {kind} AS kind, left({e.text}, $2) AS text, "
        f"{f'left({e.title}, $2)' if e.title else 'NULL::text'} AS title "
        f"FROM {e.table} WHERE id = ANY($1::text[])"
        for kind, e in embedded_kinds().items()
    )


def _sql_enqueue_missing() -> str:
    stored = " UNION ALL ".join(f"SELECT id, seq FROM {e.table}" for e in embedded_kinds().values())
    return f"""
    INSERT INTO embedding_queue (event_id, seq)
    SELECT t.id, t.seq FROM ({stored}) AS t
    WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.event_id = t.id AND e.model = $1)
    ON CONFLICT (event_id) DO NOTHING"""
