"""What a collection's relay says of its members (NIP-43) is the fold of its member lists: a
stale list says nothing, the owner is never added or removed, and a view is the same event each
time it is made."""

from __future__ import annotations

from factories import MEMBER, MEMBER2, OWNER, RELAY_KEY

from tms.rules.member_views import MemberRecord, current, fold, views
from tms.rules.membership import Op

ORIGIN = ("ab" * 32, 100)


def record(n: int, created_at: int, *keys: str) -> MemberRecord:
    return MemberRecord(f"{n:064x}", n, created_at, Op("replace", frozenset(keys)))


def change(n: int, created_at: int, action: str, key: str) -> MemberRecord:
    """A NIP-86 membership change (kind 27235): `add` or `remove` one key."""
    assert action in ("add", "remove")
    return MemberRecord(f"{n:064x}", n, created_at, Op(action, frozenset((key,))))  # type: ignore[arg-type]


def test_the_fold_follows_nip01s_rule_and_keeps_the_owner() -> None:
    lists = [
        record(1, 200, MEMBER.pubkey, OWNER.pubkey),
        record(2, 150, MEMBER2.pubkey),  # older than the list in force: no effect
        record(3, 300, MEMBER2.pubkey),
    ]
    changes = fold(OWNER.pubkey, lists)
    assert [c.record.seq for c in changes] == [1, 3]
    assert changes[0].added == (MEMBER.pubkey,) and changes[0].removed == ()
    assert changes[1].added == (MEMBER2.pubkey,) and changes[1].removed == (MEMBER.pubkey,)
    assert changes[1].members == (OWNER.pubkey, MEMBER2.pubkey)
    # within one second, the lowest id wins, as it does for any replaceable event
    tie = fold(OWNER.pubkey, [record(5, 400, MEMBER.pubkey), record(4, 400, MEMBER2.pubkey)])
    assert [c.record.seq for c in tie] == [5, 4]
    assert fold(OWNER.pubkey, [record(4, 400), record(5, 400, MEMBER.pubkey)])[1:] == []


def test_views_are_signed_by_the_relay_key_and_made_the_same_each_time() -> None:
    lists = [record(1, 200, MEMBER.pubkey), record(2, 300)]
    made = views(RELAY_KEY, OWNER.pubkey, ORIGIN, lists)
    assert [(v.seq, v.event.kind) for v in made] == [(1, 8000), (1, 13534), (2, 8001), (2, 13534)]
    for view in made:
        view.event.verify()
        assert view.event.pubkey == RELAY_KEY.pubkey and view.event.tags[0] == ["-"]
    assert made == views(RELAY_KEY, OWNER.pubkey, ORIGIN, lists)  # deterministic signatures
    assert [(v.seq, v.event.kind) for v in current(made)] == [(1, 8000), (2, 8001), (2, 13534)]
    assert [v.seq for v in views(RELAY_KEY, OWNER.pubkey, ORIGIN, lists, after=1)] == [2, 2]
    # no list yet: the owner alone, as of the event that made the collection
    (alone,) = views(RELAY_KEY, OWNER.pubkey, ORIGIN, [])
    assert alone.event.tags == [["-"], ["member", OWNER.pubkey], ["e", ORIGIN[0]]]


def test_a_nip86_change_moves_the_views_as_a_list_does() -> None:
    """The views fold the same records as the ledger: a member added or removed over NIP-86
    is an 8000 or 8001 and a new 13534, and a change signed before the record in force says
    nothing."""
    records = [
        record(1, 200, MEMBER.pubkey),
        change(2, 300, "add", MEMBER2.pubkey),
        change(3, 250, "remove", MEMBER.pubkey),  # signed before the change in force
        change(4, 300, "remove", MEMBER.pubkey),  # the same second as a change: log order
    ]
    made = views(RELAY_KEY, OWNER.pubkey, ORIGIN, records)
    assert [(v.seq, v.event.kind) for v in made] == [
        (1, 8000),
        (1, 13534),
        (2, 8000),
        (2, 13534),
        (4, 8001),
        (4, 13534),
    ]
    assert made[-1].event.tags[1:3] == [["member", OWNER.pubkey], ["member", MEMBER2.pubkey]]
