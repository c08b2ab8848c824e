"""The publish's writes on a Citus cluster: what `tms.ledger.writes.write` stores in one statement
of data-modifying CTEs, stored instead as one plain statement per table, each sent by Citus
straight to the collection's shard.

Citus plans a statement of data-modifying CTEs one CTE at a time, each an INSERT ... SELECT that
gathers its rows on the coordinator before passing them on: 14 ms of a one-claim publish's 30,
on the test cluster. A multi-row INSERT ... VALUES (or an UPDATE filtered on the collection) is
routed as it stands: seven such statements took a quarter of that. A single PostgreSQL keeps the
one statement, which is faster there.

The rows are the same, computed by the same functions (`writes.claim_counts` and the rest); the
seq of the batch's events is drawn from the events' own sequence first, in one statement on the
coordinator, and handed out in batch order, so the ledger's order is the batch's exactly as the
one statement makes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from tms.ledger import writes
from tms.ledger.anchors import ANCHOR_COLUMNS
from tms.nostr.events import compact_json
from tms.rules.anchors import Anchor
from tms.rules.publish import Plan
from tms.store.database import Connection
from tms.types import EMBEDDED_KINDS, UNSCOPED, PubKey, Slug

# Parameters per statement: PostgreSQL's protocol allows 32,767; a big batch takes several.
MAX_PARAMS: Final = 30_000

Table = tuple[str, tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]

_SQL_SEQS: Final = (
    "SELECT nextval(pg_get_serial_sequence('events', 'seq')) FROM generate_series(1, $1)"
)
_EVENT_COLUMNS: Final = (
    *("seq", "id", "pubkey", "created_at", "kind"),
    *("tags", "content", "sig", "collection"),
)
_EVENT_TYPES: Final = ("bigint", "text", "text", "bigint", "int", "text", "text", "text", "text")


async def write(
    conn: Connection,
    plan: Plan,
    members_before: dict[Slug, set[PubKey]],
    tables: Sequence[Table] = (),
) -> None:
    """Store `plan` as `writes.write` does, and the rows of `tables` (the log's)."""
    accepted = plan.accepted
    seqs = sorted(r[0] for r in await conn.fetch(_SQL_SEQS, len(accepted)))
    seq = {p.event.id: s for p, s in zip(accepted, seqs, strict=True)}
    events = [
        (
            seq[e.id],
            e.id,
            e.pubkey,
            e.created_at,
            e.kind,
            compact_json(e.tags),
            e.content,
            e.sig,
            p.collection or UNSCOPED,
        )
        for p in accepted
        for e in (p.event,)
    ]
    await insert(conn, "events", _EVENT_COLUMNS, _EVENT_TYPES, events, overriding=True)

    typed: dict[str, list[tuple[Any, ...]]] = {}
    for p in accepted:
        for table, row in writes.TYPED_ROWS[type(p.content)](p.event, p.content):
            if table == "member_lists":  # the members travel as a list here, not as JSON
                row = (*row[:-1], json.loads(row[-1]))
            if table != "contradiction_claims":  # every typed row but these carries the seq
                row = (row[0], seq[row[0]], *row[1:])
            typed.setdefault(table, []).append(row)
    for table, rows in typed.items():
        typed_columns = [
            (name, "text[]" if name == "members" else sql_type)
            for name, sql_type in writes.COLUMNS[table]
        ]
        if table != "contradiction_claims":
            typed_columns.insert(1, ("seq", "bigint"))
        names, types = zip(*typed_columns, strict=True)
        await insert(conn, table, names, types, rows)

    anchors = [
        (p.event.id, p.collection, *_anchor(plan.anchors[p.event.id]))
        for p in accepted
        if p.event.id in plan.anchors
    ]
    await insert(conn, "link_anchors", tuple(ANCHOR_COLUMNS), _ANCHOR_TYPES, anchors)

    new, added = writes.claim_counts(plan)
    counted = [(claim_id, slug, seq[claim_id], *n) for claim_id, slug, *n in new]
    await insert(conn, "claim_counts", _COUNT_COLUMNS, _COUNT_TYPES, counted)
    for slug in sorted({row[1] for row in added}):  # one collection's claims a statement
        rows = [row for row in added if row[1] == slug]
        sql = writes.SQL_COUNTS_ADDED.format(
            rows=", ".join(f"${n + 1}::{t}[]" for n, t in enumerate(writes.COUNT_TYPES)),
            slugs="$7::text[]",
        )
        await conn.execute(sql, *(list(column) for column in zip(*rows, strict=True)), [slug])
    await insert(
        conn,
        "collection_counts AS t",
        ("collection", "evidence", "claims", "links", "contradictions"),
        writes.COLLECTION_TYPES,
        writes.collection_counts(plan),
        suffix=writes.COLLECTION_COUNTED,
    )
    queued = [
        (p.event.id, seq[p.event.id], p.collection)
        for p in accepted
        if p.event.kind in EMBEDDED_KINDS
    ]
    await insert(
        conn, "embedding_queue", ("event_id", "seq", "collection"), _TEXT_BIGINT_TEXT, queued
    )
    await insert(
        conn, "collections", ("slug", "owner", "created_by"), ("text",) * 3, plan.new_collections
    )
    if plan.member_lists:
        heads = [
            (slug, list_id, created_at)
            for slug, (created_at, list_id, _) in plan.member_lists.items()
        ]
        await insert(
            conn,
            "current_member_lists",
            ("collection", "list_id", "created_at"),
            _TEXT_TEXT_BIGINT,
            heads,
            suffix=writes.HEAD_REPLACED,
        )
        dropped, joined = writes.membership_changes(plan, members_before)
        if dropped:
            await conn.execute(
                "DELETE FROM memberships m USING unnest($1::text[], $2::text[]) AS u(c, k) "
                "WHERE m.collection = u.c AND m.pubkey = u.k",
                [c for c, _ in dropped],
                [k for _, k in dropped],
            )
        await insert(conn, "memberships", ("collection", "pubkey"), ("text", "text"), joined)
    for table, names, types, rows in tables:
        await insert(conn, table, names, types, rows)


async def insert(
    conn: Connection,
    table: str,
    columns: Sequence[str],
    types: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    suffix: str = "",
    overriding: bool = False,
) -> None:
    """`INSERT INTO table (columns) VALUES (...), ...`, as few statements as the protocol's
    parameter limit allows, in the rows' order."""
    per = max(1, MAX_PARAMS // len(columns))
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        values = ", ".join(
            "(" + ", ".join(f"${n * len(columns) + i + 1}::{t}" for i, t in enumerate(types)) + ")"
            for n in range(len(chunk))
        )
        override = " OVERRIDING SYSTEM VALUE" if overriding else ""
        await conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}){override} VALUES {values}{suffix}",
            *(value for row in chunk for value in row),
        )


def _anchor(found: Anchor) -> tuple[int, int, str, str, str, int]:
    return found.start, found.end, found.exact, found.prefix, found.suffix, found.occurrences


_ANCHOR_TYPES: Final = ("text", "text", "int", "int", "text", "text", "text", "int")
_COUNT_COLUMNS: Final = (
    *("claim_id", "collection", "seq"),
    *("supports", "qualifies", "rebuts", "findings"),
)
_COUNT_TYPES: Final = ("text", "text", "bigint", "int", "int", "int", "int")
_TEXT_BIGINT_TEXT: Final = ("text", "bigint", "text")
_TEXT_TEXT_BIGINT: Final = ("text", "text", "bigint")
