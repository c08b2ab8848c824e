"""Where a collection's export puts each profile and terms line among its entries: one rule,
used by the export itself (`tms.ledger.read.export`) and by the places the server states to a
mirror (`GET /c/<slug>/others`, `tms.mirror.copy`), so that a member's copy is the export byte
for byte.

Profiles and terms belong to no collection and are no log entries; an export carries those of
the keys that wrote in the collection, so that the file can be published again as it is (every
key signs the terms before its first write). Each line is placed by the ledger's sequence
(`seq`), which only the server knows:

- a line a key signed before its first entry here (perhaps while it belonged only to another
  collection) comes right before that first entry, after the member list that let it in: its
  place is the first entry's `seq` (a *prelude* line, always written);
- a later one comes in ledger order, before the first entry stored after it: its place is its
  own `seq`; it is written only while its key belongs to the collection (the owner, or a member
  of the member list in force there), as one signed after a removal would not be accepted on
  replay.

A line goes right before the first entry whose `seq` is at least its place (`place(...)[0]`),
after the entries before it; lines placed before the same entry (or after the last one) come in
`place` order.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from tms.rules.membership import Membership as Folded
from tms.rules.membership import is_membership_kind
from tms.types import KIND_JOIN, KIND_MEMBERS


class Row(Protocol):
    """An entry as the ledger stores it (a database record, a dict): its fields by name."""

    def __getitem__(self, key: str, /) -> Any: ...


def place(seq: int, first: int) -> tuple[int, int]:
    """The sort key of a profile or terms line stored at `seq` by a key whose first entry in
    the collection is stored at `first`."""
    return (first, seq) if seq < first else (seq, seq)


def is_prelude(seq: int, first: int) -> bool:
    """Whether the line comes before its key's first entry (and is written whoever holds the
    member list), rather than in ledger order among the entries."""
    return seq < first


class Membership(Folded):
    """Who belongs to one collection as its entries go by: the owner, and the members the
    membership records so far make (`tms.rules.membership`, one fold for every reader)."""

    def apply_row(self, row: Row) -> None:
        """An entry, in ledger order (only membership records change anything): a row with
        `kind`, `pubkey`, `created_at`, `id`, `tags` (JSON), `content` and, for a change, a
        join or a leave, `body`."""
        kind = row["kind"]
        if is_membership_kind(kind):
            body = row["body"] if kind != KIND_MEMBERS else None
            tags = json.loads(row["tags"]) if kind == KIND_JOIN else None
            self.apply_stored(
                kind, row["created_at"], row["id"], row["content"], body, row["pubkey"], tags
            )
