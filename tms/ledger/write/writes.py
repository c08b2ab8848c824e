"""What a publish does in the database around the rules' judgment: take the locks, write what
the rules accept, and announce what it wrote.

Each step is one statement, so a publish costs few round trips whatever its batch holds. On a
single PostgreSQL, two before its answer: the locks and the snapshot in one
(`tms.ledger.write.snapshots.snapshot` with `lock`: session-level advisory locks taken by a
function whose next statement reads with a fresh snapshot), then the write, one statement that
commits on its own (atomic as any statement, durable when it returns, announcing what it
stored in it), with one more per quoted evidence stored before; the locks are let go after the
answer (`session_locks`). The lock keys are the same as a transaction's
(`tms.ledger.locks.hold_locks`), so publishes and the log's building wait for each other
whichever kind they take. What the write stores is computed by `tms.ledger.write.rows`; other
parts of the ledger that keep rows per collection (the transparency log, the claims' keys) hand
theirs in as `Rows`, stored by the same statement rather than in round trips of their own.

A publish that may record the log's origin (`TransparencyLog.records_origin`) runs as one
transaction instead (`locked_transaction`: BEGIN with the locks, snapshot, write, COMMIT), so
that the origin is recorded only with the checkpoint it names. So does a publish on a Citus
cluster, with the write as one plain statement per table (`tms.ledger.write.routed`), every
statement naming the collections it is about so that Citus sends it to their worker; what is
written is the same rows, and the commit is announced by `notify`, from the `Written` ranges
the write returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Final

from tms.ledger.locks import hold_locks
from tms.ledger.statement import Rows, Statement
from tms.ledger.write.rows import (
    ANCHOR_TYPES,
    VALUE,
    anchor_rows,
    claim_counts,
    collection_counts,
    count_types,
    counts_added_sql,
    member_heads,
    membership_changes,
    typed_rows,
)
from tms.nostr.events import compact_json
from tms.rules.kinds import embedded_kinds
from tms.rules.publish import Parsed, Plan
from tms.store.database import Connection
from tms.types import KIND_MEMBERS, UNSCOPED, PubKey, Slug

# What committed, for whoever listens (the relay's live subscriptions, on every server process):
# one notification per collection the write stored events in (null for profiles and terms),
# holding the first and last `seq` it gave them, and whether it holds a member list (`notify`,
# in the publish's transaction after its write, whichever way it wrote). PostgreSQL delivers it
# only once the transaction commits, never for one that rolls back, and in commit order; and
# since every collection's events (and all profiles and terms) are written under one lock, each
# one's `seq` grows in commit order, so the feed can catch up from the last `seq` it saw of
# each (tms.ledger.read.feed).
CHANNEL: Final = "tms_events"
_SQL_NOTIFY: Final = f"SELECT count(pg_notify('{CHANNEL}', n)) FROM unnest($1::text[]) AS n"

# What a write stored, by collection (None: profiles and terms): (collection, first seq, last
# seq, whether a member list is among them), what `notify` announces.
Written = list[tuple[Slug | None, int, int, bool]]


# A single PostgreSQL's publish transaction begins with its locks, in the one message: `BEGIN`
# and a lock per key, so that it costs a round trip less. The keys are bound as literals (a
# message of several statements takes no parameters): slugs and UNSCOPED only, checked.
_SQL_BEGIN: Final = "BEGIN"
_SQL_LOCK_LITERAL: Final = "SELECT pg_advisory_xact_lock(hashtextextended('{key}', 7))"
_LOCK_KEY: Final = re.compile(r"[a-z0-9~_.-]{1,64}")
_SQL_UNLOCK: Final = "SELECT pg_advisory_unlock_all()"


@contextlib.asynccontextmanager
async def locked_transaction(
    conn: Connection, keys: Sequence[str], *, routed: bool
) -> AsyncIterator[None]:
    """A transaction holding these lock keys (`hold_locks`) from its first statement, committed
    when the block ends and rolled back when it raises. On a single PostgreSQL, `BEGIN` and the
    locks go in one message; on Citus (`routed`), the locks are statements of their own, each
    routed to its collection's worker."""
    if routed or not all(_LOCK_KEY.fullmatch(key) for key in keys):
        async with conn.transaction():
            await hold_locks(conn, keys)
            yield
        return
    locks = [_SQL_LOCK_LITERAL.format(key=key) for key in sorted(keys)]
    await conn.execute(";\n".join([_SQL_BEGIN, *locks]))
    try:
        yield
    except BaseException:
        try:
            await conn.execute("ROLLBACK")
        except BaseException:  # the connection is broken, or still busy: never reuse it
            conn.terminate()
        raise
    await conn.execute("COMMIT")


@contextlib.asynccontextmanager
async def session_locks(conn: Connection) -> AsyncIterator[None]:
    """Every session-level advisory lock `conn` takes in the block (the snapshot's, with
    `lock`) let go when it ends, whatever happened; a connection that cannot be told so is
    closed, which lets them go as surely, so that none is ever left holding one."""
    try:
        yield
    finally:
        try:
            await conn.execute(_SQL_UNLOCK)
        except asyncio.CancelledError:
            conn.terminate()
            raise
        except Exception:  # the block's outcome stands (a write committed stays committed)
            conn.terminate()


def collections(batch: Sequence[Parsed]) -> list[Slug]:
    """The collections a batch names, sorted (profiles and terms name none)."""
    return sorted({p.collection for p in batch if p.collection is not None})


async def write(
    conn: Connection,
    plan: Plan,
    members_before: dict[Slug, set[PubKey]],
    also: Sequence[Rows] = (),
    *,
    announce: bool = False,
    queue_vectors: bool = True,
) -> Written:
    """Insert the accepted events, their typed rows, their links' anchors, their places in the
    embedding queue, the collections they create, the member lists they make current and the
    rows `also` holds, in one statement: each part a data-modifying CTE over bound columns
    (`Statement.source`), the typed rows joined to the events' new `seq`. `members_before`:
    each collection's members when the batch began, so that only the keys a new list adds or
    drops are written. Returns what it stored, by collection (`notify`); with `announce`, the
    statement has announced it already, as `notify` would (a round trip less)."""
    statement = Statement()
    events = [p.event for p in plan.accepted]
    e = statement.source(
        [
            ([x.id for x in events], "text"),
            ([x.pubkey for x in events], "text"),
            ([x.created_at for x in events], "bigint"),
            ([x.kind for x in events], "int"),
            ([compact_json(x.tags) for x in events], "text"),
            ([x.content for x in events], "text"),
            ([x.sig for x in events], "text"),
            ([p.collection or UNSCOPED for p in plan.accepted], "text"),
        ],
        ordinality=True,
    )
    statement.parts.append(
        f"""e AS (
            INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
            SELECT id, pubkey, created_at, kind, tags, content, sig, collection
            FROM {e}
                 AS u(id, pubkey, created_at, kind, tags, content, sig, collection, position)
            ORDER BY position
            RETURNING id, seq, kind, collection)"""
    )
    for table, records in typed_rows(plan).items():
        columns = table.columns
        names = ", ".join(name for name, _ in columns)
        source = statement.source(
            [([r[i] for r in records], sql_type) for i, (_, sql_type) in enumerate(columns)]
        )
        if not table.sequenced:  # rows beside the event's (a contradiction's claims): no seq
            select = f"SELECT {names} FROM {source} AS u({names})"
            into = names
        else:
            values = ", ".join(
                VALUE[name].format(f"u.{name}") if name in VALUE else f"u.{name}"
                for name, _ in columns[1:]
            )
            select = (
                f"SELECT u.id, e.seq, {values} FROM {source} AS u({names}) JOIN e ON e.id = u.id"
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
    if queue_vectors and any(x.kind in embedded for x in events):  # vectors after commit
        statement.parts.append(
            "queue AS (INSERT INTO embedding_queue (event_id, seq, collection) "  # no id lookups
            f"SELECT id, seq, collection FROM e WHERE kind IN ({', '.join(map(str, embedded))}))"
        )
    if plan.new_collections:
        made = statement.source(
            [(list(column), "text") for column in zip(*plan.new_collections, strict=True)]
        )
        statement.parts.append(
            f"made AS (INSERT INTO collections (slug, owner, created_by) SELECT * FROM {made} AS u)"
        )
    if plan.member_lists:
        _member_lists(statement, plan, members_before)
    for n, extra in enumerate(also):
        if extra.rows:
            statement.insert(f"also_{n}", extra)
    statement.result = _SQL_ANNOUNCED if announce else _SQL_WRITTEN
    rows = await conn.fetch(statement.sql(), *statement.args)
    return [
        (None if r["collection"] == UNSCOPED else r["collection"], r["lo"], r["hi"], r["lists"])
        for r in rows
    ]


# The write statement's own query: what it stored, by collection, in the order of first seq.
_SQL_WRITTEN: Final = f"""
    SELECT collection, min(seq) AS lo, max(seq) AS hi, bool_or(kind = {KIND_MEMBERS}) AS lists
    FROM e GROUP BY collection ORDER BY lo"""


# The same, each row announced as `notify` announces it (pg_notify in the writing transaction:
# delivered at commit), in the order of first seq.
_SQL_ANNOUNCED: Final = f"""
    SELECT w.*, pg_notify('{CHANNEL}', json_build_array(
        nullif(w.collection, '{UNSCOPED}'), w.lo, w.hi, w.lists)::text) AS announced
    FROM ({_SQL_WRITTEN}) AS w"""


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


def _member_lists(
    statement: Statement, plan: Plan, members_before: dict[Slug, set[PubKey]]
) -> None:
    statement.insert("heads", member_heads(plan))
    dropped, added = membership_changes(plan, members_before)
    if dropped:
        gone = statement.source(
            [([s for s, _ in dropped], "text"), ([k for _, k in dropped], "text")]
        )
        statement.parts.append(
            f"dropped AS (DELETE FROM memberships m USING {gone} AS u(collection, pubkey) "
            "WHERE m.collection = u.collection AND m.pubkey = u.pubkey)"
        )
    if added:
        new = statement.source([([s for s, _ in added], "text"), ([k for _, k in added], "text")])
        statement.parts.append(
            f"added AS (INSERT INTO memberships (collection, pubkey) SELECT * FROM {new} AS u)"
        )


def _claim_counts(statement: Statement, plan: Plan) -> None:
    """`claim_counts` as two parts of the write statement: the new claims' rows inserted, with
    their seq from the events just inserted; the stored ones' updated."""
    inserted, added = claim_counts(plan)
    types = count_types()
    if inserted:
        source = statement.source(
            [([v[i] for v in inserted], sql_type) for i, (_, sql_type) in enumerate(types)]
        )
        names = [name for name, _ in types[2:]]
        counted = ", ".join(names)
        statement.parts.append(
            f"""claim_new AS (
                INSERT INTO claim_counts (claim_id, collection, seq, {counted})
                SELECT u.claim_id, u.collection, e.seq, {", ".join(f"u.{c}" for c in names)}
                FROM {source} AS u(claim_id, collection, {counted})
                JOIN e ON e.id = u.claim_id)"""
        )
    if added:
        source = statement.source(
            [([v[i] for v in added], sql_type) for i, (_, sql_type) in enumerate(types)]
        )
        slugs = statement.arrays([(sorted({v[1] for v in added}), "text")])
        statement.parts.append(f"claim_counted AS ({counts_added_sql(source, slugs)})")
