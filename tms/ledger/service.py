"""The ledger service: the one place where batches are made permanent and collections read.

The MCP tools, the web pages and the CLI all call this, so each rule is written once. Publishing
is one transaction: lock what the batch touches, read a snapshot, let `rules.judge` decide, write
everything or nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import asyncpg

from tms.errors import one_line
from tms.nostr.events import Event, compact_json
from tms.rules.kinds import Claim, Contradiction, Evidence, Link, Members, Profile, Terms
from tms.rules.publish import (
    Parsed,
    Plan,
    Ref,
    Snapshot,
    check_batch_shape,
    judge,
    newer,
    parse_events,
    quoted_evidence_ids,
    referenced_ids,
)
from tms.rules.terms import current_terms
from tms.store.database import Connection, Pool
from tms.types import EMBEDDED_AT_PUBLISH, EMBEDDED_KINDS, KIND_MEMBERS, EventId, PubKey, Slug

if TYPE_CHECKING:
    from tms.search.vectors import Vectors

log = logging.getLogger("tms.ledger.service")

_UNSCOPED_LOCK: Final = "~unscoped"  # one lock for profiles and terms, which name no collection
EXPORT_BATCH: Final = 500  # rows fetched per round trip while streaming an export
VERIFY_THREADS: Final = min(4, os.cpu_count() or 1)
PARALLEL_FROM: Final = 64  # smaller batches are verified in one thread


@dataclass(frozen=True, slots=True)
class PublishResult:
    accepted: list[EventId]
    skipped: list[EventId]
    collections: list[Slug]
    embedded: int = 0
    embedding_error: str | None = None  # replaces `embedded` in the result when set

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "accepted": self.accepted,
            "skipped": self.skipped,
            "collections": self.collections,
        }
        if self.embedding_error is None:
            result["embedded"] = self.embedded
        else:
            result["embedding_error"] = self.embedding_error
        return result


class Ledger:
    def __init__(
        self, pool: Pool, *, export_pool: Pool | None = None, vectors: Vectors | None = None
    ) -> None:
        self.pool = pool
        self.export_pool = pool if export_pool is None else export_pool
        self.vectors = vectors  # None: no embedding (TMS_EMBED=off)

    # --- publishing ------------------------------------------------------------------------

    async def publish(self, events: object, *, now: int | None = None) -> PublishResult:
        """Store a batch of signed events, all or nothing (SPEC "Publishing")."""
        now = int(time.time()) if now is None else now
        batch = await _parse_off_loop(check_batch_shape(events), now)
        async with self.pool.acquire() as conn, conn.transaction():
            await _lock(conn, batch)
            snapshot = await _snapshot(conn, batch)
            plan = judge(batch, snapshot)
            if plan.accepted:
                await _write(conn, plan)
        embedded, error = await self._embed(plan)
        return PublishResult(
            accepted=[p.event.id for p in plan.accepted],
            skipped=plan.skipped,
            collections=plan.collections,
            embedded=embedded,
            embedding_error=error,
        )

    async def _embed(self, plan: Plan) -> tuple[int, str | None]:
        """Vectors for the claims and contradictions just committed (what search reads), within
        the wait budget; evidence is left to the background catch-up. A failure is reported,
        never raised: the events are stored, and their vectors are caught up later."""
        searchable = [p.event.id for p in plan.accepted if p.event.kind in EMBEDDED_AT_PUBLISH]
        if self.vectors is None or not searchable:
            return 0, None
        try:
            return await self.vectors.embed_published(searchable), None
        except Exception as exc:
            log.warning("embedding after publish failed: %s", exc)
            reason = one_line(exc, 300)
            return 0, f"embedding failed ({reason}); the events are stored, vectors come later"

    # --- operator --------------------------------------------------------------------------

    async def approve(self, pubkeys: Sequence[PubKey]) -> list[PubKey]:
        """Approve keys; returns those that were not approved before."""
        rows = await self.pool.fetch(
            """INSERT INTO approvals (pubkey) SELECT unnest($1::text[])
               ON CONFLICT DO NOTHING RETURNING pubkey""",
            list(pubkeys),
        )
        return [row["pubkey"] for row in rows]

    async def revoke(self, pubkeys: Sequence[PubKey]) -> list[PubKey]:
        rows = await self.pool.fetch(
            "DELETE FROM approvals WHERE pubkey = ANY($1::text[]) RETURNING pubkey", list(pubkeys)
        )
        return [row["pubkey"] for row in rows]

    async def approved(self) -> list[tuple[PubKey, str]]:
        rows = await self.pool.fetch(
            "SELECT pubkey, approved_at FROM approvals ORDER BY approved_at, pubkey"
        )
        return [(row["pubkey"], row["approved_at"].isoformat()) for row in rows]

    # --- reading ---------------------------------------------------------------------------

    async def collection_exists(self, slug: Slug) -> bool:
        return bool(await self.pool.fetchval("SELECT 1 FROM collections WHERE slug = $1", slug))

    async def may_use(self, pubkey: PubKey) -> bool:
        """Approved by the operator, or owner or member of some collection: who may publish,
        and who may use the service's own resources (fetching)."""
        row = await self.pool.fetchval(
            """SELECT EXISTS (SELECT 1 FROM approvals WHERE pubkey = $1)
                   OR EXISTS (SELECT 1 FROM collections WHERE owner = $1)
                   OR EXISTS (SELECT 1 FROM memberships WHERE pubkey = $1)""",
            pubkey,
        )
        return bool(row)

    async def can_read(self, pubkey: PubKey, slug: Slug) -> bool:
        """Owner or current member. A missing collection and a closed one look the same."""
        row = await self.pool.fetchval(
            """SELECT EXISTS (SELECT 1 FROM collections WHERE slug = $1 AND owner = $2)
                   OR EXISTS (SELECT 1 FROM memberships WHERE collection = $1 AND pubkey = $2)""",
            slug,
            pubkey,
        )
        return bool(row)

    async def export_lines(self, slug: Slug) -> AsyncGenerator[str, None]:
        """Every event of the collection, oldest first, one signed JSON line each, exactly as
        stored; streamed from a cursor, so memory stays flat whatever the size. It holds a
        pooled connection until exhausted or closed: callers close it (`aclosing`).

        With the collection's own events come the terms and profiles of the keys that wrote in
        it, so that the file can be published again as it is (every key signs the terms before
        its first write). Those a key signed before its first event here, perhaps while it
        belonged only to another collection, come right before that first event, after the
        member list that let it in; later ones come in ledger order, while the key belongs to
        this collection (one it signed after being removed would not be accepted on replay)."""
        async with (
            self.export_pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read"),
        ):
            owner = await conn.fetchval("SELECT owner FROM collections WHERE slug = $1", slug)
            firsts = {
                r["pubkey"]: r["first"]
                for r in await conn.fetch(
                    "SELECT pubkey, min(seq) AS first FROM events WHERE collection = $1 "
                    "GROUP BY pubkey",
                    slug,
                )
            }
            prelude: dict[PubKey, list[asyncpg.Record]] = {}
            later: deque[asyncpg.Record] = deque()
            for row in await conn.fetch(_SQL_EXPORT_UNSCOPED, list(firsts)):
                if row["seq"] < firsts[row["pubkey"]]:
                    prelude.setdefault(row["pubkey"], []).append(row)
                else:
                    later.append(row)
            members = _Membership(owner)
            cursor = conn.cursor(_SQL_EXPORT, slug, prefetch=EXPORT_BATCH)
            async for row in cursor:
                while later and later[0]["seq"] < row["seq"]:
                    if members.includes(later[0]["pubkey"]):
                        yield _line(later[0])
                    later.popleft()
                for early in prelude.pop(row["pubkey"], ()):
                    yield _line(early)
                members.apply(row)
                yield _line(row)
            for row in later:
                if members.includes(row["pubkey"]):
                    yield _line(row)


class _Membership:
    """Who belongs to one collection as its events stream by, by the replaceable rule."""

    def __init__(self, owner: PubKey | None) -> None:
        self.owner = owner
        self.members: set[PubKey] = set()
        self.head: tuple[int, EventId] | None = None

    def apply(self, row: asyncpg.Record) -> None:
        key = (row["created_at"], row["id"])
        if row["kind"] != KIND_MEMBERS or (self.head is not None and not newer(key, self.head)):
            return
        self.head = key
        self.members = set(json.loads(row["content"])["members"])

    def includes(self, pubkey: PubKey) -> bool:
        return pubkey == self.owner or pubkey in self.members


_SQL_EXPORT: Final = """
    SELECT seq, id, pubkey, created_at, kind, tags, content, sig FROM events
    WHERE collection = $1 ORDER BY seq"""
_SQL_EXPORT_UNSCOPED: Final = """
    SELECT seq, id, pubkey, created_at, kind, tags, content, sig FROM events
    WHERE collection IS NULL AND pubkey = ANY($1::text[]) ORDER BY seq"""


async def _parse_off_loop(raw: list[object], now: int) -> list[Parsed]:
    """Envelopes, signatures and schemas are CPU work: keep the event loop free meanwhile.
    coincurve releases the GIL while it verifies, so a big batch is split across threads."""
    if len(raw) < PARALLEL_FROM:
        return await asyncio.to_thread(parse_events, raw, now)
    size = -(-len(raw) // VERIFY_THREADS)
    chunks = [(raw[i : i + size], i) for i in range(0, len(raw), size)]
    results = await asyncio.gather(
        *(asyncio.to_thread(parse_events, chunk, now, offset) for chunk, offset in chunks),
        return_exceptions=True,
    )
    parsed: list[Parsed] = []
    for result in results:  # in batch order, so the first error is the earliest event's
        if isinstance(result, BaseException):
            raise result
        parsed.extend(result)
    return parsed


def _line(row: asyncpg.Record) -> str:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # only profiles carry tags
    return Event(
        row["id"], row["pubkey"], row["created_at"], row["kind"], tags, row["content"], row["sig"]
    ).to_json()


async def _lock(conn: Connection, batch: Sequence[Parsed]) -> None:
    """Serialize batches that touch the same collection (or any profile or terms), so that two
    racing to create one collection end with one owner and a batch sent twice at once is
    stored once. Sorted, so two batches never wait on each other in a cycle."""
    keys = {p.collection or _UNSCOPED_LOCK for p in batch}
    for key in sorted(keys):
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", key)


async def _snapshot(conn: Connection, batch: Sequence[Parsed]) -> Snapshot:
    ids = [p.event.id for p in batch]
    signers = sorted({p.event.pubkey for p in batch})
    slugs = sorted({p.collection for p in batch if p.collection is not None})
    # Batch ids stay in: an event re-sent in the batch may be stored already (and skipped),
    # and the events after it may cite it.
    cited = sorted(referenced_ids(batch))
    quoted = sorted(quoted_evidence_ids(batch))
    terms = current_terms()
    s = Snapshot()
    s.stored_ids = {r["id"] for r in await conn.fetch(_SQL_STORED, ids)}
    s.approved = {r["pubkey"] for r in await conn.fetch(_SQL_APPROVED, signers)}
    s.terms_signed = {
        r["pubkey"]
        for r in await conn.fetch(_SQL_TERMS_SIGNED, signers, terms.version, terms.sha256)
    }
    for r in await conn.fetch(_SQL_BELONGS_TO, signers):
        s.belongs_to.setdefault(r["pubkey"], set()).add(r["collection"])
    for r in await conn.fetch(_SQL_COLLECTIONS, slugs):
        s.owners[r["slug"]] = r["owner"]
        s.members[r["slug"]] = set(r["members"] or ())
        if r["list_id"] is not None:
            s.heads[r["slug"]] = (r["list_created_at"], r["list_id"])
    s.refs = {r["id"]: Ref(r["kind"], r["collection"]) for r in await conn.fetch(_SQL_REFS, cited)}
    s.evidence_texts = {r["id"]: r["text"] for r in await conn.fetch(_SQL_TEXTS, quoted)}
    return s


_SQL_STORED: Final = "SELECT id FROM events WHERE id = ANY($1::text[])"
_SQL_APPROVED: Final = "SELECT pubkey FROM approvals WHERE pubkey = ANY($1::text[])"
_SQL_TERMS_SIGNED: Final = """
    SELECT DISTINCT pubkey FROM terms_signatures
    WHERE pubkey = ANY($1::text[]) AND version = $2 AND sha256 = $3"""
_SQL_BELONGS_TO: Final = """
    SELECT owner AS pubkey, slug AS collection FROM collections WHERE owner = ANY($1::text[])
    UNION SELECT pubkey, collection FROM memberships WHERE pubkey = ANY($1::text[])"""
_SQL_COLLECTIONS: Final = """
    SELECT c.slug, c.owner, h.list_id, h.created_at AS list_created_at,
           (SELECT array_agg(m.pubkey) FROM memberships m WHERE m.collection = c.slug) AS members
    FROM collections c LEFT JOIN current_member_lists h ON h.collection = c.slug
    WHERE c.slug = ANY($1::text[])"""
_SQL_REFS: Final = "SELECT id, kind, collection FROM events WHERE id = ANY($1::text[])"
_SQL_TEXTS: Final = "SELECT id, text FROM evidence WHERE id = ANY($1::text[])"


async def _write(conn: Connection, plan: Plan) -> None:
    accepted = plan.accepted
    events = [p.event for p in accepted]
    rows = await conn.fetch(
        """INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
           SELECT id, pubkey, created_at, kind, tags, content, sig, collection
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::text[], $6::text[],
                       $7::text[], $8::text[])
                WITH ORDINALITY AS u(id, pubkey, created_at, kind, tags, content, sig,
                                     collection, position)
           ORDER BY position
           RETURNING id, seq""",
        [e.id for e in events],
        [e.pubkey for e in events],
        [e.created_at for e in events],
        [e.kind for e in events],
        [compact_json(e.tags) for e in events],
        [e.content for e in events],
        [e.sig for e in events],
        [p.collection for p in accepted],
    )
    seq = {r["id"]: r["seq"] for r in rows}
    if plan.new_collections:
        await conn.executemany(
            "INSERT INTO collections (slug, owner, created_by) VALUES ($1, $2, $3)",
            plan.new_collections,
        )
    await _write_typed(conn, accepted, seq)
    searchable = [e.id for e in events if e.kind in EMBEDDED_KINDS]
    if searchable:  # their vectors are computed after commit (tms.embedder)
        await conn.execute(
            "INSERT INTO embedding_queue (event_id, seq) SELECT u.id, u.seq "
            "FROM unnest($1::text[], $2::bigint[]) AS u(id, seq)",
            searchable,
            [seq[i] for i in searchable],
        )
    for slug, (created_at, list_id, members) in plan.member_lists.items():
        await conn.execute(
            """INSERT INTO current_member_lists (collection, list_id, created_at)
               VALUES ($1, $2, $3)
               ON CONFLICT (collection) DO UPDATE
               SET list_id = EXCLUDED.list_id, created_at = EXCLUDED.created_at""",
            slug,
            list_id,
            created_at,
        )
        await conn.execute("DELETE FROM memberships WHERE collection = $1", slug)
        await conn.execute(
            "INSERT INTO memberships (collection, pubkey) SELECT $1, unnest($2::text[])",
            slug,
            members,
        )


async def _write_typed(conn: Connection, accepted: Sequence[Parsed], seq: dict[str, int]) -> None:
    """The typed tables, one multi-row insert per kind present in the batch."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    for p in accepted:
        e, c = p.event, p.content
        key = (e.id, seq[e.id])
        if isinstance(c, Evidence):
            tables.setdefault("evidence", []).append(
                (*key, c.collection, e.pubkey, c.title, c.url, c.source, c.text)
            )
        elif isinstance(c, Link):
            tables.setdefault("links", []).append(
                (*key, c.collection, e.pubkey, c.from_, c.to, c.relation, c.quote, c.reason)
            )
        elif isinstance(c, Contradiction):
            tables.setdefault("contradictions", []).append((*key, c.collection, e.pubkey, c.reason))
            tables.setdefault("contradiction_claims", []).extend(
                (e.id, claim, c.collection) for claim in c.claims
            )
        elif isinstance(c, Members):
            tables.setdefault("member_lists", []).append(
                (*key, c.collection, e.pubkey, e.created_at, list(c.members))
            )
        elif isinstance(c, Profile):
            tables.setdefault("profiles", []).append(
                (*key, e.pubkey, e.created_at, c.name, c.about, c.picture)
            )
        elif isinstance(c, Terms):
            tables.setdefault("terms_signatures", []).append((*key, e.pubkey, c.version, c.sha256))
        elif isinstance(c, Claim):
            tables.setdefault("claims", []).append((*key, c.collection, e.pubkey, c.text))
    for table, records in tables.items():
        await conn.copy_records_to_table(table, records=records, columns=_COLUMNS[table])


_COLUMNS: Final[dict[str, list[str]]] = {
    "evidence": ["id", "seq", "collection", "pubkey", "title", "url", "source", "text"],
    "claims": ["id", "seq", "collection", "pubkey", "text"],
    "links": [
        "id",
        "seq",
        "collection",
        "pubkey",
        "from_id",
        "to_id",
        "relation",
        "quote",
        "reason",
    ],
    "contradictions": ["id", "seq", "collection", "pubkey", "reason"],
    "contradiction_claims": ["contradiction_id", "claim_id", "collection"],
    "member_lists": ["id", "seq", "collection", "pubkey", "created_at", "members"],
    "profiles": ["id", "seq", "pubkey", "created_at", "name", "about", "picture"],
    "terms_signatures": ["id", "seq", "pubkey", "version", "sha256"],
}
