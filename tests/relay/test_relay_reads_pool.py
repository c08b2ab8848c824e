"""The relay's reads on a pool of their own (issue 26, item 5): a read cancelled gives its
connection back at once and stops on the server, a read past `TMS_RELAY_STATEMENT_SECONDS` is
answered CLOSED `error:` instead of holding a connection, and a REQ spends the address budget
by its size (items 5 and 12)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from factories import MEMBER, Live, fresh_database, live_server, settings
from relay_client import Client, Said, in_process_relay, seed, ws_url

from tms.relay.connection import Connection

pytestmark = pytest.mark.anyio

EVENTS = 60_000
DEADLINE = 10.0  # generous: the machine may be loaded

# Raw rows in `rel` (what a read costs is measured, not the publish path): 1,000 authors.
_SEED = f"""
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    SELECT encode(sha256(('event ' || g)::bytea), 'hex'),
           encode(sha256(('author ' || (g % 1000))::bytea), 'hex'),
           1700000000 + g, 4701 + g % 4, '[]', 'x', repeat('0', 128), 'rel'
    FROM generate_series(1, {EVENTS}) AS g"""


async def _seed_many(url: str) -> None:
    await seed(url)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_SEED)
        await conn.execute("VACUUM (ANALYZE) events")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def many(pg_server_url: str, template_url: str) -> Iterator[str]:
    with fresh_database(pg_server_url, template_url, "tms_relay_reads") as url:
        asyncio.run(_seed_many(url))
        yield url


@pytest.fixture(scope="module")
def hurried(many: str) -> Iterator[Live]:
    """A relay whose reads may take 20 ms each: a COUNT of every event ten ways takes longer."""
    config = settings(TMS_EMBED="off", TMS_RELAY_STATEMENT_SECONDS="0.02")
    with live_server(many, config) as server:
        yield server


@pytest.fixture(scope="module")
def metered(pg_server_url: str, template_url: str) -> Iterator[Live]:
    """A relay allowing a key 100 units of reads a minute (the address: one unit a message, as
    many as it likes here)."""
    with fresh_database(pg_server_url, template_url, "tms_relay_rates") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off", TMS_RATE_READ="100/minute")) as live:
            yield live


async def member(live: Live) -> Client:
    client = await Client.open(ws_url(live.url, "/c/rel"))
    ok = await client.auth(MEMBER)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


async def running(conn: asyncpg.Connection, marker: str, expected: int) -> bool:
    """Whether `expected` statements holding `marker` are running on the server."""
    count = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 "
        "AND pid <> pg_backend_pid()",
        f"%{marker}%",
    )
    return bool(count == expected)


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE} s: {what}")


async def test_a_cancelled_read_stops_and_frees_its_connection(many: str) -> None:
    """A read whose client went away is cancelled (tms.relay.reading): its statement stops on
    the server and the pool's one connection is free again, long before the read would end."""
    from tms.ledger.relay_reads import open_reads_pool

    reads = await open_reads_pool(many, connections=1, statement_seconds=120)
    watcher = await asyncpg.connect(many)
    marker = "tms_cancelled_read"
    try:
        # Joined on the collection too: a Citus cluster runs only a join it can send whole to
        # each shard (joined on the column it distributes by); a join on `kind` alone it refuses
        # at once ("requires repartitioning"), and there was then no read to cancel.
        expensive = asyncio.create_task(
            reads.fetchval(
                f"SELECT count(*) /* {marker} */ FROM events a JOIN events b "
                "ON a.collection = b.collection AND a.kind = b.kind"
            )
        )
        await until(lambda: running(watcher, marker, 1), "the read running")
        expensive.cancel()
        with pytest.raises(asyncio.CancelledError):
            await expensive
        await until(lambda: running(watcher, marker, 0), "the read gone from the server")
        async with reads.acquire(timeout=DEADLINE) as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await watcher.close()
        await reads.close()


async def test_a_read_past_the_statement_timeout_is_closed_with_error(hurried: Live) -> None:
    """Ten filters each matching every event: more than the 20 ms this relay gives a read.
    The client hears CLOSED `error:` at once, and the connection answers what it sends next."""
    wide = [{"kinds": [4701, 4702, 4703, 4704], "since": n} for n in range(10)]
    async with await member(hurried) as client:
        started = time.monotonic()
        await client.send(["COUNT", "c", *wide])
        answer = await client.recv(DEADLINE)
        assert answer[:2] == ["CLOSED", "c"], answer
        assert answer[2].startswith("error: this read took longer than this relay allows")
        assert time.monotonic() - started < DEADLINE
        _, end = await client.req("s", {"kinds": [4705]})  # the connection goes on
        assert end[0] in ("EOSE", "CLOSED") and end[1] == "s", end


async def test_a_big_req_spends_more_of_the_budget_than_a_small_one(metered: Live) -> None:
    """100 units a minute of the key's reads: a one-filter REQ spends one, as before; ten
    filters of 1,000 authors spend the whole minute's budget, so with a few spent already it
    is refused, and the small REQs still pass."""
    authors = [f"{n:064x}" for n in range(999)]  # with its kind, a filter holds 1,000 values
    big = [{"authors": authors, "kinds": [4702 + n]} for n in range(10)]
    async with await member(metered) as client:
        for n in range(3):
            _, end = await client.req(f"small{n}", {"kinds": [4705]})
            assert end == ["EOSE", f"small{n}"]
        _, end = await client.req("big", *big)
        assert end[0] == "CLOSED" and end[2].startswith("rate-limited: "), end
        _, end = await client.req("after", {"kinds": [4705]})
        assert end == ["EOSE", "after"]


@pytest.mark.parametrize("how", ["CLOSE", "replaced", "gone"])
async def test_a_read_stops_when_its_client_closes_it_replaces_it_or_leaves(
    db_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A REQ's stored answer and a COUNT wait on reads that never end (hooks around the real
    ones): a CLOSE, a REQ with the same id, or the connection's end cancels what is running,
    and the relay's budgets hold nothing of it after."""
    await seed(db_url)
    started: list[str] = []
    cancelled: list[str] = []

    def forever(what: str) -> Callable[..., Awaitable[Any]]:
        async def hooked(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(what)
                raise

        return hooked

    sent = Said()

    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        rows = relay.stored.rows
        monkeypatch.setattr(relay.stored, "rows", forever("rows"))
        monkeypatch.setattr(relay.stored, "count", forever("count"))
        conn = Connection(
            relay, sent, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        await conn.handle(json.dumps(["REQ", "s", {"kinds": [4702]}]))
        await conn.handle(json.dumps(["COUNT", "c", {"kinds": [4702]}]))
        deadline = time.monotonic() + DEADLINE
        while sorted(started) != ["count", "rows"]:
            assert time.monotonic() < deadline, started
            await asyncio.sleep(0.01)
        if how == "CLOSE":
            await conn.handle(json.dumps(["CLOSE", "s"]))
            expected = ["rows"]
        elif how == "replaced":
            monkeypatch.setattr(relay.stored, "rows", rows)
            await conn.handle(json.dumps(["REQ", "s", {"kinds": [4705]}]))
            expected = ["rows"]
        else:
            await conn.close()
            expected = ["count", "rows"]
        while sorted(cancelled) != expected:
            assert time.monotonic() < deadline, cancelled
            await asyncio.sleep(0.01)
        if how == "replaced":  # the new one is answered
            while ["EOSE", "s"] not in sent:
                assert time.monotonic() < deadline, sent
                await asyncio.sleep(0.01)
        if how != "gone":
            assert ("COUNT", "c") in conn.reading.tasks  # the other read goes on
            await conn.close()
        assert not conn.reading.tasks
        assert relay.memory.used == 0
