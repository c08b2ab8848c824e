"""An export checked against itself, for when no checkpoint is at hand: what the ledger's rules
say a whole, ordered history must look like, replayed over the file's lines in order.

Only a signed checkpoint proves that a file holds every event of its collection, unaltered;
without one, a file can still show that it was cut, shuffled or padded wherever that breaks the
rules every stored event obeyed when it was stored:

- every entry names the collection of the first one;
- no event appears twice;
- a link's `from` and `to`, and a contradiction's claims, are events earlier in the file (the
  ledger stores what an event cites before the event), of the kinds the rules allow;
- the first entry's author created the collection and owns it: membership records (member lists
  and membership changes) are the owner's, and every entry is signed by the owner or by a member
  at that point, as the one fold publishing uses decides (`tms.rules.membership`).

What it cannot see: an event dropped that nothing later cites or depends on, or a history cut
at its end. That is the checkpoint's job, and the report says so.

Pure: checked lines in (`tms.tlog.export_lines.Line`), problems out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tms.rules.kinds import KINDS, a_kind
from tms.rules.membership import ALLOW, INVITE, Membership, Op, list_op
from tms.types import KIND_JOIN, KIND_LEAVE, KIND_MEMBER_CHANGE, KIND_MEMBERS


class Entry(Protocol):
    """What the replay reads of a line (`tms.tlog.export_lines.Line` has it)."""

    @property
    def number(self) -> int: ...
    @property
    def id(self) -> str | None: ...
    @property
    def kind(self) -> int | None: ...
    @property
    def pubkey(self) -> str | None: ...
    @property
    def created_at(self) -> int | None: ...
    @property
    def cites(self) -> tuple[tuple[str, ...], ...]: ...
    @property
    def listed(self) -> tuple[str, ...] | None: ...
    @property
    def change(self) -> tuple[str, str] | None: ...


Problem = Callable[[str, float], None]


def replay(entries: Sequence[Entry], slug: str, problem: Problem) -> None:
    """Check the collection's entries (in file order, all of `slug`) against the rules above;
    `problem(text, line)` is called for each rule broken."""
    if not entries:
        return
    owner = entries[0].pubkey
    kinds: dict[str, int | None] = {}  # every entry so far, by id
    first_line: dict[str, int] = {}
    fold = Membership(owner)
    for entry in entries:
        name = f"line {entry.number}" + (f" ({entry.id})" if entry.id else "")
        if entry.id is None:
            continue
        if entry.id in kinds:
            problem(f"{name}: extra: repeats line {first_line[entry.id]}", entry.number)
            continue
        for text in _citations(entry, kinds):
            problem(f"{name}: {text}", entry.number)
        request = entry.kind in (KIND_JOIN, KIND_LEAVE)
        if entry.kind in (KIND_MEMBERS, KIND_MEMBER_CHANGE) and entry.pubkey != owner:
            what = "a member list" if entry.kind == KIND_MEMBERS else "a membership change"
            problem(
                f"{name}: {what} signed by {entry.pubkey}, not by the collection's owner "
                f"{owner} (the author of its first entry, line {entries[0].number}): an earlier "
                "entry is missing, or this one does not belong",
                entry.number,
            )
        elif request and entry.pubkey == owner:
            problem(f"{name}: the owner of '{slug}' cannot join or leave it", entry.number)
        elif entry.kind == KIND_JOIN and entry.change is not None:
            if not fold.authorized(Op("add", frozenset(), claim=entry.change[1])):
                problem(
                    f"{name}: a join whose code is not that of an invite of the owner's earlier "
                    "in the file that no join used yet: an earlier entry is missing, or this one "
                    "does not belong",
                    entry.number,
                )
        elif not fold.includes(entry.pubkey or ""):
            problem(
                f"{name}: its author {entry.pubkey} is neither the owner of '{slug}' (the "
                f"author of its first entry, line {entries[0].number}) nor on the member list "
                "current at this point: an earlier entry is missing, or out of order",
                entry.number,
            )
        at = entry.created_at or 0
        if entry.pubkey == owner:
            if entry.kind == KIND_MEMBERS and entry.listed is not None:
                fold.apply(at, entry.id, list_op(list(entry.listed)))
            elif entry.kind == KIND_MEMBER_CHANGE and entry.change is not None:
                method, key = entry.change
                keys = frozenset((key,))
                if method == INVITE:
                    fold.apply(at, entry.id, Op("invite", keys))
                else:
                    fold.apply(at, entry.id, Op("add" if method == ALLOW else "remove", keys))
        elif request and entry.change is not None and entry.pubkey is not None:
            signer = frozenset((entry.pubkey,))
            if entry.kind == KIND_JOIN:
                fold.apply(at, entry.id, Op("add", signer, claim=entry.change[1]))
            else:
                fold.apply(at, entry.id, Op("remove", signer))
        kinds[entry.id] = entry.kind
        first_line[entry.id] = entry.number


def _citations(entry: Entry, kinds: dict[str, int | None]) -> list[str]:
    """What is wrong with what `entry` cites (its kind's `references`), given the entries
    before it."""
    known = KINDS.get(entry.kind) if entry.kind is not None else None
    if known is None:
        return []
    found = []
    for reference, cited_ids in zip(known.references, entry.cites, strict=False):
        for cited in cited_ids:
            if cited not in kinds:
                found.append(
                    f"its {reference.role} {cited} is not earlier in the file: that event is "
                    "missing, or out of order"
                )
            elif kinds[cited] not in reference.kinds:
                found.append(
                    f"its {reference.role} {cited} is {_kind(kinds[cited])}, which it cannot be"
                )
    return found


def _kind(kind: int | None) -> str:
    return a_kind(kind) if kind is not None else "an unreadable event"
