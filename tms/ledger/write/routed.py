"""The publish's writes on a Citus cluster: what `tms.ledger.write.writes.write` stores in one
statement of data-modifying CTEs, stored instead as one plain statement per table, each sent by
Citus straight to the collection's shard.

Citus plans a statement of data-modifying CTEs one CTE at a time, each an INSERT ... SELECT that
gathers its rows on the coordinator before passing them on: 14 ms of a one-claim publish's 30,
on the test cluster. A multi-row INSERT ... VALUES (or an UPDATE filtered on the collection) is
routed as it stands: seven such statements took a quarter of that. A single PostgreSQL keeps the
one statement, which is faster there.

The rows are the same, computed by the same functions (`tms.ledger.write.rows`: `typed_rows`,
`claim_counts` and the rest, which read the kinds' registry, `tms.rules.kinds.KINDS`); the seq of
the batch's events is drawn from the events' own sequence first, in one statement on the
coordinator, and handed out in batch order, so the ledger's order is the batch's exactly as the
one statement makes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tms.ledger.statement import Rows
from tms.ledger.write.rows import (
    ANCHOR_TYPES,
    DECODED,
    anchor_rows,
    claim_counts,
    collection_counts,
    count_types,
    counts_added_sql,
    member_heads,
    membership_changes,
    typed_rows,
)
from tms.ledger.write.writes import Written
from tms.nostr.events import Event, compact_json
from tms.rules.kinds import Columns, embedded_kinds
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
_QUEUE_COLUMNS: Final[Columns] = (("event_id", "text"), ("seq", "bigint"), ("collection", "text"))
_COLLECTION_COLUMNS: Final[Columns] = (("slug", "text"), ("owner", "text"), ("created_by", "text"))
_MEMBERSHIP_COLUMNS: Final[Columns] = (("collection", "text"), ("pubkey", "text"))
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
    """Store `plan` as `tms.ledger.write.writes.write` does, and the rows `also` holds; return what
    it stored, by collection (`tms.ledger.write.writes.notify`)."""
    accepted = plan.accepted
    seqs = sorted(r[0] for r in await conn.fetch(_SQL_SEQS, len(accepted)))
    seq = {p.event.id: s for p, s in zip(accepted, seqs, strict=True)}
    events = [(seq[p.event.id], *_event(p.event), p.collection or UNSCOPED) for p in accepted]
    await insert(conn, Rows("events", _EVENT_COLUMNS, events), overriding=True)

    for table, rows in typed_rows(plan).items():
        columns = table.columns
        decoded = [DECODED.get(name) for name, _ in columns]
        if any(decoded):  # values the one statement converts in SQL (a member list's JSON)
            columns = tuple(
                (name, sql_type if how is None else how[0])
                for (name, sql_type), how in zip(columns, decoded, strict=True)
            )
            rows = [
                tuple(v if how is None else how[1](v) for v, how in zip(row, decoded, strict=True))
                for row in rows
            ]
        if table.sequenced:  # every typed row but a contradiction's claims carries the seq
            columns = (columns[0], ("seq", "bigint"), *columns[1:])
            rows = [(row[0], seq[row[0]], *row[1:]) for row in rows]
        await insert(conn, Rows(table.name, columns, rows))

    await insert(conn, Rows("link_anchors", ANCHOR_TYPES, anchor_rows(plan)))

    new, added = claim_counts(plan)
    counted = [(claim_id, slug, seq[claim_id], *n) for claim_id, slug, *n in new]
    types = count_types()
    await insert(conn, Rows("claim_counts", (*types[:2], ("seq", "bigint"), *types[2:]), counted))
    for slug in sorted({row[1] for row in added}):  # one collection's claims a statement
        rows = [row for row in added if row[1] == slug]
        sql = counts_added_sql(
            f"unnest({', '.join(f'${n + 1}::{t}[]' for n, (_, t) in enumerate(types))})",
            f"${len(types) + 1}::text[]",
        )
        await conn.execute(sql, *(list(column) for column in zip(*rows, strict=True)), [slug])
    await insert(conn, collection_counts(plan))
    embedded = embedded_kinds()
    queued = [
        (p.event.id, seq[p.event.id], p.collection)
        for p in accepted
        if queue_vectors and p.event.kind in embedded
    ]
    await insert(conn, Rows("embedding_queue", _QUEUE_COLUMNS, queued))
    await insert(conn, Rows("collections", _COLLECTION_COLUMNS, list(plan.new_collections)))
    if plan.member_lists:
        await insert(conn, member_heads(plan))
        dropped, joined = membership_changes(plan, members_before)
        if dropped:
            await conn.execute(_SQL_DROP_MEMBERS, [c for c, _ in dropped], [k for _, k in dropped])
        await insert(conn, Rows("memberships", _MEMBERSHIP_COLUMNS, joined))
    for extra in also:
        await insert(conn, extra)
    return written_by_seq(plan, seq)


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
