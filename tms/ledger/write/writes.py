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
from typing import Any, Final

from tms.ledger.locks import hold_locks
from tms.ledger.statement import Rows, Statement
from tms.ledger.write.rows import (
    VALUE,
    AddCounts,
    Events,
    Insert,
    count_types,
    counts_added_sql,
    describe,
)
from tms.nostr.events import compact_json
from tms.rules.kinds import Columns
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
    """Store what a publish writes (`describe`: the accepted events, their typed rows, ... the
    rows `also` holds) in one statement: each step a data-modifying CTE over bound columns
    (`Statement.source`), the rows that carry a `seq` joined to the events' new one. Returns
    what it stored, by collection (`notify`); with `announce`, the statement has announced it
    already, as `notify` would (a round trip less)."""
    statement = Statement()
    for n, step in enumerate(describe(plan, members_before, also, queue_vectors=queue_vectors)):
        if isinstance(step, Events):
            _events(statement, step.plan)
        elif isinstance(step, Insert):
            _insert(statement, f"w{n}", step)
        elif isinstance(step, AddCounts):
            source = statement.source(_columns(step.rows, count_types()))
            slugs = statement.arrays([(sorted({v[1] for v in step.rows}), "text")])
            statement.parts.append(f"w{n} AS ({counts_added_sql(source, slugs)})")
        else:
            gone = statement.source(_columns(step.rows, _MEMBER_COLUMNS))
            statement.parts.append(
                f"w{n} AS (DELETE FROM memberships m USING {gone} AS u(collection, pubkey) "
                "WHERE m.collection = u.collection AND m.pubkey = u.pubkey)"
            )
    statement.result = _SQL_ANNOUNCED if announce else _SQL_WRITTEN
    rows = await conn.fetch(statement.sql(), *statement.args)
    return [
        (None if r["collection"] == UNSCOPED else r["collection"], r["lo"], r["hi"], r["lists"])
        for r in rows
    ]


_MEMBER_COLUMNS: Final[Columns] = (("collection", "text"), ("pubkey", "text"))


def _columns(rows: Sequence[tuple[Any, ...]], columns: Columns) -> list[tuple[list[Any], str]]:
    """Rows as bound columns, each with its SQL type."""
    return [([r[i] for r in rows], sql_type) for i, (_, sql_type) in enumerate(columns)]


def _events(statement: Statement, plan: Plan) -> None:
    """The CTE `e`, inserting the accepted events in batch order: what the rest join to for
    their `seq`, and what the statement's own query reports."""
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


def _insert(statement: Statement, name: str, step: Insert) -> None:
    """One `Insert` as a CTE: its rows as they are, or joined to `e` for their `seq`."""
    rows = step.rows
    if step.seq_at is None and not step.typed:
        statement.insert(name, rows)
        return
    columns = rows.columns
    names = [column for column, _ in columns]
    source = statement.source(_columns(rows.rows, columns))
    values = [
        VALUE[column].format(f"u.{column}") if step.typed and column in VALUE else f"u.{column}"
        for column in names
    ]
    if step.seq_at is None:
        select = f"SELECT {', '.join(values)} FROM {source} AS u({', '.join(names)})"
    else:
        names.insert(step.seq_at, "seq")
        values.insert(step.seq_at, "e.seq")
        select = (
            f"SELECT {', '.join(values)} FROM {source} AS u({', '.join(c for c, _ in columns)}) "
            f"JOIN e ON e.id = u.{columns[0][0]}"
        )
    statement.parts.append(
        f"{name} AS (INSERT INTO {rows.table} ({', '.join(names)}) {select}{rows.suffix})"
    )


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
