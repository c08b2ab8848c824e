"""A member's sync is priced by what it reads, not by its messages (issue 33 items 1, 3 and 7):
a REQ of 3,000 ids is answered whole, a page of ids at a time, and a flood of them is
`rate-limited:` by the key's read budget; NIP-11 states the limits a client paces itself by,
and the relay holds to what it states; a NEG-OPEN over many items costs more than one over few;
a NEG-OPEN the process has no memory for is refused before its list is built; and NIP-77's work
runs on threads of its own, so a blocked default pool does not stop it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import httpx
import pytest
from factories import (
    MEMBER,
    OWNER,
    Live,
    claim,
    fresh_database,
    key,
    live_server,
    members,
    settings,
)
from relay_client import Client, Said, in_process_relay, publish, seed, ws_url

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.nostr.negentropy import Initiator, Items
from tms.relay.connection import Connection
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

BIG: Final = 3000  # claims in `big`
READS_PER_MINUTE: Final = 100  # each key's read budget on this module's server
PRICED: Final = key(0x51)  # members of `big` that spend their own read budgets
FEW: Final = key(0x52)
WIDE: Final = key(0x53)
BULK: Final = key(0x54)
EMPTY: Final = Initiator(Items.of([])).initiate().hex()


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    """`rel` as every relay test has it, and `big`: BIG claims, read by MEMBER and the three
    keys above; each key may read READS_PER_MINUTE units a minute."""

    async def seeded(url: str) -> None:
        await seed(url)
        readers = [MEMBER, PRICED, FEW, WIDE, BULK]
        start = int(time.time()) - 10_000
        claims = [claim(OWNER, "big", f"big claim {n}", created_at=start + n) for n in range(BIG)]
        pool = await open_pool(url, min_size=1, max_size=1)
        try:
            listed = members(OWNER, "big", [k.pubkey for k in readers])
            await Ledger(pool).submit([listed], origin=OPERATOR)  # readers sign no terms
        finally:
            await pool.close()
        await publish(url, *(claims[n : n + 1000] for n in range(0, BIG, 1000)))

    config = settings(TMS_EMBED="off", TMS_RATE_READ=f"{READS_PER_MINUTE}/minute")
    with fresh_database(pg_server_url, template_url, "tms_relay_sync") as url:
        asyncio.run(seeded(url))
        with live_server(url, config) as server:
            yield server


async def reader(live: Live, who: SecretKey, path: str = "/c/big") -> Client:
    client = await Client.open(ws_url(live.url, path))
    ok = await client.auth(who)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


async def big_ids(live: Live) -> list[str]:
    pool = await open_pool(live.database_url, min_size=1, max_size=1)
    try:
        rows = await pool.fetch("SELECT id FROM events WHERE collection = 'big' ORDER BY seq")
    finally:
        await pool.close()
    return [row["id"] for row in rows]


def nip11(live: Live, path: str = "/c/big") -> dict[str, Any]:
    answer = httpx.get(live.url + path, headers={"Accept": "application/nostr+json"})
    assert answer.status_code == 200
    limitation: dict[str, Any] = answer.json()["limitation"]
    return limitation


async def test_a_req_of_3000_ids_is_answered_whole_and_a_flood_of_them_is_rate_limited(
    live: Live,
) -> None:
    """NDK fetches what NIP-77 said it lacks with one filter of every id: 6,007 once met
    `CLOSED invalid: ids has 6,007 values; at most 1,000 per filter`. Such a REQ is answered
    whole, without a limit or with one as large as its ids, and costs 30 units (a page of ids
    each): three fit in the key's 100 a minute, a fourth is refused `rate-limited:`."""
    ids = await big_ids(live)
    assert len(ids) >= BIG
    async with await reader(live, MEMBER) as client:
        events, end = await client.req("all", {"ids": ids[:BIG]})
        assert end == ["EOSE", "all"], end
        assert sorted(e["id"] for e in events) == sorted(ids[:BIG])
        events, end = await client.req("limited", {"ids": ids[:BIG], "limit": BIG})
        assert end == ["EOSE", "limited"] and len(events) == BIG
        events, end = await client.req("newest", {"ids": ids[:BIG], "limit": 10})
        assert [e["id"] for e in events] == ids[BIG - 10 : BIG][::-1]  # newest first, as ever
        ends = []
        for n in range(3):
            _, end = await client.req(f"flood{n}", {"ids": ids[:BIG]})
            ends.append(end)
        refused = [end for end in ends if end[0] == "CLOSED"]
        assert refused and refused[0][2].startswith("rate-limited: "), ends
        assert "this key's reads" in refused[0][2]


async def test_nip11_states_the_limits_and_the_relay_holds_to_them(live: Live) -> None:
    """What a mirror reads to pace itself: NIP-11's own fields, the ids a filter takes, and
    each budget with what a read costs in it. A filter of `max_ids_per_filter` ids is taken, one
    more is `CLOSED` `invalid:` in those words; `max_filters` likewise."""
    limits = nip11(live)
    assert nip11(live, "/") == limits
    assert limits["max_filters"] == 10 and limits["max_limit"] == 1000
    assert limits["max_message_length"] == 16 * 1024 * 1024
    assert limits["max_ids_per_filter"] >= 20_000
    rates = limits["rate_limits"]
    assert rates["read"] == [{"amount": READS_PER_MINUTE, "seconds": 60}]
    assert rates["address"] == []  # off on this server
    costs = rates["read_costs"]
    assert costs["ids_per_unit"] == costs["unit_rows"] == 100
    assert costs["neg_items_per_unit"] > 0 and costs["neg_msg_bytes_per_unit"] > 0
    most = limits["max_ids_per_filter"]
    fake = [f"{n:064x}" for n in range(most + 1)]
    async with await reader(live, WIDE) as client:
        _, end = await client.req("most", {"ids": fake[:most]})
        assert end == ["EOSE", "most"]
        _, end = await client.req("over", {"ids": fake})
        assert end[0] == "CLOSED" and end[2] == (
            f"invalid: ids has {most + 1:,} values; at most {most:,} per filter"
        )
        _, end = await client.req("many", *[{"kinds": [4702]}] * (limits["max_filters"] + 1))
        assert end[0] == "CLOSED" and end[2].startswith("invalid: 11 filters; at most 10")


async def test_a_req_of_more_ids_than_20000_is_answered_whole_live_and_all(live: Live) -> None:
    """NDK catching up a member 30,000 events behind sends one filter of 30,000 ids: it once met
    `CLOSED invalid: ids has 30,000 values; at most 20,000 per filter` (and NDK swallowed it).
    It is answered whole, each stored one once, then EOSE, and the subscription is live: an id
    it names stored afterwards arrives. A COUNT, which reads every id at once, and a smaller
    `limit` still take at most 20,000, in those words."""
    ids = await big_ids(live)
    later = claim(OWNER, "big", "stored after the catch-up's EOSE")
    fake = [f"{n:064x}" for n in range(30_000 - BIG - 1)]
    wanted = {"ids": [*fake, *ids[:BIG], later["id"]]}
    async with await reader(live, BULK) as client:
        started = time.perf_counter()
        events, end = await client.req("catchup", wanted)
        took = time.perf_counter() - started
        assert end == ["EOSE", "catchup"], end
        assert sorted(e["id"] for e in events) == sorted(ids[:BIG])
        assert took < 30, f"{took:.1f} s"
        await publish(live.database_url, [later])
        arrived = await client.recv()
        assert arrived[:2] == ["EVENT", "catchup"] and arrived[2]["id"] == later["id"]
        await client.send(["COUNT", "n", wanted])
        answer = await client.recv()
        assert answer[0] == "CLOSED" and answer[2] == (
            "invalid: ids has 30,000 values; at most 20,000 per filter"
        )
        _, end = await client.req("cut", {**wanted, "limit": 500})
        assert end[0] == "CLOSED" and "answered whole" in end[2], end


async def neg_open(client: Client, sub_id: str, wanted: dict[str, Any]) -> list[Any]:
    await client.send(["NEG-OPEN", sub_id, wanted, EMPTY])
    answer = await client.recv()
    await client.send(["NEG-CLOSE", sub_id])
    return answer


async def test_a_neg_open_over_many_items_costs_more_than_one_over_few(live: Live) -> None:
    """One key opening sessions over the whole of `big` (3,000 events: 4 units each) runs out
    of its 100 a minute within 30 and is refused `rate-limited:`, wherever it connects from;
    another opening 30 over one id (1 unit each) is never refused."""
    ids = await big_ids(live)
    said = []
    async with await reader(live, PRICED) as client:
        for n in range(15):
            said.append(await neg_open(client, f"n{n}", {}))
    async with await reader(live, PRICED, "/") as client:  # another connection, the same key
        for n in range(15):
            said.append(await neg_open(client, f"n{n}", {}))
    refused = [s for s in said if s[0] == "NEG-ERR"]
    assert refused and refused[0][2].startswith("rate-limited: "), said
    assert "this key's reads" in refused[0][2]
    assert said[0][0] == "NEG-MSG" and len(refused) >= 5
    async with await reader(live, FEW) as client:
        few = [await neg_open(client, f"f{n}", {"ids": ids[:1]}) for n in range(30)]
    assert all(s[0] == "NEG-MSG" for s in few), few


# --- in one process, the moments held by hand ------------------------------------------------


@pytest.fixture
async def relay_db(db_url: str) -> AsyncIterator[str]:
    await seed(db_url)
    start = int(time.time()) - 1000
    claims = [claim(MEMBER, "rel", f"listed {n}", created_at=start + n) for n in range(100)]
    await publish(db_url, claims)
    yield db_url


async def until_said(said: Said, count: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while len(said) < count:
        assert time.monotonic() < deadline, said
        await asyncio.sleep(0.01)


async def test_a_neg_open_without_memory_for_its_list_is_refused_before_it_is_built(
    relay_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process may hold 4 KB: one session's list (100 claims, 7 KB) is let in on a process
    that holds nothing else. A second, narrower one is refused `blocked:` before its list is
    read: the list reader (the real one, wrapped to count) is not called for it. Before, the
    list was built, then refused (one key built 421 such lists in 30 s)."""
    from tms.relay import negentropy as relay_negentropy

    built: list[object] = []
    real = relay_negentropy.negentropy_items

    async def counted(*args: Any, **kwargs: Any) -> Items:
        built.append(args[2])
        return await real(*args, **kwargs)

    monkeypatch.setattr(relay_negentropy, "negentropy_items", counted)
    async with in_process_relay(relay_db, memory_bytes=4096) as relay:
        said_a, said_b = Said(), Said()
        a, b = (
            Connection(relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey)
            for said in (said_a, said_b)
        )
        for conn in (a, b):
            await conn.open()
        await a.handle(f'["NEG-OPEN","n",{{"kinds":[4702]}},"{EMPTY}"]')
        await until_said(said_a, 2)
        assert said_a[1][:2] == ["NEG-MSG", "n"] and len(built) == 1
        await b.handle(f'["NEG-OPEN","n",{{"kinds":[4702],"since":5}},"{EMPTY}"]')
        await until_said(said_b, 2)
        assert said_b[1][:2] == ["NEG-ERR", "n"], said_b
        assert said_b[1][2].startswith("blocked: this relay is short of memory for NEG")
        assert len(built) == 1  # never read
        for conn in (a, b):
            await conn.close()


async def test_reconciliation_runs_on_its_own_bounded_threads(relay_db: str) -> None:
    """asyncio's default pool, which parses bodies, anchors quotes and extends the log, held
    by work that does not end: a NEG-OPEN is still built and answered, on NIP-77's own
    threads, of which there are a few."""
    loop = asyncio.get_running_loop()
    async with in_process_relay(relay_db) as relay:
        said = Said()
        conn = Connection(
            relay, said, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        held = threading.Event()
        default = ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(default)
        blocked = loop.run_in_executor(None, held.wait)
        try:
            await conn.handle(f'["NEG-OPEN","n",{{"kinds":[4702]}},"{EMPTY}"]')
            await until_said(said, 2)
            assert said[1][:2] == ["NEG-MSG", "n"], said
        finally:
            held.set()
            await blocked
        await conn.close()
    from tms.ledger.read import neg_threads

    assert neg_threads.pool()._max_workers == neg_threads.RECONCILERS <= 4
