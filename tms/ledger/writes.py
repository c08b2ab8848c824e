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
from tms.nostr.events import compact_json
from tms.rules.anchors import Anchor, Verdict
from tms.rules.kinds import KINDS, Table, embedded_kinds
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
from tms.types import KIND_CLAIM, KIND_MEMBERS, EventId, PubKey, Slug

# What committed, for whoever listens (the relay's live subscriptions, on every server process):
# one notification per collection the statement wrote (null for profiles and terms), holding
# the first and last `seq` it gave them, and whether it holds a member list. PostgreSQL
# delivers it only once the transaction commits, never for one that rolls back, and in commit
# order; and since every collection's events (and all profiles and terms) are written under
# one lock, each one's `seq` grows in commit order, so the feed can catch up from the last
# `seq` it saw of each (tms.ledger.feed).
CHANNEL: Final = "tms_events"
NOTIFY_SQL: Final = f"""
    SELECT count(pg_notify('{CHANNEL}', json_build_array(collection, lo, hi, lists)::text))
    FROM (SELECT collection, min(seq) AS lo, max(seq) AS hi,
                 bool_or(kind = {KIND_MEMBERS}) AS lists
          FROM e GROUP BY collection) AS g"""

_UNSCOPED_LOCK: Final = "~unscoped"  # one lock for profiles and terms, which name no collection

# Sorted, so that two batches never wait on each other in a cycle.
_SQL_LOCK: Final = """
    SELECT count(pg_advisory_xact_lock(hashtextextended(k, 7)))
    FROM (SELECT unnest($1::text[]) AS k ORDER BY 1) AS keys"""

# $1 the batch's ids, $2 its signers, $3 its collections, $4 the ids it cites, $5 and $6 the
# current terms. One JSON document, parsed in Python: one round trip for all of it.
_SQL_SNAPSHOT: Final = """
    SELECT json_build_object(
        'stored', (SELECT json_agg(id) FROM events WHERE id = ANY($1::text[])),
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
                 WHERE id = ANY($4::text[])),
        'profiles', (
            SELECT json_agg(json_build_array(pubkey, created_at, id)) FROM (
                SELECT DISTINCT ON (pubkey) pubkey, created_at, id FROM profiles
                WHERE pubkey = ANY($2::text[]) ORDER BY pubkey, created_at DESC, id) AS p){also}
    )::text"""
SQL_TEXT: Final = "SELECT text FROM evidence WHERE id = $1"

OffLoop = Callable[..., Awaitable[Any]]  # runs a CPU-bound function off the event loop
# Binds columns as arrays in the write statement; returns the SQL that reads them (`unnest`).
Binder = Callable[[list[tuple[list[Any], str]]], str]
# More data-modifying CTEs for the write statement, given its binder.
Extra = Callable[[Binder], list[str]]


def lock_keys(batch: Sequence[Parsed]) -> tuple[str, ...]:
    """What a batch locks: each collection it names, and one key for all profiles and terms."""
    return tuple(sorted({p.collection or _UNSCOPED_LOCK for p in batch}))


async def lock(conn: Connection, batch: Sequence[Parsed]) -> None:
    """Serialize batches that touch the same collection (or any profile or terms), so that two
    racing to create one collection end with one owner and a batch sent twice at once is
    stored once."""
    await hold_locks(conn, lock_keys(batch))


async def hold_locks(conn: Connection, keys: Sequence[str]) -> None:
    """Take these lock keys (collections' slugs) until the transaction ends: also for work on
    a collection outside a publish (building its log) that must not interleave with one."""
    await conn.fetchval(_SQL_LOCK, list(keys))


async def snapshot(
    conn: Connection, batch: Sequence[Parsed], also: Mapping[str, str] | None = None
) -> tuple[Snapshot, dict[str, Any]]:
    """The ledger as the batch finds it, limited to what the batch touches; and, under each
    name in `also`, the JSON value of its SQL expression over `{collections}` (the batch's
    collections, a text[]), read in the same round trip."""
    terms = current_terms()
    extra = "".join(
        f",\n        '{name}', {sql.format(collections='$3::text[]')}"
        for name, sql in (also or {}).items()
    )
    document = await conn.fetchval(
        _SQL_SNAPSHOT.format(also=extra),
        [p.event.id for p in batch],
        sorted({p.event.pubkey for p in batch}),
        sorted({p.collection for p in batch if p.collection is not None}),
        # Batch ids stay in: an event re-sent in the batch may be stored already (and
        # skipped), and the events after it may cite it.
        sorted(referenced_ids(batch)),
        terms["version"],
        terms["sha256"],
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
    return s, {name: found[name] for name in also or {}}


async def quotes(conn: Connection, batch: Sequence[Parsed], run: OffLoop) -> dict[EventId, Verdict]:
    """`Snapshot.quotes`: every link's quote looked for in its evidence, one evidence at a time
    (read, normalized off the event loop by `run`, then let go), so memory stays bounded by
    the largest document, not by how many the batch quotes. Each found quote comes back with
    its anchor."""
    own = batch_texts(batch)
    found: dict[EventId, Verdict] = {}
    for evidence_id, quoted in quotes_by_evidence(batch).items():
        text = own.get(evidence_id)
        if text is None:
            text = await conn.fetchval(SQL_TEXT, evidence_id)
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
            ([p.collection for p in plan.accepted], "text"),
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
    rows: dict[Table, list[tuple[Any, ...]]] = {}
    for p in plan.accepted:
        kind = KINDS[p.event.kind]
        tables = {table.name: table for table in kind.tables}
        for name, row in kind.rows(p.event, p.content) if kind.rows is not None else ():
            rows.setdefault(tables[name], []).append(row)
    for table, records in rows.items():
        columns = table.columns
        names = ", ".join(name for name, _ in columns)
        arrays = statement.arrays(
            [([r[i] for r in records], sql_type) for i, (_, sql_type) in enumerate(columns)]
        )
        if not table.sequenced:  # rows beside the event's (a contradiction's claims): no seq
            select = f"SELECT {names} FROM unnest({arrays}) AS u({names})"
            into = names
        else:
            values = ", ".join(_VALUE.get(name, f"u.{name}") for name, _ in columns[1:])
            select = (
                f"SELECT u.id, e.seq, {values} FROM unnest({arrays}) AS u({names}) "
                "JOIN e ON e.id = u.id"
            )
            into = names.replace("id", "id, seq", 1)
        statement.parts.append(f"t_{table.name} AS (INSERT INTO {table.name} ({into}) {select})")
    anchored = [(p, plan.anchors[p.event.id]) for p in plan.accepted if p.event.id in plan.anchors]
    if anchored:  # where each new link's quote sits in its evidence (sql/005)
        _anchors(statement, anchored)
    _claim_counts(statement, plan)
    _collection_counts(statement, plan)
    embedded = embedded_kinds()
    if any(x.kind in embedded for x in events):  # vectors come after commit (search)
        statement.parts.append(
            "queue AS (INSERT INTO embedding_queue (event_id, seq) "  # by kind: no id lookups
            f"SELECT id, seq FROM e WHERE kind IN ({', '.join(map(str, embedded))}))"
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
    statement.result = NOTIFY_SQL
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
            ([a.context_before for _, a in anchored], "text"),
            ([a.context_after for _, a in anchored], "text"),
        ]
    )
    statement.parts.append(
        f"anchors AS (INSERT INTO link_anchors ({', '.join(ANCHOR_COLUMNS)}) "
        f"SELECT * FROM unnest({values}))"
    )


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
            SELECT * FROM unnest({heads})
            ON CONFLICT (collection) DO UPDATE
            SET list_id = EXCLUDED.list_id, created_at = EXCLUDED.created_at)"""
    )
    dropped: list[tuple[str, str]] = []
    added: list[tuple[str, str]] = []
    for slug, (_, _, members) in plan.member_lists.items():
        before, after = members_before.get(slug, set()), set(members)
        dropped += [(slug, pubkey) for pubkey in sorted(before - after)]
        added += [(slug, pubkey) for pubkey in sorted(after - before)]
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


# A claim_counts row's counted columns (sql/008), in order: what `Kind.claim_counts` names.
_CLAIM_COUNTS: Final = ("supports", "qualifies", "rebuts", "findings")


def _claim_counts(statement: Statement, plan: Plan) -> None:
    """Each new claim's counts row, and what the batch adds to the claims it names (links by
    relation, contradictions as findings: `Kind.claim_counts`): one row per claim, added to
    what stands. Targets
    that are not claims (links, contradictions, evidence) are left out by the SQL, which knows
    them: a claim stored before, or one this statement inserts."""
    counted: dict[EventId, list[Any]] = {}

    def row(claim_id: EventId, collection: Slug) -> list[Any]:
        return counted.setdefault(claim_id, [collection, 0, 0, 0, 0])

    for p in plan.accepted:
        counts = KINDS[p.event.kind].claim_counts
        if counts is None or p.collection is None:
            continue
        for claim_id, column in counts(p.event.id, p.content):
            counted_row = row(claim_id, p.collection)
            if column is not None:
                counted_row[1 + _CLAIM_COUNTS.index(column)] += 1
    if not counted:
        return
    values = [(claim_id, *rest) for claim_id, rest in counted.items()]
    types = ("text", "text", "int", "int", "int", "int")
    arrays = statement.arrays(
        [([v[i] for v in values], sql_type) for i, sql_type in enumerate(types)]
    )
    statement.parts.append(
        f"""claim_counted AS (
            INSERT INTO claim_counts AS t
                (claim_id, collection, seq, supports, qualifies, rebuts, findings)
            SELECT * FROM (
                SELECT u.id, u.collection,
                       -- a new claim's seq from this statement's insert, else the stored
                       -- claim's by its key (a subquery: one index look-up, never a scan)
                       coalesce(e.seq, (SELECT c.seq FROM claims c
                                        WHERE c.id = u.id AND c.collection = u.collection))
                           AS seq,
                       u.s, u.q, u.r, u.f
                FROM unnest({arrays}) AS u(id, collection, s, q, r, f)
                LEFT JOIN e ON e.id = u.id AND e.kind = {KIND_CLAIM}) AS r
            WHERE r.seq IS NOT NULL  -- targets that are not claims count for nothing
            ON CONFLICT (claim_id) DO UPDATE SET
                supports = t.supports + excluded.supports,
                qualifies = t.qualifies + excluded.qualifies,
                rebuts = t.rebuts + excluded.rebuts,
                findings = t.findings + excluded.findings)"""
    )


# A collection_counts row's columns (sql/009), in order: what `Kind.counted` names.
_COLLECTION_COUNTS: Final = ("evidence", "claims", "links", "contradictions")


def _collection_counts(statement: Statement, plan: Plan) -> None:
    """What the batch adds to each collection's record counts: one row per collection, and a
    row for each collection it creates (every collection has one, as the migration made)."""
    added: dict[Slug, list[int]] = {slug: [0, 0, 0, 0] for slug, *_ in plan.new_collections}
    for p in plan.accepted:
        column = KINDS[p.event.kind].counted
        if column is not None and p.collection is not None:
            added.setdefault(p.collection, [0, 0, 0, 0])[_COLLECTION_COUNTS.index(column)] += 1
    if not added:
        return
    columns = list(zip(*((slug, *counts) for slug, counts in added.items()), strict=True))
    types = ("text", "bigint", "bigint", "bigint", "bigint")
    arrays = statement.arrays(
        [(list(column), sql_type) for column, sql_type in zip(columns, types, strict=True)]
    )
    statement.parts.append(
        f"""collection_counted AS (
            INSERT INTO collection_counts AS t
                (collection, evidence, claims, links, contradictions)
            SELECT * FROM unnest({arrays})
            ON CONFLICT (collection) DO UPDATE SET
                evidence = t.evidence + excluded.evidence,
                claims = t.claims + excluded.claims,
                links = t.links + excluded.links,
                contradictions = t.contradictions + excluded.contradictions)"""
    )


class Statement:
    """One statement of data-modifying CTEs, and the arrays it binds."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.args: list[Any] = []
        self.result = "SELECT 1"  # the statement's own query, after its CTEs

    def arrays(self, columns: list[tuple[list[Any], str]]) -> str:
        """Bind each column as an array; the SQL that reads them, for `unnest(...)`."""
        placeholders = []
        for values, sql_type in columns:
            self.args.append(values)
            placeholders.append(f"${len(self.args)}::{sql_type}[]")
        return ", ".join(placeholders)

    def sql(self) -> str:
        return "WITH " + ",\n".join(self.parts) + "\n" + self.result


# Values that are not the array's element as it is: a member list travels as JSON text.
_VALUE: Final = {"members": "ARRAY(SELECT json_array_elements_text(u.members::json))"}
