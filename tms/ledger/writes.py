"""What a publish does in the database, inside its transaction: lock what the batch touches,
read the snapshot the rules judge it against, and write what they accept.

Each step is one statement, so a publish costs few round trips whatever its batch holds: begin,
lock, snapshot, (one per quoted evidence stored before,) write, commit. Other parts of the
ledger that keep rows per collection (the transparency log) read with the snapshot and write
with the write (`also`, `Extra`), rather than in round trips of their own. The locks come in a
statement of their own: in READ COMMITTED a statement reads the ledger as it stood when the
statement began, so a snapshot read in the statement that takes the locks could miss what the
batch it waited for had written.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from tms.ledger.anchors import ANCHOR_COLUMNS
from tms.nostr.events import Event, compact_json
from tms.rules.anchors import Anchor, Verdict
from tms.rules.kinds import Claim, Contradiction, Evidence, Link, Members, Profile, Terms
from tms.rules.publish import (
    Parsed,
    Plan,
    Ref,
    Snapshot,
    batch_texts,
    quotes_by_evidence,
    quotes_found,
    referenced_ids,
)
from tms.rules.terms import current_terms
from tms.store.database import Connection
from tms.types import EMBEDDED_KINDS, UNSCOPED, EventId, PubKey, Slug

# One key's lock, taken where the key's rows live: the statement filters on the collection, so
# on Citus it runs on the worker that holds the collection's shard (and the lock with it),
# whichever node the server talks to; on a single PostgreSQL it is the same advisory lock as
# ever. The count makes the row that carries the call whether or not the collection has one.
_SQL_LOCK: Final = """
    SELECT pg_advisory_xact_lock(hashtextextended($1, 7)), count(*)
    FROM collection_counts WHERE collection = $1"""

# $1 the batch's ids, $2 its signers, $3 its collections, $4 the ids it cites, $5 and $6 the
# current terms, $7 where its own events would be filed ($3, and UNSCOPED for profiles and
# terms). One JSON document, parsed in Python: one round trip for all of it. Events are looked
# up only under the batch's collections: an event id fixes its content, so a stored event can
# only be filed where the batch's copy names, and a cited event elsewhere is refused exactly as
# a missing one (on Citus, this keeps the statement on the batch's shard).
_SQL_SNAPSHOT: Final = """
    SELECT json_build_object(
        'stored', (SELECT json_agg(id) FROM events
                   WHERE collection = ANY($7::text[]) AND id = ANY($1::text[])),
        'approved', (SELECT json_agg(pubkey) FROM approvals WHERE pubkey = ANY($2::text[])),
        'terms', (SELECT json_agg(DISTINCT pubkey) FROM terms_signatures
                  WHERE pubkey = ANY($2::text[]) AND version = $5 AND sha256 = $6),
        'belongs', (SELECT json_agg(json_build_array(pubkey, collection)) FROM readers
                    WHERE pubkey = ANY($2::text[])),
        'collections', (
            SELECT json_agg(json_build_array(
                c.slug, c.owner, h.list_id, h.created_at,
                (SELECT json_agg(m.pubkey) FROM memberships m WHERE m.collection = c.slug)))
            FROM collections c LEFT JOIN current_member_lists h ON h.collection = c.slug
            WHERE c.slug = ANY($3::text[])),
        'refs', (SELECT json_agg(json_build_array(id, kind, collection)) FROM events
                 WHERE collection = ANY($3::text[]) AND id = ANY($4::text[])),
        'profiles', (
            SELECT json_agg(json_build_array(pubkey, created_at, id)) FROM (
                SELECT DISTINCT ON (pubkey) pubkey, created_at, id FROM profiles
                WHERE pubkey = ANY($2::text[]) ORDER BY pubkey, created_at DESC, id) AS p){also}
    )::text"""
# A quoted evidence's text: $1 its id, $2 the collections it may be in (the batch's).
SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1 AND collection = ANY($2::text[])"

OffLoop = Callable[..., Awaitable[Any]]  # runs a CPU-bound function off the event loop
# Binds columns as arrays in the write statement; returns the SQL that reads them (`unnest`).
Binder = Callable[[list[tuple[list[Any], str]]], str]
# More data-modifying CTEs for the write statement, given its binder.
Extra = Callable[[Binder], list[str]]


def lock_keys(batch: Sequence[Parsed]) -> tuple[str, ...]:
    """What a batch locks: each collection it names, and one key for all profiles and terms."""
    return tuple(sorted({p.collection or UNSCOPED for p in batch}))


def collections(batch: Sequence[Parsed]) -> list[Slug]:
    """The collections a batch names, sorted (profiles and terms name none)."""
    return sorted({p.collection for p in batch if p.collection is not None})


async def lock(conn: Connection, batch: Sequence[Parsed]) -> None:
    """Serialize batches that touch the same collection (or any profile or terms), so that two
    racing to create one collection end with one owner and a batch sent twice at once is
    stored once."""
    await hold_locks(conn, lock_keys(batch))


async def hold_locks(conn: Connection, keys: Sequence[str]) -> None:
    """Take these lock keys (collections' slugs) until the transaction ends: also for work on
    a collection outside a publish (building its log) that must not interleave with one. One
    statement per key, in sorted order, so that two batches never wait on each other in a
    cycle."""
    for key in sorted(keys):
        await conn.fetchval(_SQL_LOCK, key)


async def snapshot(
    conn: Connection, batch: Sequence[Parsed], also: Mapping[str, str] | None = None
) -> tuple[Snapshot, dict[str, Any]]:
    """The ledger as the batch finds it, limited to what the batch touches; and, under each
    name in `also`, the JSON array its SQL expression makes over `{collections}` (the batch's
    collections, a text[]), read in the same round trip. A batch of several collections reads
    `also` one collection at a time, in statements of their own, and gets the arrays joined (a
    batch of none gets null):
    each statement about one collection's rows, so that on Citus it runs on that collection's
    worker (such an expression over collections on several workers is more than Citus plans).
    The collections are locked, so what the extra statements read is what the first one would
    have."""
    terms = current_terms()
    slugs = collections(batch)
    inline = (also or {}) if len(slugs) == 1 else {}
    extra = "".join(
        f",\n        '{name}', {sql.format(collections='$3::text[]')}"
        for name, sql in inline.items()
    )
    document = await conn.fetchval(
        _SQL_SNAPSHOT.format(also=extra),
        [p.event.id for p in batch],
        sorted({p.event.pubkey for p in batch}),
        slugs,
        # Batch ids stay in: an event re-sent in the batch may be stored already (and
        # skipped), and the events after it may cite it.
        sorted(referenced_ids(batch)),
        terms["version"],
        terms["sha256"],
        list(lock_keys(batch)),
    )
    found = json.loads(document)
    s = Snapshot()
    s.stored_ids = set(found["stored"] or ())
    s.approved = set(found["approved"] or ())
    s.terms_signed = set(found["terms"] or ())
    for pubkey, collection in found["belongs"] or ():
        s.belongs_to.setdefault(pubkey, set()).add(collection)
    for slug, owner, list_id, list_created_at, members in found["collections"] or ():
        s.owners[slug] = owner
        s.members[slug] = set(members or ())
        if list_id is not None:
            s.heads[slug] = (list_created_at, list_id)
    s.refs = {event_id: Ref(kind, collection) for event_id, kind, collection in found["refs"] or ()}
    s.profiles = {
        pubkey: (created_at, event_id) for pubkey, created_at, event_id in found["profiles"] or ()
    }
    read = {name: found[name] for name in inline}
    for name, sql in (also or {}).items():
        if name not in inline:
            rows: list[Any] = []
            for slug in slugs:
                one = await conn.fetchval(
                    f"SELECT {sql.format(collections='$1::text[]')}::text", [slug]
                )
                rows.extend(json.loads(one) if one is not None else ())
            read[name] = rows or None
    return s, read


async def quotes(conn: Connection, batch: Sequence[Parsed], run: OffLoop) -> dict[EventId, Verdict]:
    """`Snapshot.quotes`: every link's quote looked for in its evidence, one evidence at a time
    (read, normalized off the event loop by `run`, then let go), so memory stays bounded by
    the largest document, not by how many the batch quotes. Each found quote comes back with
    its anchor."""
    own = batch_texts(batch)
    slugs = collections(batch)
    found: dict[EventId, Verdict] = {}
    for evidence_id, quoted in quotes_by_evidence(batch).items():
        text = own.get(evidence_id)
        if text is None:
            text = await conn.fetchval(SQL_TEXT, evidence_id, slugs)
        if text is not None:
            found.update(await run(quotes_found, text, quoted))
    return found


async def write(
    conn: Connection,
    plan: Plan,
    members_before: dict[Slug, set[PubKey]],
    also: Sequence[Extra] = (),
) -> None:
    """Insert the accepted events, their typed rows, their links' anchors, their places in the
    embedding queue, the collections they create, the member lists they make current and the
    rows `also` adds, in one statement: each part a data-modifying CTE over arrays (`unnest`),
    the typed rows joined to the events' new `seq`. `members_before`: each collection's
    members when the batch began, so that only the keys a new list adds or drops are
    written."""
    statement = Statement()
    events = [p.event for p in plan.accepted]
    e = statement.arrays(
        [
            ([x.id for x in events], "text"),
            ([x.pubkey for x in events], "text"),
            ([x.created_at for x in events], "bigint"),
            ([x.kind for x in events], "int"),
            ([compact_json(x.tags) for x in events], "text"),
            ([x.content for x in events], "text"),
            ([x.sig for x in events], "text"),
            ([p.collection or UNSCOPED for p in plan.accepted], "text"),
        ]
    )
    statement.parts.append(
        f"""e AS (
            INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
            SELECT id, pubkey, created_at, kind, tags, content, sig, collection
            FROM unnest({e}) WITH ORDINALITY
                 AS u(id, pubkey, created_at, kind, tags, content, sig, collection, position)
            ORDER BY position
            RETURNING id, seq, kind, collection)"""
    )
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for p in plan.accepted:
        for table, row in TYPED_ROWS[type(p.content)](p.event, p.content):
            rows.setdefault(table, []).append(row)
    for table, records in rows.items():
        columns = COLUMNS[table]
        names = ", ".join(name for name, _ in columns)
        arrays = statement.arrays(
            [([r[i] for r in records], sql_type) for i, (_, sql_type) in enumerate(columns)]
        )
        if table == "contradiction_claims":  # no seq: rows of the contradiction's claims
            select = f"SELECT {names} FROM unnest({arrays}) AS u({names})"
        else:
            values = ", ".join(_VALUE.get(name, f"u.{name}") for name, _ in columns[1:])
            select = (
                f"SELECT u.id, e.seq, {values} FROM unnest({arrays}) AS u({names}) "
                "JOIN e ON e.id = u.id"
            )
        into = names if table == "contradiction_claims" else names.replace("id", "id, seq", 1)
        statement.parts.append(f"t_{table} AS (INSERT INTO {table} ({into}) {select})")
    anchored = [(p, plan.anchors[p.event.id]) for p in plan.accepted if p.event.id in plan.anchors]
    if anchored:  # where each new link's quote sits in its evidence (sql/005)
        _anchors(statement, anchored)
    _claim_counts(statement, plan)
    _collection_counts(statement, plan)
    if any(x.kind in EMBEDDED_KINDS for x in events):  # vectors come after commit (search)
        statement.parts.append(
            "queue AS (INSERT INTO embedding_queue (event_id, seq, collection) "
            f"SELECT id, seq, collection FROM e WHERE kind IN ({_EMBEDDED}))"  # no id lookups
        )
    if plan.new_collections:
        made = statement.arrays(
            [(list(column), "text") for column in zip(*plan.new_collections, strict=True)]
        )
        statement.parts.append(
            "made AS (INSERT INTO collections (slug, owner, created_by) "
            f"SELECT * FROM unnest({made}))"
        )
    if plan.member_lists:
        _member_lists(statement, plan, members_before)
    for extra in also:
        statement.parts.extend(extra(statement.arrays))
    await conn.execute(statement.sql(), *statement.args)


def _anchors(statement: Statement, anchored: list[tuple[Parsed, Anchor]]) -> None:
    values = statement.arrays(
        [
            ([p.event.id for p, _ in anchored], "text"),
            ([p.collection for p, _ in anchored], "text"),
            ([a.start for _, a in anchored], "int"),
            ([a.end for _, a in anchored], "int"),
            ([a.exact for _, a in anchored], "text"),
            ([a.prefix for _, a in anchored], "text"),
            ([a.suffix for _, a in anchored], "text"),
            ([a.occurrences for _, a in anchored], "int"),
        ]
    )
    statement.parts.append(
        f"anchors AS (INSERT INTO link_anchors ({', '.join(ANCHOR_COLUMNS)}) "
        f"SELECT * FROM unnest({values}))"
    )


def membership_changes(
    plan: Plan, members_before: dict[Slug, set[PubKey]]
) -> tuple[list[tuple[Slug, PubKey]], list[tuple[Slug, PubKey]]]:
    """The (collection, key) rows the batch's member lists drop from `memberships`, and those
    they add: only what changed since the batch began."""
    dropped: list[tuple[Slug, PubKey]] = []
    added: list[tuple[Slug, PubKey]] = []
    for slug, (_, _, members) in plan.member_lists.items():
        before, after = members_before.get(slug, set()), set(members)
        dropped += [(slug, pubkey) for pubkey in sorted(before - after)]
        added += [(slug, pubkey) for pubkey in sorted(after - before)]
    return dropped, added


def _member_lists(
    statement: Statement, plan: Plan, members_before: dict[Slug, set[PubKey]]
) -> None:
    slugs = list(plan.member_lists)
    heads = statement.arrays(
        [
            (slugs, "text"),
            ([plan.member_lists[s][1] for s in slugs], "text"),
            ([plan.member_lists[s][0] for s in slugs], "bigint"),
        ]
    )
    statement.parts.append(
        f"""heads AS (
            INSERT INTO current_member_lists (collection, list_id, created_at)
            SELECT * FROM unnest({heads}){HEAD_REPLACED})"""
    )
    dropped, added = membership_changes(plan, members_before)
    if dropped:
        gone = statement.arrays(
            [([s for s, _ in dropped], "text"), ([k for _, k in dropped], "text")]
        )
        statement.parts.append(
            "dropped AS (DELETE FROM memberships m USING unnest("
            f"{gone}) AS u(collection, pubkey) "
            "WHERE m.collection = u.collection AND m.pubkey = u.pubkey)"
        )
    if added:
        new = statement.arrays([([s for s, _ in added], "text"), ([k for _, k in added], "text")])
        statement.parts.append(
            f"added AS (INSERT INTO memberships (collection, pubkey) SELECT * FROM unnest({new}))"
        )


_EMBEDDED: Final = ", ".join(str(kind) for kind in sorted(EMBEDDED_KINDS))


# Where a relation is counted in a claim_counts row (sql/008): after the claim id and collection.
_COUNTED: Final = {"SUPPORTS": 0, "QUALIFIES": 1, "REBUTS": 2}


# A claim's counts row, after its id: its collection, then SUPPORTS, QUALIFIES and REBUTS links
# and contradictions naming it.
CountRow = tuple[EventId, Slug, int, int, int, int]
COUNT_TYPES: Final = ("text", "text", "int", "int", "int", "int")
# What a collection's counts row adds, after its slug: evidence, claims, links, contradictions.
COLLECTION_TYPES: Final = ("text", "bigint", "bigint", "bigint", "bigint")
# The upserts of sql/009's rows and of the current member lists, after their VALUES or SELECT.
COLLECTION_COUNTED: Final = """
    ON CONFLICT (collection) DO UPDATE SET
        evidence = t.evidence + excluded.evidence,
        claims = t.claims + excluded.claims,
        links = t.links + excluded.links,
        contradictions = t.contradictions + excluded.contradictions"""
HEAD_REPLACED: Final = """
    ON CONFLICT (collection) DO UPDATE
    SET list_id = EXCLUDED.list_id, created_at = EXCLUDED.created_at"""


def claim_counts(plan: Plan) -> tuple[list[CountRow], list[CountRow]]:
    """Each new claim's counts row (with what the batch already adds to it), and what the
    batch adds to its targets stored before (links by relation, contradictions as findings).
    A target that is not a claim (a link, a contradiction, evidence) has no row, so adding to
    it updates nothing."""
    counted: dict[EventId, list[Any]] = {}

    def row(claim_id: EventId, collection: Slug) -> list[Any]:
        return counted.setdefault(claim_id, [collection, 0, 0, 0, 0])

    new: set[EventId] = set()
    for p in plan.accepted:
        content = p.content
        if isinstance(content, Claim):
            row(p.event.id, content.collection)
            new.add(p.event.id)
        elif isinstance(content, Link):
            row(content.to, content.collection)[1 + _COUNTED[content.relation]] += 1
        elif isinstance(content, Contradiction):
            for claim_id in content.claims:
                row(claim_id, content.collection)[4] += 1
    rows: list[CountRow] = [(claim_id, *rest) for claim_id, rest in counted.items()]
    return [r for r in rows if r[0] in new], [r for r in rows if r[0] not in new]


def _claim_counts(statement: Statement, plan: Plan) -> None:
    """`claim_counts` as two parts of the write statement: the new claims' rows inserted, with
    their seq from the events just inserted; the stored ones' updated. The update names its
    collections as a constant array too: Citus then sends it to their shards only (the join
    to the batch's rows alone would reach every shard)."""
    inserted, added = claim_counts(plan)
    if inserted:
        arrays = statement.arrays(
            [([v[i] for v in inserted], sql_type) for i, sql_type in enumerate(COUNT_TYPES)]
        )
        statement.parts.append(
            f"""claim_new AS (
                INSERT INTO claim_counts
                    (claim_id, collection, seq, supports, qualifies, rebuts, findings)
                SELECT u.id, u.collection, e.seq, u.s, u.q, u.r, u.f
                FROM unnest({arrays}) AS u(id, collection, s, q, r, f)
                JOIN e ON e.id = u.id)"""
        )
    if added:
        arrays = statement.arrays(
            [([v[i] for v in added], sql_type) for i, sql_type in enumerate(COUNT_TYPES)]
        )
        slugs = statement.arrays([(sorted({v[1] for v in added}), "text")])
        statement.parts.append(
            f"claim_counted AS ({SQL_COUNTS_ADDED.format(rows=arrays, slugs=slugs)})"
        )


# What the batch adds to claims stored before: {rows} binds COUNT_TYPES' arrays, {slugs} the
# collections they are in.
SQL_COUNTS_ADDED: Final = """
    UPDATE claim_counts AS t SET
        supports = t.supports + u.s, qualifies = t.qualifies + u.q,
        rebuts = t.rebuts + u.r, findings = t.findings + u.f
    FROM unnest({rows}) AS u(id, collection, s, q, r, f)
    WHERE t.collection = ANY({slugs}) AND t.claim_id = u.id AND t.collection = u.collection"""


# The kinds each collection's counts row counts (sql/009), in its columns' order.
_COUNTED_KINDS: Final = (Evidence, Claim, Link, Contradiction)


def collection_counts(plan: Plan) -> list[tuple[Slug, int, int, int, int]]:
    """What the batch adds to each collection's record counts: one row per collection, and a
    row for each collection it creates (every collection has one, as the migration made)."""
    added: dict[Slug, list[int]] = {slug: [0, 0, 0, 0] for slug, *_ in plan.new_collections}
    for p in plan.accepted:
        kind = type(p.content)
        if kind in _COUNTED_KINDS and p.collection is not None:
            added.setdefault(p.collection, [0, 0, 0, 0])[_COUNTED_KINDS.index(kind)] += 1
    return [(slug, e, c, ln, x) for slug, (e, c, ln, x) in added.items()]


def _collection_counts(statement: Statement, plan: Plan) -> None:
    rows = collection_counts(plan)
    if not rows:
        return
    columns = list(zip(*rows, strict=True))
    arrays = statement.arrays(
        [
            (list(column), sql_type)
            for column, sql_type in zip(columns, COLLECTION_TYPES, strict=True)
        ]
    )
    statement.parts.append(
        f"""collection_counted AS (
            INSERT INTO collection_counts AS t
                (collection, evidence, claims, links, contradictions)
            SELECT * FROM unnest({arrays}){COLLECTION_COUNTED})"""
    )


class Statement:
    """One statement of data-modifying CTEs, and the arrays it binds."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.args: list[Any] = []

    def arrays(self, columns: list[tuple[list[Any], str]]) -> str:
        """Bind each column as an array; the SQL that reads them, for `unnest(...)`."""
        placeholders = []
        for values, sql_type in columns:
            self.args.append(values)
            placeholders.append(f"${len(self.args)}::{sql_type}[]")
        return ", ".join(placeholders)

    def sql(self) -> str:
        return "WITH " + ",\n".join(self.parts) + "\nSELECT 1"


TypedRows = Callable[[Event, Any], list[tuple[str, tuple[Any, ...]]]]

# Each kind's rows in the typed tables, as (table, row) pairs whose values follow `COLUMNS`
# (the seq comes from the events just inserted).
TYPED_ROWS: Final[dict[type, TypedRows]] = {
    Evidence: lambda e, c: [
        ("evidence", (e.id, c.collection, e.pubkey, c.title, c.url, c.source, c.text))
    ],
    Claim: lambda e, c: [("claims", (e.id, c.collection, e.pubkey, c.text))],
    Link: lambda e, c: [
        ("links", (e.id, c.collection, e.pubkey, c.from_, c.to, c.relation, c.quote, c.reason))
    ],
    Contradiction: lambda e, c: [
        ("contradictions", (e.id, c.collection, e.pubkey, c.reason)),
        *(("contradiction_claims", (e.id, claim, c.collection)) for claim in c.claims),
    ],
    Members: lambda e, c: [
        ("member_lists", (e.id, c.collection, e.pubkey, e.created_at, json.dumps(c.members)))
    ],
    Profile: lambda e, c: [
        ("profiles", (e.id, e.pubkey, e.created_at, c.name, c.about, c.picture))
    ],
    Terms: lambda e, c: [("terms_signatures", (e.id, e.pubkey, c.version, c.sha256))],
}

# Each typed table's columns but `seq`, with the SQL type of the array that carries them.
COLUMNS: Final[dict[str, list[tuple[str, str]]]] = {
    "evidence": [
        *(("id", "text"), ("collection", "text"), ("pubkey", "text")),
        *(("title", "text"), ("url", "text"), ("source", "text"), ("text", "text")),
    ],
    "claims": [("id", "text"), ("collection", "text"), ("pubkey", "text"), ("text", "text")],
    "links": [
        *(("id", "text"), ("collection", "text"), ("pubkey", "text"), ("from_id", "text")),
        *(("to_id", "text"), ("relation", "text"), ("quote", "text"), ("reason", "text")),
    ],
    "contradictions": [
        ("id", "text"),
        ("collection", "text"),
        ("pubkey", "text"),
        ("reason", "text"),
    ],
    "contradiction_claims": [
        ("contradiction_id", "text"),
        ("claim_id", "text"),
        ("collection", "text"),
    ],
    "member_lists": [
        *(("id", "text"), ("collection", "text"), ("pubkey", "text")),
        *(("created_at", "bigint"), ("members", "text")),
    ],
    "profiles": [
        *(("id", "text"), ("pubkey", "text"), ("created_at", "bigint")),
        *(("name", "text"), ("about", "text"), ("picture", "text")),
    ],
    "terms_signatures": [
        ("id", "text"),
        ("pubkey", "text"),
        ("version", "text"),
        ("sha256", "text"),
    ],
}
# Values that are not the array's element as it is: a member list travels as JSON text.
_VALUE: Final = {"members": "ARRAY(SELECT json_array_elements_text(u.members::json))"}
