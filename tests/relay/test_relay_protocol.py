"""The relay over raw WebSockets against a live server: NIP-11, AUTH, EVENT with every refusal
prefix, REQ/EOSE/CLOSE, COUNT, live delivery, and what a careless or hostile client sends."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from factories import (
    MEMBER,
    OWNER,
    OWNER2,
    STRANGER,
    Live,
    allow_connections,
    claim,
    evidence,
    link,
    profile,
    terms,
)
from relay_client import Client, ws_url

from tms.ledger.service import Ledger
from tms.relay.limits import MAX_FILTERS, MAX_LIMIT, MAX_MESSAGE_BYTES, MAX_SUBSCRIPTIONS
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio


def now() -> int:
    return int(time.time())


async def member(live: Live, path: str = "/c/rel") -> Client:
    client = await Client.open(ws_url(live.url, path))
    ok = await client.auth(MEMBER)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


# --- NIP-11 -------------------------------------------------------------------------------------


def test_nip11_on_the_root_and_every_collection_with_cors(live: Live) -> None:
    for path in ("/", "/c/rel", "/c/no-such"):
        answer = httpx.get(live.url + path, headers={"Accept": "application/nostr+json"})
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("application/nostr+json")
        assert answer.headers["access-control-allow-origin"] == "*"
        document = answer.json()
        assert {1, 11, 42, 45, 50} <= set(document["supported_nips"])
        limits = document["limitation"]
        assert limits["max_message_length"] == MAX_MESSAGE_BYTES
        assert limits["max_subscriptions"] == MAX_SUBSCRIPTIONS
        assert limits["max_filters"] == MAX_FILTERS
        assert limits["max_limit"] == MAX_LIMIT
        # NIP-11's auth_required is AUTH before any action at all: writing needs none here
        # (test_event_ok_duplicate_and_every_refusal_prefix), reading does
        assert limits["auth_required"] is False and limits["restricted_writes"] is True
        assert document["software"] and document["version"]
    existing = httpx.get(live.url + "/c/rel", headers={"Accept": "application/nostr+json"})
    missing = httpx.get(live.url + "/c/zzz", headers={"Accept": "application/nostr+json"})
    # no existence oracle: the same document, but for the slug it names
    named = existing.json()
    named["name"] = named["name"].replace("rel", "zzz")
    named["description"] = named["description"].replace("'rel'", "'zzz'")
    assert named == missing.json()
    page = httpx.get(live.url + "/", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "<html" in page.text  # a browser's GET stays the page


# --- AUTH ---------------------------------------------------------------------------------------


async def test_auth_accepts_the_challenge_for_this_relay_and_refuses_the_rest(live: Live) -> None:
    url = ws_url(live.url, "/c/rel")
    async with await Client.open(url) as client:
        wrong_challenge = await client.auth(MEMBER, challenge="not-it")
        assert wrong_challenge[2] is False and wrong_challenge[3].startswith("invalid: ")
        assert "challenge" in wrong_challenge[3]
        wrong_relay = await client.auth(MEMBER, relay=ws_url(live.url, "/c/other"))
        assert wrong_relay[2] is False and "relay tag" in wrong_relay[3]
        stale = await client.auth(MEMBER, created_at=now() - 3600)
        assert stale[2] is False and "created_at" in stale[3]
        wrong_kind = await client.auth(MEMBER, kind=1)
        assert wrong_kind[2] is False and "22242" in wrong_kind[3]
        # the normalisation clients apply: a trailing slash, an upper-case host
        ok = await client.auth(MEMBER, relay=url.replace("127.0.0.1", "127.0.0.1") + "/")
        assert ok == ["OK", ok[1], True, ""]


async def test_reads_need_auth_and_a_key_that_may_read(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/c/rel")) as client:
        events, end = await client.req("s", {"kinds": [4705]})
        assert events == [] and end[0] == "CLOSED" and end[2].startswith("auth-required: ")
        await client.send(["COUNT", "c", {}])
        counted = await client.recv()
        assert counted[0] == "CLOSED" and counted[2].startswith("auth-required: ")
    answers = []
    for path in ("/c/rel", "/c/nope"):
        async with await Client.open(ws_url(live.url, path)) as client:
            assert (await client.auth(STRANGER))[2] is True
            _, end = await client.req("s", {})
            answers.append(end)
    assert answers[0][2].startswith("restricted: ")
    # a collection that does not exist answers exactly as one closed to the key
    assert answers[0][2].replace("'rel'", "'nope'") == answers[1][2]


async def test_a_member_reads_the_collection_newest_first(live: Live) -> None:
    async with await member(live) as client:
        events, end = await client.req("s", {})
        assert end == ["EOSE", "s"]
        kinds = [e["kind"] for e in events]
        assert 4705 in kinds and 4706 in kinds  # the member list, and its people's terms
        assert all(
            e["kind"] != 4705 or json.loads(e["content"])["collection"] == "rel" for e in events
        )
        await client.send(["COUNT", "c", {"kinds": [4705]}])
        assert await client.recv() == ["COUNT", "c", {"count": 1}]


# --- EVENT --------------------------------------------------------------------------------------


async def test_event_ok_duplicate_and_every_refusal_prefix(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/")) as client:  # writes need no AUTH
        fresh = claim(MEMBER, "rel", f"claim at {time.time_ns()}", created_at=now())
        assert await client.publish(fresh) == ["OK", fresh["id"], True, ""]
        again = await client.publish(fresh)
        assert again[2] is True and again[3].startswith("duplicate: ")
        forged = dict(fresh, content=fresh["content"].replace("claim", "claym"))
        bad = await client.publish(forged)
        assert bad[2] is False and bad[3].startswith("invalid: ") and "id does not match" in bad[3]
        closed = await client.publish(claim(MEMBER, "other", "not mine", created_at=now()))
        assert closed[2] is False and closed[3].startswith("restricted: ")
        assert "not a member of collection 'other'" in closed[3]
        unknown = await client.publish(claim(STRANGER, "rel", "who am I", created_at=now()))
        assert unknown[2] is False and unknown[3].startswith("blocked: ")
        ev = evidence(MEMBER, "rel", "The sky is blue on clear days.", created_at=now())
        c = claim(MEMBER, "rel", f"Sky colour {time.time_ns()}", created_at=now())
        assert (await client.publish(ev))[2] and (await client.publish(c))[2]
        miss = await client.publish(
            link(MEMBER, "rel", ev["id"], c["id"], "the sky is grean", created_at=now())
        )
        assert miss[2] is False and miss[3].startswith("invalid: ")
        assert "quote not found" in miss[3] and "nearest" in miss[3]
        assert "events[0]" not in miss[3]  # the OK names the event already
        future = await client.publish(claim(MEMBER, "rel", "later", created_at=now() + 7200))
        assert future[2] is False and future[3].startswith("invalid: ")


async def test_a_collection_relay_refuses_another_collections_events(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/c/rel")) as client:
        other = claim(OWNER2, "other", "belongs elsewhere", created_at=now())
        answer = await client.publish(other)
        assert answer[2] is False and answer[3].startswith("invalid: ")
        assert "/c/other" in answer[3]
        # profiles and terms belong to no collection: welcome on any
        assert (await client.publish(profile(MEMBER, "member", created_at=now())))[2] is True
        assert (await client.publish(terms(MEMBER, created_at=now())))[2] is True


async def test_events_of_one_connection_are_judged_in_order(live: Live) -> None:
    """A link sent right behind its evidence and claim, without waiting for their OKs."""
    ev = evidence(MEMBER, "rel", "Water boils at 100 degrees at sea level.", created_at=now())
    c = claim(MEMBER, "rel", f"Boiling point {time.time_ns()}", created_at=now())
    ln = link(MEMBER, "rel", ev["id"], c["id"], "boils at 100 degrees", created_at=now())
    async with await Client.open(ws_url(live.url, "/c/rel")) as client:
        for event in (ev, c, ln):
            await client.send(["EVENT", event])
        answers = [await client.recv() for _ in range(3)]
    assert answers == [["OK", e["id"], True, ""] for e in (ev, c, ln)]


# --- REQ, live ----------------------------------------------------------------------------------


async def test_live_events_reach_a_subscriber_after_eose_in_order(live: Live) -> None:
    async with await member(live) as reader, await Client.open(ws_url(live.url, "/")) as writer:
        _, end = await reader.req("live", {"kinds": [4701, 4702, 4703], "limit": 0})
        assert end == ["EOSE", "live"]
        ev = evidence(MEMBER, "rel", "Cats sleep most of the day.", created_at=now())
        c = claim(MEMBER, "rel", f"Cats sleep a lot {time.time_ns()}", created_at=now())
        ln = link(MEMBER, "rel", ev["id"], c["id"], "sleep most of the day", created_at=now())
        for event in (ev, c, ln):
            assert (await writer.publish(event))[2] is True
        got = [await reader.recv() for _ in range(3)]
        assert [m[0] for m in got] == ["EVENT"] * 3
        assert [m[2]["id"] for m in got] == [ev["id"], c["id"], ln["id"]]
        assert await reader.silent()
        other = claim(OWNER2, "other", "elsewhere", created_at=now())
        assert (await writer.publish(other))[2] is True
        assert await reader.silent()  # another collection's events never come here
        await reader.send(["CLOSE", "live"])
        # NIP-01 answers no CLOSE; a COUNT after it is answered once the CLOSE is handled
        # (a connection's messages are handled in order), so the claim below comes after it
        await reader.send(["COUNT", "after-close", {"kinds": [4702]}])
        assert (await reader.recv())[:2] == ["COUNT", "after-close"]
        more = claim(MEMBER, "rel", f"after close {time.time_ns()}", created_at=now())
        assert (await writer.publish(more))[2] is True
        assert await reader.silent()


async def test_a_big_batch_reaches_every_subscriber_whole_in_order(live: Live) -> None:
    """A batch's events go to each subscriber many to a write (`send_texts`): every one comes,
    once, in commit order; and a writer with many events in flight gets an OK for each."""
    readers = [await member(live), await member(live), await member(live, "/")]
    try:
        for n, reader in enumerate(readers):
            _, end = await reader.req(f"s{n}", {"kinds": [4702], "limit": 0})
            assert end[0] == "EOSE"
        batch = [
            claim(MEMBER, "rel", f"batch {n} {time.time_ns()}", created_at=now())
            for n in range(300)
        ]
        pool = await open_pool(live.database_url, min_size=1, max_size=1)
        try:
            await Ledger(pool).submit(batch, origin=OPERATOR)
        finally:
            await pool.close()
        for reader in readers:
            got = [await reader.recv() for _ in batch]
            assert [m[2]["id"] for m in got] == [e["id"] for e in batch]
            assert await reader.silent()
        async with await Client.open(ws_url(live.url, "/c/rel")) as writer:
            many = [
                claim(MEMBER, "rel", f"piped {n} {time.time_ns()}", created_at=now())
                for n in range(100)
            ]
            for event in many:
                await writer.send(["EVENT", event])
            oks = [await writer.recv() for _ in many]
            assert {m[1] for m in oks} == {e["id"] for e in many}
            assert all(m[0] == "OK" and m[2] is True for m in oks)
        for reader in readers:
            got = [await reader.recv() for _ in many]
            assert [m[2]["id"] for m in got] == [e["id"] for e in many]
    finally:
        for reader in readers:
            await reader.close()


async def test_the_root_relay_follows_every_collection_the_key_reads(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/")) as reader:
        assert (await reader.auth(OWNER2))[2] is True
        _, end = await reader.req("all", {"kinds": [4702], "limit": 0})
        assert end == ["EOSE", "all"]
        mine = claim(OWNER2, "other", f"root sees it {time.time_ns()}", created_at=now())
        async with await Client.open(ws_url(live.url, "/")) as writer:
            assert (await writer.publish(mine))[2] is True
            theirs = claim(MEMBER, "rel", f"not for owner2 {time.time_ns()}", created_at=now())
            assert (await writer.publish(theirs))[2] is True
        got = await reader.recv()
        assert got[0] == "EVENT" and got[2]["id"] == mine["id"]
        assert await reader.silent()


# --- what a careless or hostile client sends ----------------------------------------------------


async def test_malformed_and_unknown_messages_get_a_notice_and_the_connection_stays(
    live: Live,
) -> None:
    async with await member(live) as client:
        for junk in (
            "not json",
            "{}",
            "[]",
            "[1]",
            '["HELLO"]',
            '["REQ"]',
            '["CLOSE"]',
            '["EVENT", {}]',
        ):
            await client.send(junk)
            answer = await client.recv()
            assert answer[0] == "NOTICE" and answer[1].startswith("invalid: "), (junk, answer)
        await client.send(["REQ", "x" * 65, {}])
        assert (await client.recv())[0] == "NOTICE"
        _, end = await client.req("bad", {"ids": ["abc"]})
        assert end[0] == "CLOSED" and end[2].startswith("invalid: ") and "64-character" in end[2]
        _, end = await client.req("bad", {"colour": "red"})
        assert end[0] == "CLOSED" and "unknown filter field 'colour'" in end[2]
        _, end = await client.req("bad", *([{}] * (MAX_FILTERS + 1)))
        assert end[0] == "CLOSED" and str(MAX_FILTERS) in end[2]
        _, end = await client.req("bad", {"limit": MAX_LIMIT + 1})
        assert end[0] == "CLOSED" and str(MAX_LIMIT) in end[2]
        _, end = await client.req("ok", {"kinds": [4705]})
        assert end == ["EOSE", "ok"]
        assert httpx.get(live.url + "/healthz").status_code == 200


async def test_a_huge_message_is_refused_with_the_number(live: Live) -> None:
    async with await member(live) as client:
        await client.send('["EVENT",' + " " * (MAX_MESSAGE_BYTES + 10) + "]")
        answer = await client.recv(30)
        assert answer[0] == "NOTICE" and f"{MAX_MESSAGE_BYTES:,}" in answer[1]
        _, end = await client.req("still", {"kinds": [4705]})
        assert end == ["EOSE", "still"]


async def test_subscriptions_beyond_the_limit_are_closed_with_the_number(live: Live) -> None:
    async with await member(live) as client:
        for n in range(1000):
            await client.send(["REQ", f"s{n}", {"kinds": [4705], "limit": 0}])
        answers = [await client.recv() for _ in range(1000)]
        eose = [a for a in answers if a[0] == "EOSE"]
        closed = [a for a in answers if a[0] == "CLOSED"]
        assert len(eose) == MAX_SUBSCRIPTIONS and len(closed) == 1000 - MAX_SUBSCRIPTIONS
        assert all(str(MAX_SUBSCRIPTIONS) in a[2] for a in closed)
    assert httpx.get(live.url + "/healthz").status_code == 200


async def test_a_client_that_leaves_mid_auth_harms_nothing(live: Live) -> None:
    for _ in range(20):
        client = await Client.open(ws_url(live.url, "/c/rel"))
        event = MEMBER.sign(
            22242, "", now(), [["relay", client.url], ["challenge", client.challenge]]
        )
        await client.ws.send(json.dumps(["AUTH", event.to_dict()]))
        client.ws.transport.abort()  # gone before the OK
    await asyncio.sleep(0.2)
    assert httpx.get(live.url + "/healthz").status_code == 200
    async with await member(live) as client:
        _, end = await client.req("fine", {"kinds": [4705]})
        assert end == ["EOSE", "fine"]


async def test_signed_search_ranks_claims_then_ends(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/")) as writer:
        mark = time.time_ns()
        for text in (f"Zebras are striped {mark}", f"Horses gallop {mark}"):
            assert (await writer.publish(claim(MEMBER, "rel", text, created_at=now())))[2]
    async with await member(live) as client:
        events, end = await client.req("q", {"search": "zebras striped"})
        assert events and "Zebras" in json.loads(events[0]["content"])["text"]
        assert end == ["EOSE", "q"]
        closed = await client.recv()
        assert closed[0] == "CLOSED" and closed[2].startswith("unsupported: ")
        _, end = await client.req("q2", {"search": "x", "kinds": [4701]})
        assert end[0] == "CLOSED" and "4702" in end[2]


async def test_profiles_of_the_collections_people_only(live: Live) -> None:
    async with await Client.open(ws_url(live.url, "/")) as writer:
        assert (await writer.publish(profile(MEMBER, "Member One", created_at=now())))[2]
        assert (await writer.publish(profile(OWNER2, "Owner Two", created_at=now())))[2]
    async with await member(live) as client:
        events, _ = await client.req("p", {"kinds": [0]})
        names = {json.loads(e["content"])["name"] for e in events}
        assert "Member One" in names and "Owner Two" not in names
        tagged, _ = await client.req("t", {"#p": [OWNER.pubkey]})
        assert tagged == []  # TMS's own kinds carry no tags; only a profile could match


async def test_a_database_outage_is_an_error_never_a_crash(live: Live, pg_server_url: str) -> None:
    """Last in this module: it closes the database for a moment."""
    async with await member(live) as client:
        await allow_connections(pg_server_url, live.database_url, False)
        try:
            answer = await client.publish(
                claim(MEMBER, "rel", f"while down {time.time_ns()}", created_at=now())
            )
            assert (
                answer[2] is False and answer[3] == "error: database unavailable, try again shortly"
            )
            _, end = await client.req("down", {"kinds": [4705]})
            assert end == ["CLOSED", "down", "error: database unavailable, try again shortly"]
        finally:
            await allow_connections(pg_server_url, live.database_url, True)
        for _ in range(50):  # and back it comes, on the same connection
            _, end = await client.req("up", {"kinds": [4705]})
            if end[0] == "EOSE":
                break
            await asyncio.sleep(0.2)
        assert end == ["EOSE", "up"]
