"""What a publish does in the database, inside its transaction: lock what the batch touches,
read the snapshot the rules judge it against, and write what they accept.

Each step is one statement, so a publish costs few round trips whatever its batch holds: begin,
lock (one per collection), snapshot, (one per quoted evidence stored before,) write, notify,
commit. Other parts of the ledger that keep rows per collection (the transparency log, the
claims' keys) read with the snapshot and write with the write (`also`, `Rows`), rather than in
round trips of their own. The locks come in statements of their own: in READ COMMITTED a
statement reads the ledger as it stood when the statement began, so a snapshot read in the
statement that takes the locks could miss what the batch it waited for had written.

On a Citus cluster the same steps run with the write as one plain statement per table
(`tms.ledger.routed`), every statement naming the collections it is about so that Citus sends
it to their worker; what is written is the same, computed by the functions here. Either way,
the commit is announced afterwards by `notify`, from the `Written` ranges the write returns.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tms.ledger.anchors import ANCHOR_COLUMNS, anchor_row
from tms.nostr.events import compact_json
from tms.rules.anchors import Verdict
from tms.rules.kinds import KINDS, Columns, Table, embedded_kinds
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
from tms.types import KIND_MEMBERS, UNSCOPED, EventId, PubKey, Slug

# What committed, for whoever listens (the relay's live subscriptions, on every server process):
# one notification per collection the write stored events in (null for profiles and terms),
# holding the first and last `seq` it gave them, and whether it holds a member list (`notify`,
# in the publish's transaction after its write, whichever way it wrote). PostgreSQL delivers it
# only once the transaction commits, never for one that rolls back, and in commit order; and
# since every collection's events (and all profiles and terms) are written under one lock, each
# one's `seq` grows in commit order, so the feed can catch up from the last `seq` it saw of
# each (tms.ledger.feed).
CHANNEL: Final = "tms_events"
_SQL_NOTIFY: Final = f"SELECT count(pg_notify('{CHANNEL}', n)) FROM unnest($1::text[]) AS n"

# What a write stored, by collection (None: profiles and terms): (collection, first seq, last
# seq, whether a member list is among them), what `notify` announces.
Written = list[tuple[Slug | None, int, int, bool]]

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


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows another part of the ledger stores with a publish's write, in its transaction (the
    transparency log's, the claims' keys): inserted by the one statement (`write`) or by a
    statement of their own on Citus (`tms.ledger.routed`). `suffix` follows the rows (an
    `ON CONFLICT` clause)."""

    table: str
    columns: Columns  # (name, SQL type), in the rows' order
    rows: list[tuple[Any, ...]]
    suffix: str = ""


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
    batch of none gets null): each statement about one collection's rows, so that on Citus it
    runs on that collection's worker (such an expression over collections on several workers
    is more than Citus plans). The collections are locked, so what the extra statements read is
    what the first one would have."""
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
    also: Sequence[Rows] = (),
) -> Written:
    """Insert the accepted events, their typed rows, their links' anchors, their places in the
    embedding queue, the collections they create, the member lists they make current and the
    rows `also` holds, in one statement: each part a data-modifying CTE over arrays (`unnest`),
    the typed rows joined to the events' new `seq`. `members_before`: each collection's
    members when the batch began, so that only the keys a new list adds or drops are
    written. Returns what it stored, by collection (`notify`)."""
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
    for table, records in typed_rows(plan).items():
        columns = table.columns
        names = ", ".join(name for name, _ in columns)
        arrays = statement.arrays(
            [([r[i] for r in records], sql_type) for i, (_, sql_type) in enumerate(columns)]
        )
        if not table.sequenced:  # rows beside the event's (a contradiction's claims): no seq
            select = f"SELECT {names} FROM unnest({arrays}) AS u({names})"
            into = names
        else:
            values = ", ".join(
                VALUE[name].format(f"u.{name}") if name in VALUE else f"u.{name}"
                for name, _ in columns[1:]
            )
            select = (
                f"SELECT u.id, e.seq, {values} FROM unnest({arrays}) AS u({names}) "
                "JOIN e ON e.id = u.id"
            )
            into = names.replace("id", "id, seq", 1)
        statement.parts.append(f"t_{table.name} AS (INSERT INTO {table.name} ({into}) {select})")
    anchored = anchor_rows(plan)
    if anchored:  # where each new link's quote sits in its evidence (sql/005, sql/012)
        statement.insert("anchors", Rows("link_anchors", ANCHOR_TYPES, anchored))
    _claim_counts(statement, plan)
    counts = collection_counts(plan)
    if counts.rows:
        statement.insert("collection_counted", counts)
    embedded = embedded_kinds()
    if any(x.kind in embedded for x in events):  # vectors come after commit (search)
        statement.parts.append(
            "queue AS (INSERT INTO embedding_queue (event_id, seq, collection) "  # no id lookups
            f"SELECT id, seq, collection FROM e WHERE kind IN ({', '.join(map(str, embedded))}))"
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
    for n, extra in enumerate(also):
        if extra.rows:
            statement.insert(f"also_{n}", extra)
    statement.result = _SQL_WRITTEN
    rows = await conn.fetch(statement.sql(), *statement.args)
    return [
        (None if r["collection"] == UNSCOPED else r["collection"], r["lo"], r["hi"], r["lists"])
        for r in rows
    ]


# The write statement's own query: what it stored, by collection, in the order of first seq.
_SQL_WRITTEN: Final = f"""
    SELECT collection, min(seq) AS lo, max(seq) AS hi, bool_or(kind = {KIND_MEMBERS}) AS lists
    FROM e GROUP BY collection ORDER BY lo"""


async def notify(conn: Connection, written: Written) -> None:
    """Announce what a write stored (`CHANNEL`), in the writing transaction: delivered when it
    commits, never if it rolls back."""
    if written:
        await conn.fetchval(
            _SQL_NOTIFY,
            [
                json.dumps([slug, lo, hi, lists], separators=(",", ":"))
                for slug, lo, hi, lists in written
            ],
        )


def written_by_seq(plan: Plan, seq: Mapping[EventId, int]) -> Written:
    """`Written` for a batch whose events' `seq` is known here (`tms.ledger.routed`)."""
    ranges: dict[Slug | None, list[Any]] = {}
    for p in plan.accepted:
        n = seq[p.event.id]
        got = ranges.setdefault(p.collection, [n, n, False])
        got[0], got[1] = min(got[0], n), max(got[1], n)
        got[2] = got[2] or p.event.kind == KIND_MEMBERS
    return sorted(
        ((slug, lo, hi, lists) for slug, (lo, hi, lists) in ranges.items()), key=lambda r: r[1]
    )


def typed_rows(plan: Plan) -> dict[Table, list[tuple[Any, ...]]]:
    """The accepted events' rows in their kinds' typed tables (`Kind.tables`, `Kind.rows`),
    each row in its table's columns' order (`seq` left out: it is the event's)."""
    rows: dict[Table, list[tuple[Any, ...]]] = {}
    for p in plan.accepted:
        kind = KINDS[p.event.kind]
        tables = {table.name: table for table in kind.tables}
        for name, row in kind.rows(p.event, p.content) if kind.rows is not None else ():
            rows.setdefault(tables[name], []).append(row)
    return rows


# The columns of `link_anchors` (`ANCHOR_COLUMNS`) with their SQL types.
ANCHOR_TYPES: Final[Columns] = tuple(
    zip(
        ANCHOR_COLUMNS,
        ("text", "text", "int", "int", "text", "text", "text", "int", "text", "text"),
        strict=True,
    )
)


def anchor_rows(plan: Plan) -> list[tuple[Any, ...]]:
    """Each new link's anchor, as `ANCHOR_TYPES`' columns."""
    return [
        (p.event.id, p.collection, *anchor_row(plan.anchors[p.event.id]))
        for p in plan.accepted
        if p.event.id in plan.anchors
    ]


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


def member_heads(plan: Plan) -> Rows:
    """The current member list of each collection whose list the batch replaces."""
    heads = [
        (slug, list_id, created_at) for slug, (created_at, list_id, _) in plan.member_lists.items()
    ]
    return Rows("current_member_lists", _HEAD_TYPES, heads, _HEAD_REPLACED)


_HEAD_TYPES: Final[Columns] = (
    *(("collection", "text"), ("list_id", "text"), ("created_at", "bigint")),
)
_HEAD_REPLACED: Final = """
    ON CONFLICT (collection) DO UPDATE
    SET list_id = EXCLUDED.list_id, created_at = EXCLUDED.created_at"""


def _member_lists(
    statement: Statement, plan: Plan, members_before: dict[Slug, set[PubKey]]
) -> None:
    statement.insert("heads", member_heads(plan))
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


# A claim_counts row's counted columns (sql/008), in order: what `Kind.claim_counts` names.
_CLAIM_COUNTS: Final = ("supports", "qualifies", "rebuts", "findings")
# A claim's counts row: its id, its collection, then its counted columns.
CountRow = tuple[EventId, Slug, int, int, int, int]
COUNT_TYPES: Final[Columns] = (
    *(("claim_id", "text"), ("collection", "text")),
    *((column, "int") for column in _CLAIM_COUNTS),
)


def claim_counts(plan: Plan) -> tuple[list[CountRow], list[CountRow]]:
    """Each new claim's counts row (with what the batch already adds to it), and what the
    batch adds to the claims it names that were stored before (links by relation,
    contradictions as findings: `Kind.claim_counts`). A target that is not a claim (a link, a
    contradiction, evidence) has no row, so adding to it updates nothing."""
    counted: dict[EventId, list[Any]] = {}
    new: set[EventId] = set()
    for p in plan.accepted:
        counts = KINDS[p.event.kind].claim_counts
        if counts is None or p.collection is None:
            continue
        for claim_id, column in counts(p.event.id, p.content):
            row = counted.setdefault(claim_id, [p.collection, 0, 0, 0, 0])
            if column is None:  # the claim itself: its row is new
                new.add(claim_id)
            else:
                row[1 + _CLAIM_COUNTS.index(column)] += 1
    rows: list[CountRow] = [(claim_id, *rest) for claim_id, rest in counted.items()]
    return [r for r in rows if r[0] in new], [r for r in rows if r[0] not in new]


def _claim_counts(statement: Statement, plan: Plan) -> None:
    """`claim_counts` as two parts of the write statement: the new claims' rows inserted, with
    their seq from the events just inserted; the stored ones' updated."""
    inserted, added = claim_counts(plan)
    if inserted:
        arrays = statement.arrays(
            [([v[i] for v in inserted], sql_type) for i, (_, sql_type) in enumerate(COUNT_TYPES)]
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
            [([v[i] for v in added], sql_type) for i, (_, sql_type) in enumerate(COUNT_TYPES)]
        )
        slugs = statement.arrays([(sorted({v[1] for v in added}), "text")])
        statement.parts.append(
            f"claim_counted AS ({SQL_COUNTS_ADDED.format(rows=arrays, slugs=slugs)})"
        )


# What a batch adds to claims stored before: {rows} binds COUNT_TYPES' arrays, {slugs} the
# collections they are in. The update names its collections as a constant array too: Citus
# then sends it to their shards only (the join to the batch's rows alone would reach every
# shard).
SQL_COUNTS_ADDED: Final = """
    UPDATE claim_counts AS t SET
        supports = t.supports + u.s, qualifies = t.qualifies + u.q,
        rebuts = t.rebuts + u.r, findings = t.findings + u.f
    FROM unnest({rows}) AS u(id, collection, s, q, r, f)
    WHERE t.collection = ANY({slugs}) AND t.claim_id = u.id AND t.collection = u.collection"""


# A collection_counts row's columns (sql/009), in order: what `Kind.counted` names.
_COLLECTION_COUNTS: Final = ("evidence", "claims", "links", "contradictions")
_COLLECTION_TYPES: Final[Columns] = (
    ("collection", "text"),
    *((column, "bigint") for column in _COLLECTION_COUNTS),
)
# The upsert that adds a batch's counts to what a collection's row holds.
_COLLECTION_COUNTED: Final = """
    ON CONFLICT (collection) DO UPDATE SET
        evidence = t.evidence + excluded.evidence,
        claims = t.claims + excluded.claims,
        links = t.links + excluded.links,
        contradictions = t.contradictions + excluded.contradictions"""


def collection_counts(plan: Plan) -> Rows:
    """What the batch adds to each collection's record counts: one row per collection, and a
    row for each collection it creates (every collection has one, as the migration made)."""
    added: dict[Slug, list[int]] = {slug: [0, 0, 0, 0] for slug, *_ in plan.new_collections}
    for p in plan.accepted:
        column = KINDS[p.event.kind].counted
        if column is not None and p.collection is not None:
            added.setdefault(p.collection, [0, 0, 0, 0])[_COLLECTION_COUNTS.index(column)] += 1
    rows = [(slug, *counts) for slug, counts in added.items()]
    return Rows("collection_counts AS t", _COLLECTION_TYPES, rows, _COLLECTION_COUNTED)


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

    def insert(self, name: str, rows: Rows) -> None:
        """A CTE named `name` inserting `rows`."""
        arrays = self.arrays(
            [([r[i] for r in rows.rows], sql_type) for i, (_, sql_type) in enumerate(rows.columns)]
        )
        names = ", ".join(column for column, _ in rows.columns)
        self.parts.append(
            f"{name} AS (INSERT INTO {rows.table} ({names}) "
            f"SELECT * FROM unnest({arrays}){rows.suffix})"
        )

    def sql(self) -> str:
        return "WITH " + ",\n".join(self.parts) + "\n" + self.result


# Values that are not the column's bound value as it is: a member list is JSON text in its kind's
# row (`Kind.rows`). The one statement turns it into the column's text[] by SQL over the bound
# value (`VALUE`, `{}`); a plain INSERT ... VALUES (tms.ledger.routed), where Citus allows no
# subquery, binds it decoded, as that SQL type (`DECODED`).
VALUE: Final = {"members": "ARRAY(SELECT json_array_elements_text({}::json))"}
DECODED: Final[dict[str, tuple[str, Callable[[Any], Any]]]] = {"members": ("text[]", json.loads)}
