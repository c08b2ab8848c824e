"""The publish's writes on a Citus cluster: what `tms.ledger.write.writes.write` stores in one
statement of data-modifying CTEs, stored instead as one plain statement per table, each sent by
Citus straight to the collection's shard.

Citus plans a statement of data-modifying CTEs one CTE at a time, each an INSERT ... SELECT that
gathers its rows on the coordinator before passing them on: 14 ms of a one-claim publish's 30,
on the test cluster. A multi-row INSERT ... VALUES (or an UPDATE filtered on the collection) is
routed as it stands: seven such statements took a quarter of that. A single PostgreSQL keeps the
one statement, which is faster there.

The rows are the same, in the same order, described once (`tms.ledger.write.rows.describe`, which
reads the kinds' registry, `tms.rules.kinds.KINDS`) and looped over here as there; the seq of
the batch's events is drawn from the events' own sequence first, in one statement on the
coordinator, and handed out in batch order, so the ledger's order is the batch's exactly as the
one statement makes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tms.ledger.statement import Rows
from tms.ledger.write.rows import (
    DECODED,
    AddCounts,
    Events,
    Insert,
    count_types,
    counts_added_sql,
    describe,
)
from tms.ledger.write.writes import Written
from tms.nostr.events import Event, compact_json
from tms.rules.kinds import Columns
from tms.rules.publish import Plan
from tms.store.database import Connection
from tms.types import KIND_MEMBERS, UNSCOPED, EventId, PubKey, Slug

# Parameters per statement: PostgreSQL's protocol allows 32,767; a big batch takes several.
MAX_PARAMS: Final = 30_000

_SQL_SEQS: Final = (
    "SELECT nextval(pg_get_serial_sequence('events', 'seq')) FROM generate_series(1, $1)"
)
_EVENT_COLUMNS: Final[Columns] = (
    *(("seq", "bigint"), ("id", "text"), ("pubkey", "text"), ("created_at", "bigint")),
    *(("kind", "int"), ("tags", "text"), ("content", "text"), ("sig", "text")),
    ("collection", "text"),
)
_SQL_DROP_MEMBERS: Final = """
    DELETE FROM memberships m USING unnest($1::text[], $2::text[]) AS u(c, k)
    WHERE m.collection = u.c AND m.pubkey = u.k"""


async def write(
    conn: Connection,
    plan: Plan,
    members_before: dict[Slug, set[PubKey]],
    also: Sequence[Rows] = (),
    *,
    queue_vectors: bool = True,
) -> Written:
    """Store `plan` as `tms.ledger.write.writes.write` does (`describe`), and the rows `also`
    holds; return what it stored, by collection (`tms.ledger.write.writes.notify`)."""
    seq: dict[EventId, int] = {}
    for step in describe(plan, members_before, also, queue_vectors=queue_vectors):
        if isinstance(step, Events):
            accepted = step.plan.accepted
            seqs = sorted(r[0] for r in await conn.fetch(_SQL_SEQS, len(accepted)))
            seq = {p.event.id: s for p, s in zip(accepted, seqs, strict=True)}
            events = [
                (seq[p.event.id], *_event(p.event), p.collection or UNSCOPED) for p in accepted
            ]
            await insert(conn, Rows("events", _EVENT_COLUMNS, events), overriding=True)
        elif isinstance(step, Insert):
            await insert(conn, _sequenced(step, seq))
        elif isinstance(step, AddCounts):
            types = count_types()
            sql = counts_added_sql(
                f"unnest({', '.join(f'${n + 1}::{t}[]' for n, (_, t) in enumerate(types))})",
                f"${len(types) + 1}::text[]",
            )
            for slug in sorted({row[1] for row in step.rows}):  # one collection's a statement
                rows = [row for row in step.rows if row[1] == slug]
                await conn.execute(
                    sql, *(list(column) for column in zip(*rows, strict=True)), [slug]
                )
        else:
            dropped = step.rows
            await conn.execute(_SQL_DROP_MEMBERS, [c for c, _ in dropped], [k for _, k in dropped])
    return written_by_seq(plan, seq)


def _sequenced(step: Insert, seq: Mapping[EventId, int]) -> Rows:
    """An `Insert`'s rows as a plain INSERT ... VALUES binds them: a typed row's values
    decoded where the one statement converts them in SQL (a member list's JSON: `DECODED`),
    and the `seq` drawn for its event put in its place."""
    table, columns, rows = step.rows.table, step.rows.columns, step.rows.rows
    decoded = [DECODED.get(name) if step.typed else None for name, _ in columns]
    if any(decoded):
        columns = tuple(
            (name, sql_type if how is None else how[0])
            for (name, sql_type), how in zip(columns, decoded, strict=True)
        )
        rows = [
            tuple(v if how is None else how[1](v) for v, how in zip(row, decoded, strict=True))
            for row in rows
        ]
    at = step.seq_at
    if at is not None:
        columns = (*columns[:at], ("seq", "bigint"), *columns[at:])
        rows = [(*row[:at], seq[row[0]], *row[at:]) for row in rows]
    return Rows(table, columns, rows, step.rows.suffix)


async def insert(conn: Connection, rows: Rows, *, overriding: bool = False) -> None:
    """`INSERT INTO table (columns) VALUES (...), ...`, as few statements as the protocol's
    parameter limit allows, in the rows' order."""
    if not rows.rows:
        return
    columns = rows.columns
    per = max(1, MAX_PARAMS // len(columns))
    names = ", ".join(name for name, _ in columns)
    override = " OVERRIDING SYSTEM VALUE" if overriding else ""
    for start in range(0, len(rows.rows), per):
        chunk = rows.rows[start : start + per]
        values = ", ".join(
            "("
            + ", ".join(
                f"${n * len(columns) + i + 1}::{sql_type}"
                for i, (_, sql_type) in enumerate(columns)
            )
            + ")"
            for n in range(len(chunk))
        )
        await conn.execute(
            f"INSERT INTO {rows.table} ({names}){override} VALUES {values}{rows.suffix}",
            *(value for row in chunk for value in row),
        )


def written_by_seq(plan: Plan, seq: Mapping[EventId, int]) -> Written:
    """`Written` for a batch whose events' `seq` is known here, drawn before its rows were
    written."""
    ranges: dict[Slug | None, list[Any]] = {}
    for p in plan.accepted:
        n = seq[p.event.id]
        got = ranges.setdefault(p.collection, [n, n, False])
        got[0], got[1] = min(got[0], n), max(got[1], n)
        got[2] = got[2] or p.event.kind == KIND_MEMBERS
    return sorted(
        ((slug, lo, hi, lists) for slug, (lo, hi, lists) in ranges.items()), key=lambda r: r[1]
    )


def _event(e: Event) -> tuple[str, str, int, int, str, str, str]:
    return e.id, e.pubkey, e.created_at, e.kind, compact_json(e.tags), e.content, e.sig
