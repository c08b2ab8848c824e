"""Live delivery follows the same fold as the ledger (`tms.rules.membership`): a membership
change stored with no effect, because a record signed later is in force, moves nobody on the
relay either (the hub once revoked the key it named, and a member lost its live events)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest
from factories import OWNER, claim, key, member_change, members, terms
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
