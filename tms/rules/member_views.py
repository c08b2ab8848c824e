"""What a collection's relay says of its members (NIP-43), made from the collection's membership
records: the current member list (kind 13534) and one event per key added (8000) or removed
(8001), each signed by the relay's own key (NIP-11 `self`).

These events are views, never records: the records are the owner-signed member lists (kind
4705) and membership changes (kind 27235, NIP-86) in the collection's log, and the views are made
from them each time they are asked for,
so they can never say anything the log does not. Each view names the record it comes from (an
`e` tag), so a member can look that record up, signed by whoever had the authority, in the
export. A view is signed deterministically (`SecretKey.sign`'s `aux`), so it is the same event,
the same id, whether a stored answer or live delivery sends it: clients keep one.

The fold is the ledger's one rule (`tms.rules.membership`), taken in log order (`seq`): a record
that does not apply changes nothing and says nothing. The owner always belongs (DESIGN "Query
semantics"): first in every 13534, never added or removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tms.nostr.events import Event, SecretKey
from tms.rules.membership import Membership, Op
from tms.types import EventId, PubKey

KIND_MEMBER_LIST: Final = 13534
KIND_MEMBER_ADDED: Final = 8000
KIND_MEMBER_REMOVED: Final = 8001
VIEW_KINDS: Final = frozenset({KIND_MEMBER_LIST, KIND_MEMBER_ADDED, KIND_MEMBER_REMOVED})
PROTECTED: Final = ("-",)  # NIP-70: only the relay publishes these
_AUX: Final = bytes(32)  # BIP-340's deterministic choice: the same view, the same signature


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One membership record of the log: a member list (kind 4705, `op` replacing the set) or a
    membership change (kind 27235, `op` adding or removing one key)."""

    id: EventId
    seq: int
    created_at: int
    op: Op


@dataclass(frozen=True, slots=True)
class Change:
    """A record that applied: who it added and removed, and the membership after it (the owner
    first, then the others in order)."""

    record: MemberRecord
    added: tuple[PubKey, ...]
    removed: tuple[PubKey, ...]
    members: tuple[PubKey, ...]


@dataclass(frozen=True, slots=True)
class View:
    """A view and the `seq` of the record it comes from: where it sits in the log, for live
    delivery's "committed after the subscription began"."""

    seq: int
    event: Event


def fold(owner: PubKey, records: Iterable[MemberRecord]) -> list[Change]:
    """The changes `records` (in log order) made, one for each that applied."""
    state = Membership(owner)
    now: frozenset[PubKey] = frozenset()
    changes: list[Change] = []
    for record in records:
        if not state.apply(record.created_at, record.id, record.op):
            continue
        after = frozenset(state.members) - {owner}
        added, removed = tuple(sorted(after - now)), tuple(sorted(now - after))
        changes.append(Change(record, added, removed, (owner, *sorted(after))))
        now = after
    return changes


def member_list(key: SecretKey, members: Sequence[PubKey], created_at: int, source: str) -> Event:
    """Kind 13534: every member (`member` tags), as of the record `source` (its id, or the
    event that made the collection, while no list has applied)."""
    tags = [list(PROTECTED), *(["member", pubkey] for pubkey in members), ["e", source]]
    return key.sign(KIND_MEMBER_LIST, "", created_at, tags, aux=_AUX)


def member_changed(
    key: SecretKey, kind: int, pubkey: PubKey, created_at: int, source: str
) -> Event:
    """Kind 8000 (added) or 8001 (removed): one key, by the record `source`."""
    tags = [list(PROTECTED), ["p", pubkey], ["e", source]]
    return key.sign(kind, "", created_at, tags, aux=_AUX)


def views(
    key: SecretKey,
    owner: PubKey,
    origin: tuple[EventId, int],
    records: Iterable[MemberRecord],
    *,
    after: int = 0,
) -> list[View]:
    """Every view of a collection's membership, in log order: for each change, an 8000 for each
    key it added, an 8001 for each it removed, then the 13534 it leaves. `origin`: the event
    that made the collection and its `created_at`, the source of the first 13534 (the owner
    alone) while no list has applied. Only the changes of records after `seq` `after`, when
    given (live delivery: what is new)."""
    made: list[View] = []
    changes = fold(owner, records)
    if not changes and after == 0:
        return [View(0, member_list(key, (owner,), origin[1], origin[0]))]
    for change in changes:
        record = change.record
        if record.seq <= after:
            continue
        for pubkey in change.added:
            event = member_changed(key, KIND_MEMBER_ADDED, pubkey, record.created_at, record.id)
            made.append(View(record.seq, event))
        for pubkey in change.removed:
            event = member_changed(key, KIND_MEMBER_REMOVED, pubkey, record.created_at, record.id)
            made.append(View(record.seq, event))
        made.append(
            View(record.seq, member_list(key, change.members, record.created_at, record.id))
        )
    return made


def current(made: Sequence[View]) -> list[View]:
    """What a stored answer holds: every 8000 and 8001, and of the 13534s (replaceable) only
    the last."""
    lists = [view for view in made if view.event.kind == KIND_MEMBER_LIST]
    last = lists[-1] if lists else None
    return [view for view in made if view.event.kind != KIND_MEMBER_LIST or view is last]
