"""NIP-77 on a live relay over raw WebSockets, with tms.nostr.negentropy's Initiator as the
client: reconciliation from empty and with differences on both sides, over a collection's relay
and the root, the same refusals as REQ (auth-required, restricted identical for a missing and a
forbidden collection), NEG-ERR for an unknown or closed session, a bad message and the session
cap, and the item list's own cap; a kept list answers every filter exactly as the index does,
through new events, a budget that keeps nothing and a list past the cap."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from factories import (
    MEMBER,
    OWNER,
    OWNER2,
    STRANGER,
    Live,
    claim,
    evidence,
    members,
    profile,
    settings,
)
from relay_client import Client, Said, in_process_relay, seed, ws_url

from tms.ledger.access import Access
from tms.ledger.read.negentropy_items import ItemCache, TooMany, negentropy_items
from tms.ledger.service import Ledger
from tms.nostr.filters import parse_filter
from tms.nostr.negentropy import Initiator, Items
from tms.relay.connection import Connection
from tms.relay.limits import MAX_NEG_SESSIONS, NEG_CACHE_BYTES
from tms.relay.shared import open_relay
from tms.rules.admission import OPERATOR
from tms.runtime import open_runtime
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

CLAIMS = 120


@pytest.fixture(scope="module")
async def stored(live: Live) -> AsyncIterator[list[dict[str, Any]]]:
    """CLAIMS claims in `rel`, many sharing a created_at (so bounds need id prefixes), and one
    in `other`, which MEMBER may not read."""
    pool = await open_pool(live.database_url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        start = int(time.time()) - 1000
        events = [
            claim(
                MEMBER,
                "rel",
                f"negentropy claim {i} {os.urandom(4).hex()}",
                created_at=start + i // 7,
            )
            for i in range(CLAIMS)
        ]
        await ledger.submit(events, origin=OPERATOR)
        await ledger.submit(
            [claim(OWNER2, "other", "not for the member", created_at=start)], origin=OPERATOR
        )
        yield events
    finally:
        await pool.close()


async def member(live: Live, path: str) -> Client:
    client = await Client.open(ws_url(live.url, path))
    ok = await client.auth(MEMBER)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


async def sync(
    client: Client, sub_id: str, wanted: dict[str, Any] | list[dict[str, Any]], mine: Items
) -> tuple[set[str], set[str], int]:
    """Run NIP-77 to the end as the initiator: the ids we have, those we need, the rounds."""
    initiator = Initiator(mine, 60_000)
    await client.send(["NEG-OPEN", sub_id, wanted, initiator.initiate().hex()])
    have: set[str] = set()
    need: set[str] = set()
    for rounds in range(1, 100):
        answer = await client.recv()
        assert answer[0] == "NEG-MSG" and answer[1] == sub_id, answer
        message, has, needs = initiator.reconcile(bytes.fromhex(answer[2]))
        have.update(i.hex() for i in has)
        need.update(i.hex() for i in needs)
        if message is None:
            await client.send(["NEG-CLOSE", sub_id])
            return have, need, rounds
        await client.send(["NEG-MSG", sub_id, message.hex()])
    raise AssertionError("the reconciliation did not end")


def items_of(events: list[dict[str, Any]]) -> Items:
    return Items.of((e["created_at"], bytes.fromhex(e["id"])) for e in events)


def test_nip11_says_nip_77(live: Live) -> None:
    answer = httpx.get(live.url + "/c/rel", headers={"Accept": "application/nostr+json"})
    assert 77 in answer.json()["supported_nips"]


@pytest.mark.parametrize("path", ["/c/rel", "/"])
async def test_a_member_reconciles_from_empty_what_req_returns(
    live: Live, stored: list[dict[str, Any]], path: str
) -> None:
    async with await member(live, path) as client:
        have, need, _ = await sync(client, "neg", {"kinds": [4702]}, items_of([]))
        events, end = await client.req("all", {"kinds": [4702], "limit": 1000})
        assert end[0] == "EOSE"
        assert not have
        assert need == {e["id"] for e in events}
        assert {e["id"] for e in stored} <= need  # and nothing of `other`
        assert all(e["content"].find('"other"') < 0 for e in events)


async def test_differences_on_both_sides_are_found_exactly(
    live: Live, stored: list[dict[str, Any]]
) -> None:
    kept = stored[10:]  # the client lacks 10 of the relay's
    extra = [
        claim(MEMBER, "rel", f"only the client {i}", created_at=stored[50]["created_at"])
        for i in range(5)
    ]
    async with await member(live, "/c/rel") as client:
        listed, _ = await client.req("a", {"kinds": [4702], "limit": 1000})
        have, need, rounds = await sync(client, "neg", {"kinds": [4702]}, items_of(kept + extra))
        assert have == {e["id"] for e in extra}
        assert need == {e["id"] for e in listed} - {e["id"] for e in kept}
        assert {e["id"] for e in stored[:10]} <= need
        assert rounds <= 4


async def test_a_filter_narrows_the_set(live: Live, stored: list[dict[str, Any]]) -> None:
    since = stored[70]["created_at"]
    async with await member(live, "/c/rel") as client:
        _, need, _ = await sync(
            client,
            "neg",
            {"kinds": [4702], "authors": [MEMBER.pubkey], "since": since},
            items_of([]),
        )
        assert need == {e["id"] for e in stored if e["created_at"] >= since}


async def test_ndk_s_shapes_are_taken_a_trailing_slash_and_a_filter_in_an_array(
    live: Live, stored: list[dict[str, Any]]
) -> None:
    """NDK names every relay with a trailing slash (its URL normalizer) and sends NEG-OPEN's
    filter in an array: the same relay, and one filter taken; two are refused."""
    async with await Client.open(ws_url(live.url, "/c/rel/")) as client:
        ok = await client.auth(MEMBER)  # its AUTH names the URL with the slash
        assert ok[0] == "OK" and ok[2] is True, ok
        _, need, _ = await sync(client, "neg", [{"kinds": [4702]}], items_of([]))
        assert {e["id"] for e in stored} <= need
        empty = Initiator(items_of([])).initiate().hex()
        await client.send(["NEG-OPEN", "two", [{"kinds": [4702]}, {"kinds": [4701]}], empty])
        refused = await client.recv()
        assert refused[:2] == ["NEG-ERR", "two"] and refused[2].startswith("invalid: "), refused


async def test_refusals_are_those_of_req(live: Live, stored: list[dict[str, Any]]) -> None:
    empty = Initiator(items_of([])).initiate().hex()
    async with await Client.open(ws_url(live.url, "/c/rel")) as anonymous:
        await anonymous.send(["NEG-OPEN", "n", {}, empty])
        refused = await anonymous.recv()
        _, closed = await anonymous.req("r", {})
        assert refused[0] == "NEG-ERR" and refused[1] == "n"
        assert refused[2].startswith("auth-required: ") and refused[2] == closed[2]
    said = {}
    for slug in ("other", "no-such"):
        async with await member(live, f"/c/{slug}") as client:
            await client.send(["NEG-OPEN", "n", {}, empty])
            refused = await client.recv()
            _, closed = await client.req("r", {})
            assert refused[0] == "NEG-ERR" and refused[2].startswith("restricted: ")
            assert refused[2] == closed[2]
            said[slug] = refused[2].replace(slug, "<slug>")
    assert said["other"] == said["no-such"]  # a missing collection and a closed one alike
    async with await Client.open(ws_url(live.url, "/")) as stranger:
        assert (await stranger.auth(STRANGER))[2] is True
        await stranger.send(["NEG-OPEN", "n", {}, empty])
        refused = await stranger.recv()
        assert refused[0] == "NEG-ERR" and refused[2].startswith("restricted: ")


async def test_neg_err_for_unknown_closed_and_bad_sessions(
    live: Live, stored: list[dict[str, Any]]
) -> None:
    empty = Initiator(items_of([])).initiate().hex()
    async with await member(live, "/c/rel") as client:
        await client.send(["NEG-MSG", "nope", empty])
        unknown = await client.recv()
        assert unknown[:2] == ["NEG-ERR", "nope"] and unknown[2].startswith("closed: ")
        await client.send(["NEG-OPEN", "s", {}, "zz"])
        bad_hex = await client.recv()
        assert bad_hex[:2] == ["NEG-ERR", "s"] and bad_hex[2].startswith("invalid: ")
        await client.send(["NEG-OPEN", "s", {}, "6102"])  # a bound cut short
        bad = await client.recv()
        assert bad[:2] == ["NEG-ERR", "s"] and bad[2].startswith("invalid: ")
        await client.send(["NEG-MSG", "s", empty])  # the bad message ended the session
        assert (await client.recv())[2].startswith("closed: ")
        await client.send(["NEG-OPEN", "s", {}, empty])
        assert (await client.recv())[0] == "NEG-MSG"
        await client.send(["NEG-CLOSE", "s"])
        await client.send(["NEG-MSG", "s", empty])
        assert (await client.recv())[2].startswith("closed: ")
        await client.send(["NEG-OPEN", "s", {}, "62"])  # another version: ours, and nothing else
        assert (await client.recv()) == ["NEG-MSG", "s", "61"]
        await client.send(["NEG-OPEN", "s", {"search": "x"}, empty])
        assert (await client.recv())[2].startswith("invalid: ")
        await client.send(["NEG-OPEN", "s"])
        assert (await client.recv())[0] == "NOTICE"


async def test_sessions_per_connection_are_capped(live: Live, stored: list[dict[str, Any]]) -> None:
    empty = Initiator(items_of([])).initiate().hex()
    async with await member(live, "/c/rel") as client:
        for n in range(MAX_NEG_SESSIONS):
            await client.send(["NEG-OPEN", f"s{n}", {}, empty])
            assert (await client.recv())[0] == "NEG-MSG"
        await client.send(["NEG-OPEN", "one-more", {}, empty])
        refused = await client.recv()
        assert refused[:2] == ["NEG-ERR", "one-more"] and refused[2].startswith("blocked: ")
        await client.send(["NEG-OPEN", "s0", {}, empty])  # the same id replaces its session
        assert (await client.recv())[0] == "NEG-MSG"
        await client.send(["NEG-CLOSE", "s1"])
        await client.send(["NEG-OPEN", "one-more", {}, empty])
        assert (await client.recv())[0] == "NEG-MSG"


async def test_the_item_list_stops_past_its_cap(live: Live, stored: list[dict[str, Any]]) -> None:
    pool = await open_pool(live.database_url, min_size=1, max_size=2)
    try:
        scope = (await Access(pool).reader(MEMBER.pubkey)).collection("rel")
        wanted = parse_filter({"kinds": [4702]}, max_limit=1000)
        found = await negentropy_items(pool, scope, wanted, CLAIMS + 100)
        assert {found.id(i).hex() for i in range(len(found))} >= {e["id"] for e in stored}
        with pytest.raises(TooMany):
            await negentropy_items(pool, scope, wanted, CLAIMS - 1)
    finally:
        await pool.close()


# After the tests that read the module's `rel`: it publishes into it.
async def test_a_kept_list_answers_as_the_index_does_through_new_events(
    live: Live, stored: list[dict[str, Any]]
) -> None:
    pool = await open_pool(live.database_url, min_size=1, max_size=2)
    try:
        reader = await Access(pool).reader(MEMBER.pubkey)
        scopes = [reader.collection("rel"), reader]  # a collection's relay, and the root's
        middle = stored[60]["created_at"]
        filters = [
            {},
            {"kinds": [4702]},
            {"kinds": [4701]},
            {"kinds": [0, 4706]},  # the people's profiles and terms only
            {"kinds": [4702, 4706], "since": middle},
            {"until": middle},
            {"since": middle, "until": middle},
        ]
        cache = ItemCache(NEG_CACHE_BYTES)
        nothing_kept = ItemCache(1)

        async def same() -> None:
            for scope in scopes:
                for raw in filters:
                    wanted = parse_filter(raw, max_limit=1000)
                    read = await negentropy_items(pool, scope, wanted, 10_000)
                    for kept_by in (cache, nothing_kept):
                        kept = await negentropy_items(pool, scope, wanted, 10_000, kept_by)
                        assert kept.blob(0, len(kept)) == read.blob(0, len(read)), raw
                        assert kept.timestamps.tolist() == read.timestamps.tolist(), raw

        await same()
        assert "rel" in cache._kept and not nothing_kept._kept
        # the sessions that ask the same of a collection share one sealed list
        rel, claims = reader.collection("rel"), parse_filter({"kinds": [4702]}, max_limit=1000)
        shared = await negentropy_items(pool, rel, claims, 10_000, cache)
        assert await negentropy_items(pool, rel, claims, 10_000, cache) is shared
        # Events committed since: ties on a kept timestamp (ordered by id), older and newer
        # ones, another kind, and a profile of one of the people.
        ledger = Ledger(pool)
        await ledger.submit(
            [
                claim(MEMBER, "rel", f"tie {i} {os.urandom(4).hex()}", created_at=middle)
                for i in range(5)
            ]
            + [claim(MEMBER, "rel", f"old {os.urandom(4).hex()}", created_at=middle - 10_000)]
            + [
                evidence(
                    MEMBER, "rel", f"new evidence {os.urandom(4).hex()}", created_at=middle + 9
                )
            ]
            + [profile(MEMBER, "member", created_at=middle + 1)],
            origin=OPERATOR,
        )
        await same()
        assert await negentropy_items(pool, rel, claims, 10_000, cache) is not shared
        kept = cache._kept["rel"]
        assert len(kept.ts) == CLAIMS + 1 + 7 and 4701 in kept.present  # and its member list
        # Past the cap: refused as before, and never kept again.
        wanted = parse_filter({"kinds": [4702]}, max_limit=1000)
        with pytest.raises(TooMany):
            await negentropy_items(pool, reader.collection("rel"), wanted, CLAIMS - 1, cache)
        assert "rel" not in cache._kept and "rel" in cache._too_long
        narrow = parse_filter({"kinds": [4702], "since": middle + 1}, max_limit=1000)
        few = await negentropy_items(pool, reader.collection("rel"), narrow, CLAIMS - 1, cache)
        assert len(few) == len(
            await negentropy_items(pool, reader.collection("rel"), narrow, CLAIMS)
        )
    finally:
        await pool.close()


async def test_a_sessions_list_counts_against_the_process_memory_budget(db_url: str) -> None:
    """A relay whose connections may hold 4 KB in all: one session over 100 claims (7 KB of
    list) is let in on a process that holds nothing else; a second connection's NEG-OPEN of
    another list (a narrower filter) is then refused `blocked:` saying why, one of the very
    same list (the collection's kept list, shared) is let in without counting it twice, and the
    narrower one is let in once the lists are let go."""
    await seed(db_url)
    start = int(time.time()) - 1000
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        claims = [claim(MEMBER, "rel", f"listed {n}", created_at=start + n) for n in range(100)]
        await Ledger(pool).submit(claims, origin=OPERATOR)
    finally:
        await pool.close()
    said: dict[str, list[list[Any]]] = {"a": [], "b": []}

    def recorder(name: str) -> Callable[[str], Awaitable[None]]:
        async def send(text: str) -> None:
            said[name].append(json.loads(text))

        return send

    empty = Initiator(items_of([])).initiate().hex()
    async with in_process_relay(db_url, memory_bytes=4096) as relay:
        a, b = (
            Connection(
                relay, recorder(n), slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
            )
            for n in ("a", "b")
        )
        for conn in (a, b):
            await conn.open()
        await until(lambda: a.outbox.queued_bytes == b.outbox.queued_bytes == 0)
        await a.handle(json.dumps(["NEG-OPEN", "n", {"kinds": [4702]}, empty]))
        await until(lambda: len(said["a"]) == 2)
        assert said["a"][1][:2] == ["NEG-MSG", "n"], said["a"]
        assert (one := relay.memory.used) > 4096
        narrower = {"kinds": [4702], "since": start + 50}
        await b.handle(json.dumps(["NEG-OPEN", "n", narrower, empty]))
        await until(lambda: len(said["b"]) == 2)
        assert said["b"][1][:2] == ["NEG-ERR", "n"], said["b"]
        assert said["b"][1][2].startswith("blocked: this relay is short of memory for NEG")
        await b.handle(json.dumps(["NEG-OPEN", "same", {"kinds": [4702]}, empty]))
        await until(lambda: len(said["b"]) == 3)
        assert said["b"][2][:2] == ["NEG-MSG", "same"], said["b"]
        assert relay.memory.used == one  # the same list, held once
        await a.handle(json.dumps(["NEG-CLOSE", "n"]))
        assert relay.memory.used == one  # still held by b's session
        await b.handle(json.dumps(["NEG-CLOSE", "same"]))
        await b.handle(json.dumps(["NEG-OPEN", "n", narrower, empty]))
        await until(lambda: len(said["b"]) == 4)
        assert said["b"][3][:2] == ["NEG-MSG", "n"], said["b"]
        for conn in (a, b):
            await conn.close()
        assert relay.memory.used == 0


async def test_a_list_read_across_a_removal_is_not_answered(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal commits while a NEG-OPEN's list is read (held open by a hook around the real
    read), and a claim after it: its id is in the list, and must not go out. The session ends
    with NEG-ERR `closed:` instead of a NEG-MSG."""
    from tms.relay import negentropy as relay_negentropy

    await seed(db_url)
    start = int(time.time()) - 1000
    real = relay_negentropy.negentropy_items
    reached, go = asyncio.Event(), asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> Items:
        reached.set()
        await go.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(relay_negentropy, "negentropy_items", held)
    said = Said()

    empty = Initiator(items_of([])).initiate().hex()
    async with in_process_relay(db_url) as relay:
        conn = Connection(
            relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        opening = asyncio.create_task(
            conn.handle(json.dumps(["NEG-OPEN", "n", {"kinds": [4702]}, empty]))
        )
        await asyncio.wait_for(reached.wait(), 10)
        pool = await open_pool(db_url, min_size=1, max_size=1)
        try:
            ledger = Ledger(pool)
            await ledger.submit([members(OWNER, "rel", [], created_at=start)], origin=OPERATOR)
            await ledger.submit(
                [claim(OWNER, "rel", "after the removal", created_at=start + 1)], origin=OPERATOR
            )
        finally:
            await pool.close()
        go.set()
        await asyncio.wait_for(opening, 10)
        await until(lambda: len(said) == 2)
        await conn.close()
    assert said[1][:2] == ["NEG-ERR", "n"], said
    assert said[1][2].startswith("closed: what this key may read changed")


@pytest.mark.parametrize("how", ["NEG-CLOSE", "gone"])
async def test_a_list_being_read_stops_when_its_session_or_connection_ends(
    db_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A NEG-OPEN's list is read as a task of its own (held here by a read that never ends): a
    NEG-CLOSE or the connection's end cancels it, and the connection goes on meanwhile (a REQ
    sent behind it is answered)."""
    from tms.relay import negentropy as relay_negentropy

    await seed(db_url)
    reached, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(*args: Any, **kwargs: Any) -> Items:
        reached.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("never")

    monkeypatch.setattr(relay_negentropy, "negentropy_items", forever)
    said = Said()

    empty = Initiator(items_of([])).initiate().hex()
    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        conn = Connection(
            relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        await asyncio.wait_for(
            conn.handle(json.dumps(["NEG-OPEN", "n", {"kinds": [4702]}, empty])), 10
        )
        await asyncio.wait_for(reached.wait(), 10)
        await conn.handle(json.dumps(["REQ", "s", {"kinds": [4705]}]))
        await until(lambda: ["EOSE", "s"] in said)
        if how == "NEG-CLOSE":
            await conn.handle(json.dumps(["NEG-CLOSE", "n"]))
        else:
            await conn.close()
        await asyncio.wait_for(cancelled.wait(), 10)
        if how == "NEG-CLOSE":
            await conn.close()
        assert relay.memory.used == 0
    assert not [m for m in said if m[0].startswith("NEG")], said


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_the_first_sync_after_a_start_finds_the_largest_collections_list_kept(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relay that keeps the largest collection's list from its start (`neg_warm=1`): it loads
    `rel` (the larger) and not `other`, and the first NEG session after the start reads no
    whole list from the database; what it is answered from is what the index gives."""
    from tms.ledger.read import negentropy_items as items_module

    await seed(db_url)
    start = int(time.time()) - 1000
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        ledger = Ledger(pool)
        await ledger.submit(
            [claim(MEMBER, "rel", f"kept {n}", created_at=start + n // 3) for n in range(60)],
            origin=OPERATOR,
        )
        await ledger.submit([claim(OWNER2, "other", "small", created_at=start)], origin=OPERATOR)
    finally:
        await pool.close()
    real_load = items_module._load
    whole_reads: list[str] = []

    async def counted(pool: Any, slug: str, cap: int) -> Any:
        whole_reads.append(slug)
        return await real_load(pool, slug, cap)

    monkeypatch.setattr(items_module, "_load", counted)
    said = Said()

    async with in_process_relay(db_url, neg_warm=1) as relay:
        await until(lambda: "rel" in relay.neg_items._kept)
        assert whole_reads == ["rel"] and "other" not in relay.neg_items._kept
        conn = Connection(
            relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        initiator = Initiator(items_of([]), 60_000)
        await conn.handle(
            json.dumps(["NEG-OPEN", "n", {"kinds": [4702]}, initiator.initiate().hex()])
        )
        await until(lambda: any(m[0] in ("NEG-MSG", "NEG-ERR") for m in said))
        answer = next(m for m in said if m[0] in ("NEG-MSG", "NEG-ERR"))
        assert answer[:2] == ["NEG-MSG", "n"], answer
        _, _, need = initiator.reconcile(bytes.fromhex(answer[2]))
        await conn.close()
        assert whole_reads == ["rel"]  # the session read what was committed since, no more
        pool = await open_pool(db_url, min_size=1, max_size=1)
        try:
            scope = (await Access(pool).reader(MEMBER.pubkey)).collection("rel")
            wanted = parse_filter({"kinds": [4702]}, max_limit=1000)
            read = await negentropy_items(pool, scope, wanted, 10_000)
        finally:
            await pool.close()
    assert {i.hex() for i in need} == {read.id(i).hex() for i in range(len(read))}
    assert len(need) == 60


async def test_a_large_import_since_a_list_was_kept_reads_the_list_again(
    live: Live, stored: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a share of the kept list committed since (here: more than 2), a session reads the
    whole list again, by COPY, rather than the new events one by one; the answer is the
    index's either way."""
    from tms.ledger.read import negentropy_items as items_module

    monkeypatch.setattr(items_module, "_RELOAD_AFTER", 2)
    monkeypatch.setattr(items_module, "_INSERT_SHARE", 1_000_000)
    real_load = items_module._load
    whole_reads: list[str] = []

    async def counted(pool: Any, slug: str, cap: int) -> Any:
        whole_reads.append(slug)
        return await real_load(pool, slug, cap)

    monkeypatch.setattr(items_module, "_load", counted)
    pool = await open_pool(live.database_url, min_size=1, max_size=2)
    try:
        reader = await Access(pool).reader(MEMBER.pubkey)
        rel = reader.collection("rel")
        wanted = parse_filter({"kinds": [4702]}, max_limit=1000)
        cache = ItemCache(NEG_CACHE_BYTES)
        await negentropy_items(pool, rel, wanted, 10_000, cache)
        before = cache._kept["rel"]
        middle = stored[30]["created_at"]
        await Ledger(pool).submit(
            [
                claim(MEMBER, "rel", f"import {i} {os.urandom(4).hex()}", created_at=middle)
                for i in range(3)
            ],
            origin=OPERATOR,
        )
        assert whole_reads == ["rel"]
        kept = await negentropy_items(pool, rel, wanted, 10_000, cache)
        read = await negentropy_items(pool, rel, wanted, 10_000)
        assert whole_reads == ["rel", "rel"]
        assert len(cache._kept["rel"].ts) == len(before.ts) + 3
        assert kept.blob(0, len(kept)) == read.blob(0, len(read))
        assert kept.timestamps.tolist() == read.timestamps.tolist()
    finally:
        await pool.close()


async def test_a_server_stopping_while_it_loads_the_lists_stops_the_loading(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background loading of the lists (held here by a read that never ends) neither
    holds the relay's start (a REQ is answered meanwhile) nor its end: closing the relay
    cancels it."""
    from tms.ledger.read import negentropy_items as items_module

    await seed(db_url)
    reached, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(pool: Any, slug: str, cap: int) -> Any:
        reached.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("never")

    monkeypatch.setattr(items_module, "_load", forever)
    said = Said()

    async with open_runtime(settings(TMS_EMBED="off"), db_url) as runtime:
        started = time.monotonic()
        async with open_relay(runtime.services, db_url, neg_warm=8) as relay:
            await asyncio.wait_for(reached.wait(), 10)
            conn = Connection(
                relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
            )
            await conn.open()
            await conn.handle(json.dumps(["REQ", "r", {"kinds": [4702]}]))
            await until(lambda: any(m[0] == "EOSE" for m in said))
            await conn.close()
        assert cancelled.is_set() and time.monotonic() - started < 10
