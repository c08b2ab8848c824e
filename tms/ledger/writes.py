"""What a publish does in the database, inside its transaction: lock what the batch touches,
read the snapshot the rules judge it against, and write what they accept.

Kept apart from the service so that the service reads as the steps of a publish, and the SQL of
each step sits next to the step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from tms.ledger.anchors import ANCHOR_COLUMNS, anchor_row
from tms.nostr.events import Event, compact_json
from tms.rules.anchors import Verdict
from tms.rules.kinds import Claim, Contradiction, Evidence, Link, Members, Profile, Terms
from tms.rules.publish import (
    Parsed,
    Plan,
    Ref,
    Snapshot,
    batch_texts,
    first_miss,
    nearest_found,
    quotes_by_evidence,
    quotes_found,
    referenced_ids,
)
from tms.rules.terms import current_terms
from tms.store.database import Connection
from tms.types import EMBEDDED_KINDS, EventId

_UNSCOPED_LOCK: Final = "~unscoped"  # one lock for profiles and terms, which name no collection

_SQL_STORED: Final = "SELECT id FROM events WHERE id = ANY($1::text[])"
_SQL_APPROVED: Final = "SELECT pubkey FROM approvals WHERE pubkey = ANY($1::text[])"
_SQL_TERMS_SIGNED: Final = """
    SELECT DISTINCT pubkey FROM terms_signatures
    WHERE pubkey = ANY($1::text[]) AND version = $2 AND sha256 = $3"""
_SQL_BELONGS_TO: Final = """
    SELECT pubkey, collection FROM readers WHERE pubkey = ANY($1::text[])"""
_SQL_COLLECTIONS: Final = """
    SELECT c.slug, c.owner, h.list_id, h.created_at AS list_created_at,
           (SELECT array_agg(m.pubkey) FROM memberships m WHERE m.collection = c.slug) AS members
    FROM collections c LEFT JOIN current_member_lists h ON h.collection = c.slug
    WHERE c.slug = ANY($1::text[])"""
_SQL_REFS: Final = "SELECT id, kind, collection FROM events WHERE id = ANY($1::text[])"
_SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1"
_SQL_PROFILES: Final = """
    SELECT DISTINCT ON (pubkey) pubkey, created_at, id FROM profiles
    WHERE pubkey = ANY($1::text[])
    ORDER BY pubkey, created_at DESC, id"""

OffLoop = Callable[..., Awaitable[Any]]  # runs a CPU-bound function off the event loop


async def lock(conn: Connection, batch: Sequence[Parsed]) -> None:
    """Serialize batches that touch the same collection (or any profile or terms), so that two
    racing to create one collection end with one owner and a batch sent twice at once is
    stored once. Sorted, so two batches never wait on each other in a cycle."""
    keys = {p.collection or _UNSCOPED_LOCK for p in batch}
    for key in sorted(keys):
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", key)


async def snapshot(conn: Connection, batch: Sequence[Parsed]) -> Snapshot:
    """The ledger as the batch finds it, limited to what the batch touches."""
    ids = [p.event.id for p in batch]
    signers = sorted({p.event.pubkey for p in batch})
    slugs = sorted({p.collection for p in batch if p.collection is not None})
    # Batch ids stay in: an event re-sent in the batch may be stored already (and skipped),
    # and the events after it may cite it.
    cited = sorted(referenced_ids(batch))
    terms = current_terms()
    s = Snapshot()
    s.stored_ids = {r["id"] for r in await conn.fetch(_SQL_STORED, ids)}
    s.approved = {r["pubkey"] for r in await conn.fetch(_SQL_APPROVED, signers)}
    s.terms_signed = {
        r["pubkey"]
        for r in await conn.fetch(_SQL_TERMS_SIGNED, signers, terms["version"], terms["sha256"])
    }
    for r in await conn.fetch(_SQL_BELONGS_TO, signers):
        s.belongs_to.setdefault(r["pubkey"], set()).add(r["collection"])
    for r in await conn.fetch(_SQL_COLLECTIONS, slugs):
        s.owners[r["slug"]] = r["owner"]
        s.members[r["slug"]] = set(r["members"] or ())
        if r["list_id"] is not None:
            s.heads[r["slug"]] = (r["list_created_at"], r["list_id"])
    s.refs = {r["id"]: Ref(r["kind"], r["collection"]) for r in await conn.fetch(_SQL_REFS, cited)}
    s.profiles = {
        r["pubkey"]: (r["created_at"], r["id"]) for r in await conn.fetch(_SQL_PROFILES, signers)
    }
    return s


async def quotes(conn: Connection, batch: Sequence[Parsed], run: OffLoop) -> dict[EventId, Verdict]:
    """`Snapshot.quotes`: every link's quote looked for in its evidence, one evidence at a time
    (read, normalized off the event loop by `run`, then let go), so memory stays bounded by
    the largest document, not by how many the batch quotes. Each found quote comes back with
    its anchor; the first missing one in batch order (the one a refusal would name) with the
    nearest passage, for which its evidence is read once more."""
    own = batch_texts(batch)
    found: dict[EventId, Verdict] = {}
    for evidence_id, quoted in quotes_by_evidence(batch).items():
        text = own.get(evidence_id)
        if text is None:
            text = await conn.fetchval(_SQL_TEXT, evidence_id)
        if text is not None:
            found.update(await run(quotes_found, text, quoted))
    missing = first_miss(batch, found)
    if missing is not None:
        link_id, evidence_id, quote = missing
        text = own.get(evidence_id)
        if text is None:
            text = await conn.fetchval(_SQL_TEXT, evidence_id)
        if text is not None:
            found[link_id] = await run(nearest_found, text, quote)
    return found


async def write(conn: Connection, plan: Plan) -> None:
    """Insert the accepted events, their typed rows, the collections they create, the member
    lists they make current, and their places in the embedding queue."""
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
    anchored = [(p, plan.anchors[p.event.id]) for p in accepted if p.event.id in plan.anchors]
    if anchored:
        await conn.copy_records_to_table(
            "link_anchors",
            records=[(p.event.id, p.collection, *anchor_row(a)) for p, a in anchored],
            columns=ANCHOR_COLUMNS,
        )
    searchable = [e.id for e in events if e.kind in EMBEDDED_KINDS]
    if searchable:  # their vectors are computed after commit (tms.search.vectors)
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
    """The typed tables, one COPY per table the batch fills."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    for p in accepted:
        rows = _TYPED_ROWS[type(p.content)](p.event, p.content, seq[p.event.id])
        for table, row in rows:
            tables.setdefault(table, []).append(row)
    for table, records in tables.items():
        await conn.copy_records_to_table(table, records=records, columns=_COLUMNS[table])


TypedRows = Callable[[Event, Any, int], list[tuple[str, tuple[Any, ...]]]]

# Each kind's rows in the typed tables, as (table, row) pairs whose values follow `_COLUMNS`.
_TYPED_ROWS: Final[dict[type, TypedRows]] = {
    Evidence: lambda e, c, s: [
        ("evidence", (e.id, s, c.collection, e.pubkey, c.title, c.url, c.source, c.text))
    ],
    Claim: lambda e, c, s: [("claims", (e.id, s, c.collection, e.pubkey, c.text))],
    Link: lambda e, c, s: [
        ("links", (e.id, s, c.collection, e.pubkey, c.from_, c.to, c.relation, c.quote, c.reason))
    ],
    Contradiction: lambda e, c, s: [
        ("contradictions", (e.id, s, c.collection, e.pubkey, c.reason)),
        *(("contradiction_claims", (e.id, claim, c.collection)) for claim in c.claims),
    ],
    Members: lambda e, c, s: [
        ("member_lists", (e.id, s, c.collection, e.pubkey, e.created_at, list(c.members)))
    ],
    Profile: lambda e, c, s: [
        ("profiles", (e.id, s, e.pubkey, e.created_at, c.name, c.about, c.picture))
    ],
    Terms: lambda e, c, s: [("terms_signatures", (e.id, s, e.pubkey, c.version, c.sha256))],
}

_COLUMNS: Final[dict[str, list[str]]] = {
    "evidence": ["id", "seq", "collection", "pubkey", "title", "url", "source", "text"],
    "claims": ["id", "seq", "collection", "pubkey", "text"],
    "links": [
        *("id", "seq", "collection", "pubkey"),
        *("from_id", "to_id", "relation", "quote", "reason"),
    ],
    "contradictions": ["id", "seq", "collection", "pubkey", "reason"],
    "contradiction_claims": ["contradiction_id", "claim_id", "collection"],
    "member_lists": ["id", "seq", "collection", "pubkey", "created_at", "members"],
    "profiles": ["id", "seq", "pubkey", "created_at", "name", "about", "picture"],
    "terms_signatures": ["id", "seq", "pubkey", "version", "sha256"],
}
