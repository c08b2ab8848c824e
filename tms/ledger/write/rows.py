"""What a publish stores, as rows: computed here from the judged `Plan`, once, for both ways of
writing them, so that a single PostgreSQL and a Citus cluster store the same rows.

A single PostgreSQL inserts them in one statement of data-modifying CTEs
(`tms.ledger.write.writes`); a Citus cluster in one plain statement per table, each routed to its
collection's shard (`tms.ledger.write.routed`). The kinds' typed rows come from the kinds' registry
(`tms.rules.kinds.KINDS`); the counts kept beside them (sql/008, sql/009) are added up here. Other
parts of the ledger that store rows with a publish (the transparency log, the claims' keys) hand
them to the write as `Rows` too.

The order and shape of what a publish writes is said once, here (`describe`): the events, then
each set of rows, each a `Step`. Both writers loop over it, each storing a step its own way (a
CTE of the one statement, or a routed statement of its own).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tms.ledger.statement import Rows
from tms.ledger.write.anchors import ANCHOR_COLUMNS, anchor_row
from tms.rules.kinds import (
    KINDS,
    Columns,
    Table,
    claim_count_columns,
    collection_count_columns,
    embedded_kinds,
)
from tms.rules.publish import Plan
from tms.types import EventId, PubKey, Slug


@dataclass(frozen=True, slots=True)
class Events:
    """The batch's accepted events, in batch order: the first step, which gives each its `seq`
    (the steps after it that carry a `seq` read it from here)."""

    plan: Plan


@dataclass(frozen=True, slots=True)
class Insert:
    """Rows inserted into `rows.table`. With `seq_at`, each row also carries the `seq` of the
    event whose id is its first value, as the column at that place (left out of `rows`: the
    writer knows it only once the events are stored). `typed`: a kind's typed rows, whose values
    may need converting (`VALUE`, `DECODED`)."""

    rows: Rows
    seq_at: int | None = None
    typed: bool = False


@dataclass(frozen=True, slots=True)
class AddCounts:
    """What a batch adds to the counts of claims stored before (`count_types()`' rows), by
    `counts_added_sql`."""

    rows: list[CountRow]


@dataclass(frozen=True, slots=True)
class DropMembers:
    """The (collection, key) rows a batch's member lists drop from `memberships`."""

    rows: list[tuple[Slug, PubKey]]


Step = Events | Insert | AddCounts | DropMembers


def describe(
    plan: Plan,
    members_before: dict[Slug, set[PubKey]],
    also: Sequence[Rows] = (),
    *,
    queue_vectors: bool = True,
) -> Iterator[Step]:
    """What a publish writes, in the order it is written: the events, their typed rows, their
    links' anchors, the claims' counts (new rows and additions), the collections' counts, the
    events' places in the embedding queue, the collections they create, the member lists they
    make current and the keys those add or drop (`members_before`: each collection's members when
    the batch began), then the rows `also` holds. Steps with no rows are left out."""
    yield Events(plan)
    for table, records in typed_rows(plan).items():
        rows = Rows(table.name, table.columns, records)
        yield Insert(rows, seq_at=1 if table.sequenced else None, typed=True)
    anchored = anchor_rows(plan)
    if anchored:  # where each new link's quote sits in its evidence (sql/005, sql/012)
        yield Insert(Rows("link_anchors", ANCHOR_TYPES, anchored))
    new, added = claim_counts(plan)
    if new:
        yield Insert(Rows("claim_counts", count_types(), new), seq_at=2)
    if added:
        yield AddCounts(added)
    counts = collection_counts(plan)
    if counts.rows:
        yield Insert(counts)
    embedded = embedded_kinds()
    queued = [
        (p.event.id, p.collection)
        for p in plan.accepted
        if queue_vectors and p.event.kind in embedded
    ]
    if queued:  # vectors are made after commit
        yield Insert(Rows("embedding_queue", _QUEUE_COLUMNS, queued), seq_at=1)
    if plan.new_collections:
        yield Insert(Rows("collections", _COLLECTION_COLUMNS, list(plan.new_collections)))
    if plan.member_lists:
        yield Insert(member_heads(plan))
        dropped, joined = membership_changes(plan, members_before)
        if dropped:
            yield DropMembers(dropped)
        if joined:
            yield Insert(Rows("memberships", _MEMBERSHIP_COLUMNS, joined))
    for extra in also:
        if extra.rows:
            yield Insert(extra)


_QUEUE_COLUMNS: Final[Columns] = (("event_id", "text"), ("collection", "text"))  # and seq, 2nd
_COLLECTION_COLUMNS: Final[Columns] = (("slug", "text"), ("owner", "text"), ("created_by", "text"))
_MEMBERSHIP_COLUMNS: Final[Columns] = (("collection", "text"), ("pubkey", "text"))


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


# Values that are not the column's bound value as it is: a member list is JSON text in its kind's
# row (`Kind.rows`). The one statement (tms.ledger.write.writes) turns it into the column's text[]
# by SQL over the bound value (`VALUE`, `{}`); a plain INSERT ... VALUES (tms.ledger.write.routed),
# where Citus allows no subquery, binds it decoded, as that SQL type (`DECODED`).
VALUE: Final = {"members": "ARRAY(SELECT json_array_elements_text({}::json))"}
DECODED: Final[dict[str, tuple[str, Callable[[Any], Any]]]] = {"members": ("text[]", json.loads)}


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


# A claim's counts row: its id, its collection, then each of `claim_count_columns()`.
CountRow = tuple[Any, ...]


def count_types() -> Columns:
    """A claim's counts row's columns, with their SQL types."""
    return (
        *(("claim_id", "text"), ("collection", "text")),
        *((column, "int") for column in claim_count_columns()),
    )


def claim_counts(plan: Plan) -> tuple[list[CountRow], list[CountRow]]:
    """Each new claim's counts row (with what the batch already adds to it), and what the
    batch adds to the claims it names that were stored before (links by relation,
    contradictions as findings: `Kind.claim_counts`). A target that is not a claim (a link, a
    contradiction, evidence) has no row, so adding to it updates nothing."""
    columns = claim_count_columns()
    counted: dict[EventId, list[Any]] = {}
    new: set[EventId] = set()
    for p in plan.accepted:
        counts = KINDS[p.event.kind].claim_counts
        if counts is None or p.collection is None:
            continue
        for claim_id, column in counts(p.event.id, p.content):
            row = counted.setdefault(claim_id, [p.collection, *(0 for _ in columns)])
            if column is None:  # the claim itself: its row is new
                new.add(claim_id)
            else:
                row[1 + columns.index(column)] += 1
    rows: list[CountRow] = [(claim_id, *rest) for claim_id, rest in counted.items()]
    return [r for r in rows if r[0] in new], [r for r in rows if r[0] not in new]


def counts_added_sql(rows: str, slugs: str) -> str:
    """What a batch adds to claims stored before: `rows` reads `count_types()`' rows (a row
    source: `unnest(...)` of arrays, or `Statement.source`), `slugs` the array of the
    collections they are in. The update names its collections as a constant array too:
    Citus then sends it to their shards only (the join to the batch's rows alone would reach
    every shard)."""
    columns = claim_count_columns()
    added = ", ".join(f"{c} = t.{c} + u.{c}" for c in columns)
    return f"""
    UPDATE claim_counts AS t SET {added}
    FROM {rows} AS u(claim_id, collection, {", ".join(columns)})
    WHERE t.collection = ANY({slugs}) AND t.claim_id = u.claim_id
      AND t.collection = u.collection"""


def collection_counts(plan: Plan) -> Rows:
    """What the batch adds to each collection's record counts (`Kind.counted`): one row per
    collection, and a row for each collection it creates (every collection has one, as the
    migration made)."""
    columns = collection_count_columns()
    added: dict[Slug, list[int]] = {slug: [0] * len(columns) for slug, *_ in plan.new_collections}
    for p in plan.accepted:
        column = KINDS[p.event.kind].counted
        if column is not None and p.collection is not None:
            added.setdefault(p.collection, [0] * len(columns))[columns.index(column)] += 1
    rows = [(slug, *counts) for slug, counts in added.items()]
    types: Columns = (("collection", "text"), *((column, "bigint") for column in columns))
    # The upsert that adds a batch's counts to what a collection's row holds.
    upsert = "ON CONFLICT (collection) DO UPDATE SET " + ", ".join(
        f"{c} = t.{c} + excluded.{c}" for c in columns
    )
    return Rows("collection_counts AS t", types, rows, f"\n    {upsert}")
