"""The reads the pages add, on real PostgreSQL: terms signed, current profile, member list
with its head, dashboard figures, and browser sessions."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from factories import claim, evidence, members, profile, terms
from publishing import publish, reader_of

from tms.errors import NotAReader
from tms.ledger.access import Access, OwnedCollection
from tms.ledger.read.keys import Keys
from tms.ledger.read.stats import Stats, _bucket_starts, _unit
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio


async def test_keys_terms_profile_and_member_list(ledger: Ledger) -> None:
    owner, member = SecretKey.generate(), SecretKey.generate()
    keys, access = Keys(ledger.pool), Access(ledger.pool)
    await ledger.approve([owner.pubkey])
    assert not await keys.terms_signed(owner.pubkey)
    assert await keys.profile(owner.pubkey) is None
    assert await access.may_create(owner.pubkey) and not await access.may_create(member.pubkey)
    newer = profile(owner, "Newer", created_at=2000)
    await publish(
        ledger,
        terms(owner),
        profile(owner, "Older", created_at=1000),
        newer,
        members(owner, "c", [member.pubkey], created_at=1500),
    )
    assert await keys.terms_signed(owner.pubkey)
    found = await keys.profile(owner.pubkey)
    assert found is not None and (found["id"], found["name"]) == (newer["id"], "Newer")
    assert await keys.names([owner.pubkey, member.pubkey]) == {owner.pubkey: "Newer"}
    # a member reads the list with its reader's capability, the owner with its own
    for readable in (
        await access.collection(member.pubkey, "c"),
        await access.owned(owner.pubkey, "c"),
    ):
        listed = await keys.member_list(readable)
        assert listed is not None
        assert (listed["owner"], listed["members"], listed["list_created_at"]) == (
            owner.pubkey,
            [member.pubkey],
            1500,
        )
    assert await keys.taken_by("c") == owner.pubkey and await keys.taken_by("nothing") is None
    assert await access.owns(owner.pubkey, "c") and not await access.owns(member.pubkey, "c")
    # the owner's capability is the access check's answer: a member, or a missing collection,
    # get the same refusal as any collection closed to them
    for pubkey, slug in ((member.pubkey, "c"), (owner.pubkey, "nothing")):
        with pytest.raises(NotAReader, match="or no such collection"):
            await access.owned(pubkey, slug)
    with pytest.raises(TypeError, match=r"only tms\.ledger\.access makes a OwnedCollection"):
        OwnedCollection(owner.pubkey, "c")


async def test_a_member_is_one_since_the_first_list_that_named_them(ledger: Ledger) -> None:
    """The home page's "Member since": the first list naming the key, in each collection; not
    the collection's creation, nor the latest list (a removal and a return keep the first)."""
    owner, member = SecretKey.generate(), SecretKey.generate()
    keys = Keys(ledger.pool)
    await ledger.approve([owner.pubkey])
    await publish(
        ledger,
        terms(owner),
        members(owner, "c", [], created_at=1000),
        members(owner, "c", [member.pubkey], created_at=2000),
        members(owner, "c", [], created_at=3000),
        members(owner, "c", [member.pubkey], created_at=4000),
        members(owner, "d", [member.pubkey], created_at=5000),
        members(owner, "e", [], created_at=6000),
    )
    since = await keys.member_since(member.pubkey, ["c", "d", "e", "nothing"])
    assert since == {"c": 2000, "d": 5000}
    assert await keys.member_since(member.pubkey, []) == {}


async def test_dashboard_figures(ledger: Ledger) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    await publish(
        ledger,
        terms(owner),
        profile(owner, "Olive"),
        evidence(owner, "c", "one", source="Journal", url="https://www.Example.org:443/a?b"),
        evidence(owner, "c", "two", source="Journal", url="http://user@other.net/x"),
        evidence(owner, "c", "three", url="not a url"),
        claim(owner, "c", "A claim."),
        claim(owner, "elsewhere", "Not counted."),
    )
    stats = await Stats(ledger.pool).dashboard(await reader_of(ledger, owner.pubkey), "c")
    assert [(k["kind_name"], k["events"]) for k in stats["kinds"]] == [
        ("evidence", 3),
        ("claim", 1),
    ]
    assert stats["contributors"] == [{"pubkey": owner.pubkey, "author": "Olive", "events": 4}]
    assert stats["sources"] == [{"source": "Journal", "evidence": 2}]
    assert stats["domains"] == [
        {"source": "example.org", "evidence": 1},
        {"source": "other.net", "evidence": 1},
    ]
    assert stats["activity"]["unit"] == "day"
    assert sum(b["events"] for b in stats["activity"]["buckets"]) == 4
    empty = await Stats(ledger.pool).dashboard(await reader_of(ledger, SecretKey.generate().pubkey))
    assert empty["kinds"] == [] and len(empty["activity"]["buckets"]) == 1


def test_activity_buckets_grow_from_days_to_months() -> None:
    today = date(2026, 3, 15)
    assert _unit(today - timedelta(days=91), today) == "day"
    assert _unit(today - timedelta(days=92), today) == "week"
    assert _unit(today - timedelta(days=700), today) == "month"
    weeks = _bucket_starts(date(2026, 1, 1), today, "week")
    assert weeks[0] == date(2025, 12, 29) and all(d.weekday() == 0 for d in weeks)
    months = _bucket_starts(date(2020, 1, 31), today, "month")
    assert len(months) == 75 and months[-1] == date(2026, 3, 1)
    assert len(_bucket_starts(date(2000, 1, 1), today, "month")) == 92


async def test_sessions_open_end_and_expire(ledger: Ledger) -> None:
    sessions = Sessions(ledger.pool)
    key = SecretKey.generate().pubkey
    later = datetime.now(UTC) + timedelta(hours=1)
    await sessions.open("a" * 64, key, later)
    await sessions.open("b" * 64, key, datetime.now(UTC) - timedelta(seconds=1))
    assert await sessions.pubkey("a" * 64) == key
    assert await sessions.pubkey("b" * 64) is None  # expired
    await sessions.close("a" * 64)
    assert await sessions.pubkey("a" * 64) is None
    await sessions.open("c" * 64, key, later)
    assert await sessions.close_all(key) == 1
    assert await sessions.use_nonce("n1", 60)
    assert not await sessions.use_nonce("n1", 60)
