"""Live delivery follows the same fold as the ledger (`tms.rules.membership`): a membership
change stored with no effect, because a record signed later is in force, moves nobody on the
relay either (the hub once revoked the key it named, and a member lost its live events)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest
from factories import OWNER, RELAY_KEY, claim, key, member_change, members, terms
from relay_client import Said, in_process_relay, publish

from tms.ledger.service import Ledger
from tms.relay.connection import Connection
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio


async def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_a_change_without_effect_moves_nobody_live(db_url: str) -> None:
    person = key(0x7D)
    now = int(time.time())
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        await Ledger(pool).approve([OWNER.pubkey])
    finally:
        await pool.close()
    await publish(db_url, [terms(OWNER), members(OWNER, "ahead", [], created_at=now - 100)])
    sent = Said()
    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        # A list signed with a clock five minutes ahead names the person ...
        await publish(db_url, [members(OWNER, "ahead", [person.pubkey], created_at=now + 300)])
        url = "ws://x/c/ahead"
        conn = Connection(relay, sent, slug="ahead", url=url, address=None, pubkey=person.pubkey)
        await conn.open()
        await conn.handle(json.dumps(["REQ", "live", {"kinds": [4702], "limit": 0}]))
        await wait_for(lambda: ["EOSE", "live"] in sent)
        # ... so a change signed now, before it, is stored and changes nothing,
        late = member_change(OWNER, "ahead", "unallowpubkey", person.pubkey, created_at=now)
        said = claim(OWNER, "ahead", "still read", created_at=now + 1)
        await publish(db_url, [late], [said])
        # and the person, still a member, hears the claim.
        await wait_for(lambda: any(m[:1] == ["EVENT"] for m in sent))
        await conn.close()
    assert [m[2]["id"] for m in sent if m[0] == "EVENT"] == [said["id"]], sent


async def test_a_nip86_change_is_said_live_in_nip43s_words(db_url: str) -> None:
    """NIP-43's views fold the NIP-86 changes too: an `allowpubkey` committed while a member
    reads kinds 13534/8000 is an 8000 naming the key, then a 13534 listing it, signed by the
    relay key and naming the change as their record."""
    person = key(0x7E)
    now = int(time.time())
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        await Ledger(pool).approve([OWNER.pubkey])
    finally:
        await pool.close()
    await publish(db_url, [terms(OWNER), members(OWNER, "views", [], created_at=now - 100)])
    sent = Said()
    async with in_process_relay(db_url, key=RELAY_KEY) as relay:
        await relay.feed.ready.wait()
        url = "ws://x/c/views"
        conn = Connection(relay, sent, slug="views", url=url, address=None, pubkey=OWNER.pubkey)
        await conn.open()
        await conn.handle(json.dumps(["REQ", "who", {"kinds": [13534, 8000, 8001], "limit": 0}]))
        await wait_for(lambda: ["EOSE", "who"] in sent)
        allow = member_change(OWNER, "views", "allowpubkey", person.pubkey, created_at=now)
        await publish(db_url, [allow])
        views = lambda: [m[2] for m in sent if m[:2] == ["EVENT", "who"]]  # noqa: E731
        await wait_for(lambda: len(views()) == 2)
        await conn.close()
    added, listed = views()
    assert added["kind"] == 8000 and ["p", person.pubkey] in added["tags"]
    assert listed["kind"] == 13534 and ["member", person.pubkey] in listed["tags"]
    assert ["e", allow["id"]] in added["tags"] and ["e", allow["id"]] in listed["tags"]
    assert added["pubkey"] == listed["pubkey"] == RELAY_KEY.pubkey
