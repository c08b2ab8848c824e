"""What a connection makes the relay hold is bounded in bytes, and bounded by what an honest
client does: one ordinary batch of large evidence reaches every prompt subscriber (issue 26,
item 8); what waits behind a slow stored answer is capped in bytes, closing that subscription
only (item 9); a subscription's filters count against the connection's budget (item 4); and a
stored answer runs as a task of its own, so an EVENT or a CLOSE behind it is not held up, and
a CLOSE stops it (item 5, issue 29)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from factories import (
    MEMBER,
    OWNER,
    Live,
    claim,
    evidence,
    fresh_database,
    live_server,
    members,
    settings,
    terms,
)
from relay_client import Client, in_process_relay, publish, seed, slow_reader, ws_url

from tms.http.protocol import ConnectionLimits
from tms.ledger.read.filters import Stored
from tms.ledger.service import Ledger
from tms.nostr.events import Event
from tms.relay.connection import Connection
from tms.relay.limits import OUTBOX_BYTES
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

LARGE = "A long document of evidence, as any member may publish it. " * 32_000  # ~1.9 MB
MEDIUM = "A document read slowly by its reader. " * 8_000  # ~300 KB


def now() -> int:
    return int(time.time())


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    """`rel` holds ~19 MB of evidence: more than the relay queues and the sockets hold, so a
    client that does not read keeps its stored answer waiting."""
    with fresh_database(pg_server_url, template_url, "tms_relay_memory") as url:
        asyncio.run(seed(url))
        stored = [evidence(OWNER, "rel", f"{n} {MEDIUM}") for n in range(64)]
        asyncio.run(publish(url, *[stored[n : n + 16] for n in range(0, 64, 16)]))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


async def member(live: Live) -> Client:
    client = await Client.open(ws_url(live.url, "/c/rel"))
    ok = await client.auth(MEMBER)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


async def test_one_batch_of_large_evidence_reaches_ten_prompt_subscribers_whole(
    live: Live,
) -> None:
    readers = [await member(live) for _ in range(10)]
    try:
        for n, reader in enumerate(readers):
            _, end = await reader.req(f"new{n}", {"kinds": [4701], "limit": 0})
            assert end == ["EOSE", f"new{n}"]
        batch = [evidence(MEMBER, "rel", f"batch {n} {time.time_ns()} {LARGE}") for n in range(6)]
        assert sum(len(e["content"]) for e in batch) > OUTBOX_BYTES  # more than one budget
        await publish(live.database_url, batch)

        async def received(reader: Client) -> list[str]:
            return [(await reader.recv(30))[2]["id"] for _ in batch]

        got = await asyncio.gather(*(received(reader) for reader in readers))
        assert got == [[e["id"] for e in batch]] * len(readers)
    finally:
        for reader in readers:
            await reader.close()


async def read_until(client: Client, done: Any, seconds: float = 10.0) -> list[list[Any]]:
    """Messages until `done(message)` holds, or silence."""
    got: list[list[Any]] = []
    while True:
        try:
            message = await client.recv(seconds)
        except TimeoutError:
            return got
        got.append(message)
        if done(message):
            return got


async def test_new_events_behind_a_slow_stored_answer_are_capped_in_bytes(live: Live) -> None:
    """The new events reach the relay's hub while the stored answer is in flight, every time:
    its first event has been read (the subscription is registered, the answer begun), it is far
    larger than what the relay queues and the sockets hold, and the client reads on only once
    a prompt subscriber has been handed all the new events."""
    client = await slow_reader(live.url, "/c/rel", MEMBER)
    watcher = await member(live)
    try:
        _, end = await watcher.req("new", {"kinds": [4701], "limit": 0})
        assert end == ["EOSE", "new"]
        await client.send(["REQ", "slow", {"kinds": [4701]}])
        first = await client.recv(30)  # begun; the rest waits for the client to read
        assert first[:2] == ["EVENT", "slow"], first
        new = [evidence(MEMBER, "rel", f"new {n} {time.time_ns()} {LARGE}") for n in range(5)]
        await publish(live.database_url, *[[event] for event in new])
        assert [(await watcher.recv(30))[2]["id"] for _ in new] == [e["id"] for e in new]
        got = await read_until(client, lambda m: m[0] in ("CLOSED", "EOSE") and m[1] == "slow")
        end = got[-1]
        assert end[:2] == ["CLOSED", "slow"], [m[0] for m in got]
        assert end[2].startswith(f"error: more than {OUTBOX_BYTES:,} bytes of new events")
        assert not {e["id"] for e in new} & {m[2]["id"] for m in got if m[0] == "EVENT"}
        _, again = await client.req("again", {"kinds": [4702], "limit": 1})  # the rest goes on
        assert again == ["EOSE", "again"]
    finally:
        await client.close()
        await watcher.close()


async def test_filters_count_against_the_connections_budget(live: Live) -> None:
    ids = [f"{n:064x}" for n in range(1000)]
    async with await member(live) as client:
        answers = []
        for n in range(12):
            await client.send(["REQ", f"wide{n}", *[{"ids": ids} for _ in range(10)]])
            answers.append(await client.recv())
        closed = [a for a in answers if a[0] == "CLOSED"]
        assert answers[0] == ["EOSE", "wide0"]
        assert closed and all(a[2].startswith("invalid: these filters hold") for a in closed)
        for n in range(12):
            await client.send(["CLOSE", f"wide{n}"])
        _, end = await client.req("narrow", {"ids": ids}, {"ids": ids})  # room again
        assert end == ["EOSE", "narrow"]


async def test_an_event_and_a_close_behind_a_slow_stored_answer_are_not_held_up(
    live: Live,
) -> None:
    client = await slow_reader(live.url, "/c/rel", MEMBER)
    try:
        await client.send(["REQ", "slow", {"kinds": [4701]}])
        first = await client.recv(30)  # begun; the rest waits for the client to read
        assert first[:2] == ["EVENT", "slow"], first
        said = claim(MEMBER, "rel", f"said during a slow answer {time.time_ns()}", created_at=now())
        await client.send(["EVENT", said])
        await client.send(["CLOSE", "slow"])
        got = await read_until(client, lambda m: m[0] == "OK", seconds=5)
        assert got and got[-1][:3] == ["OK", said["id"], True], [m[0] for m in got]
        rest = await read_until(client, lambda m: False, seconds=1)
        assert ["EOSE", "slow"] not in got + rest  # the CLOSE stopped it
        _, end = await client.req("after", {"ids": [said["id"]]})
        assert end == ["EOSE", "after"]
    finally:
        await client.close()


async def test_a_new_req_is_closed_saying_why_while_the_process_is_over_its_budget(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relay whose connections may hold 1 MiB in all: one client that reads nothing fills it
    with its stored answer (evidence of 300 KB each, read one at a time as room allows: the
    fourth passes the last check and takes it over), and another connection's REQ is then
    CLOSED with `error:` saying whose memory is short, rather than adding to it, while the first
    has not yet read nothing for the grace after which it would give way (long here). Once the
    first has gone, the same REQ is answered."""
    monkeypatch.setattr("tms.relay.budget.GIVE_WAY_SECONDS", 600.0)
    T = int(time.time()) - 100
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        await Ledger(pool).approve([OWNER.pubkey])
        await Ledger(pool).submit(
            [terms(OWNER), members(OWNER, "mem", [], created_at=T)], origin=OPERATOR
        )
        texts = [evidence(OWNER, "mem", f"{n} " + "x" * 300_000, created_at=T) for n in range(8)]
        await Ledger(pool).submit(texts, origin=OPERATOR)
    finally:
        await pool.close()
    stuck, answered = asyncio.Event(), []

    async def never_reads(text: str) -> None:
        if text.startswith('["EVENT"'):
            stuck.set()
            await asyncio.Event().wait()

    async def reads(text: str) -> None:
        answered.append(json.loads(text))

    async with in_process_relay(db_url, memory_bytes=1024 * 1024) as relay:
        await relay.feed.ready.wait()
        hog = Connection(
            relay, never_reads, slug="mem", url="ws://x/", address=None, pubkey=OWNER.pubkey
        )
        other = Connection(
            relay, reads, slug="mem", url="ws://x/", address=None, pubkey=OWNER.pubkey
        )
        for conn in (hog, other):
            await conn.open()
        await hog.handle(json.dumps(["REQ", "all", {"kinds": [4701]}]))
        await asyncio.wait_for(stuck.wait(), 10)
        deadline = time.monotonic() + 10
        while not relay.memory.full:
            assert time.monotonic() < deadline, relay.memory.used
            await asyncio.sleep(0.01)
        await other.handle(json.dumps(["REQ", "one", {"kinds": [4701], "limit": 1}]))
        await until(lambda: any(m[:2] == ["CLOSED", "one"] for m in answered))
        closed = next(m for m in answered if m[:2] == ["CLOSED", "one"])
        assert closed[2].startswith("error: this relay is short of memory"), closed
        assert "held for every connection" in closed[2]
        await hog.close()
        assert relay.memory.used < 1024 * 1024
        await other.handle(json.dumps(["REQ", "two", {"kinds": [4701], "limit": 1}]))
        await until(lambda: ["EOSE", "two"] in answered)
        await other.close()
        assert relay.memory.used == 0


async def test_the_heaviest_client_that_reads_nothing_gives_way_to_one_that_reads(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relay whose connections may hold 1 MiB in all, filled by three clients that read
    nothing of their stored answers (evidence of 300 KB each): a fourth, which reads what it is
    sent and holds nothing, asks for two of those texts. The heaviest of the three, having read
    nothing for the grace (`GIVE_WAY_SECONDS`, short here), is closed as behind with a NOTICE
    saying why, its bytes freed, and the reader's REQ is answered in full (before, it was
    `CLOSED` short of memory until a stored answer had waited `STALL_SECONDS`, 30 s, for the
    non-readers). Every budget ends at 0."""
    monkeypatch.setattr("tms.relay.budget.GIVE_WAY_SECONDS", 0.2)
    T = int(time.time()) - 100
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        await Ledger(pool).approve([OWNER.pubkey])
        await Ledger(pool).submit(
            [terms(OWNER), members(OWNER, "way", [], created_at=T)], origin=OPERATOR
        )
        texts = [evidence(OWNER, "way", f"{n} " + "x" * 300_000, created_at=T) for n in range(8)]
        await Ledger(pool).submit(texts, origin=OPERATOR)
    finally:
        await pool.close()
    unblocked = [asyncio.Event() for _ in range(3)]
    said: list[list[list[Any]]] = [[] for _ in range(3)]
    answered: list[list[Any]] = []

    def never_reads(n: int) -> Any:
        async def send(text: str) -> None:
            said[n].append(json.loads(text))
            if text.startswith('["EVENT"'):
                await unblocked[n].wait()  # reads nothing more, until the test lets it

        return send

    async def reads(text: str) -> None:
        answered.append(json.loads(text))

    async with in_process_relay(db_url, memory_bytes=1024 * 1024) as relay:
        await relay.feed.ready.wait()
        hogs = [
            Connection(
                relay, never_reads(n), slug="way", url="ws://x/", address=None, pubkey=OWNER.pubkey
            )
            for n in range(3)
        ]
        reader = Connection(
            relay, reads, slug="way", url="ws://x/", address=None, pubkey=OWNER.pubkey
        )
        for conn in [*hogs, reader]:
            await conn.open()
        for hog, limit in zip(hogs, (1, 1, 2), strict=True):  # 300, 300 and 600 KB
            await hog.handle(json.dumps(["REQ", "all", {"kinds": [4701], "limit": limit}]))
        await until(lambda: relay.memory.full and all(hog.outbox.queued_bytes for hog in hogs))
        await asyncio.sleep(0.5)  # each has read nothing for longer than the grace
        held = [hog.budget.used for hog in hogs]
        assert held.index(max(held)) == 2, held
        heaviest = hogs[2]
        await reader.handle(json.dumps(["REQ", "two", {"kinds": [4701], "limit": 2}]))
        await until(lambda: any(m[0] in ("EOSE", "CLOSED") and m[1] == "two" for m in answered))
        assert [m[0] for m in answered if m[1:2] == ["two"]] == ["EVENT", "EVENT", "EOSE"], [
            [*m[:2], m[2][:80]] if m[0] == "CLOSED" else m[:2] for m in answered
        ]
        assert heaviest.outbox.ending is not None and heaviest.outbox.ending.startswith("behind")
        gave_way = [n for n, hog in enumerate(hogs) if hog.outbox.ending is not None]
        assert gave_way == [2], gave_way  # the lighter ones were not needed
        for n in gave_way:  # once it reads again, the NOTICE is what it gets, and nothing else
            unblocked[n].set()
        await until(lambda: all(said[n][-1][0] == "NOTICE" for n in gave_way))
        for n in gave_way:
            notice = said[n][-1][1]
            assert notice.startswith("error: closing this connection: "), notice
            assert "memory" in notice and "read nothing" in notice, notice
            assert [m[0] for m in said[n]] == ["AUTH", "EVENT", "NOTICE"], said[n]
        for conn in [*hogs, reader]:
            await conn.close()
        assert relay.memory.used == 0
        assert all(conn.budget.used == 0 for conn in [*hogs, reader])


async def test_counts_waiting_their_turn_hold_their_filters_in_the_budget(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COUNT's filters (5 of 1,000 tag values of 1,024 characters: 5.6 MB) are held while it
    waits and runs (here, a count that never ends): a second one would take the connection past
    its 8 MiB and is CLOSED saying so (before, a hundred waited uncounted, 560 MB), and once the
    first is answered or closed there is room again."""
    await seed(db_url)
    release = asyncio.Event()
    real = None

    async def slow_count(*args: Any, **kwargs: Any) -> int:
        await release.wait()
        assert real is not None
        return int(await real(*args, **kwargs))

    answered: list[list[Any]] = []

    async def reads(text: str) -> None:
        answered.append(json.loads(text))

    values = [f"{n:04d}" + "v" * 1020 for n in range(1000)]
    wide = [{"kinds": [4702], f"#{letter}": values[:999]} for letter in "abcde"]
    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        real = relay.stored.count
        monkeypatch.setattr(relay.stored, "count", slow_count)
        conn = Connection(
            relay, reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        for n in range(3):
            await conn.handle(json.dumps(["COUNT", f"c{n}", *wide]))
        assert conn.budget.used > 5 * 1024 * 1024
        await until(lambda: sum(m[0] == "CLOSED" for m in answered) == 2)
        refused = [m for m in answered if m[0] == "CLOSED"]
        assert [m[1] for m in refused] == ["c1", "c2"], answered
        assert all(m[2].startswith("invalid: these filters hold") for m in refused)
        release.set()
        await until(lambda: any(m[:2] == ["COUNT", "c0"] for m in answered))
        await until(lambda: not conn.reading.tasks)
        assert conn.budget.used < 1024 * 1024
        release.clear()
        await conn.handle(json.dumps(["COUNT", "c3", *wide]))  # room again
        assert ("COUNT", "c3") in conn.reading.tasks
        await conn.close()
        assert relay.memory.used == 0


async def until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


class HeldCommits:
    """The ledger's `submit`, held until the test says: the events a connection submits stay in
    flight meanwhile, as on a database slow to commit, and their bytes are seen as they go in."""

    def __init__(self, relay: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = relay.ledger.submit
        self.release = asyncio.Event()
        self.submitted: list[str] = []
        monkeypatch.setattr(relay.ledger, "submit", self.submit)

    async def submit(self, events: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.submitted.append(events[0]["id"])
        await self.release.wait()
        return await self.real(events, **kwargs)


def big_events(count: int) -> list[str]:
    """`count` EVENT messages of about 1.9 MB each, new every run."""
    stamp = time.time_ns()
    return [
        json.dumps(["EVENT", evidence(MEMBER, "rel", f"{stamp} {n} {LARGE}", created_at=now())])
        for n in range(count)
    ]


async def handle_all(conn: Connection, texts: list[str]) -> None:
    """As the endpoint reads a socket: the next message only once the last is handled."""
    for text in texts:
        await conn.handle(text)


async def test_events_in_flight_count_in_the_connections_budget_and_hold_reading_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight EVENTs of 1.9 MB while the commits are held: the connection reads one past its
    8 MiB budget and no further (before, up to 64 of 16 MiB were in flight, outside every
    budget); once they are committed it reads the rest, and every one is answered OK."""
    await seed(db_url)
    answered: list[list[Any]] = []

    async def reads(text: str) -> None:
        answered.append(json.loads(text))

    texts = big_events(8)
    size = len(texts[0])
    first_over = OUTBOX_BYTES // size + 1  # the event that takes it past its budget
    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        held = HeldCommits(relay, monkeypatch)
        conn = Connection(relay, reads, slug="rel", url="ws://x/", address=None, pubkey=None)
        await conn.open()
        reading = asyncio.create_task(handle_all(conn, texts))
        await until(lambda: conn.publishing.holding_back)
        assert len(held.submitted) == first_over < len(texts)
        assert conn.budget.used >= first_over * size > OUTBOX_BYTES
        assert relay.memory.used >= conn.budget.used  # the process's budget counts them too
        assert not reading.done()
        held.release.set()
        await asyncio.wait_for(reading, 60)
        await until(lambda: sum(m[0] == "OK" for m in answered) == len(texts), 60)
        oks = [m for m in answered if m[0] == "OK"]
        assert all(m[2] is True for m in oks), oks
        assert conn.budget.used < 1024  # only what waits to be written
        await conn.close()
        assert relay.memory.used == 0


async def test_a_process_over_its_budget_takes_one_event_at_a_time_from_each_connection(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process budget of 4 MiB: one connection's events in flight fill it, and another
    connection still reads one EVENT (nothing of its own is in flight: one message always
    passes), then holds back; all are answered once committed."""
    await seed(db_url)
    answered: list[list[Any]] = []

    async def reads(text: str) -> None:
        answered.append(json.loads(text))

    first, second = big_events(4), big_events(2)
    async with in_process_relay(db_url, memory_bytes=4 * 1024 * 1024) as relay:
        await relay.feed.ready.wait()
        held = HeldCommits(relay, monkeypatch)
        one = Connection(relay, reads, slug="rel", url="ws://x/", address=None, pubkey=None)
        two = Connection(relay, reads, slug="rel", url="ws://x/", address=None, pubkey=None)
        for conn in (one, two):
            await conn.open()
        reading = [asyncio.create_task(handle_all(one, first))]
        await until(lambda: one.publishing.holding_back)
        assert len(held.submitted) == 3 and relay.memory.over
        reading.append(asyncio.create_task(handle_all(two, second)))
        await until(lambda: two.publishing.holding_back)
        assert len(held.submitted) == 4
        held.release.set()
        await asyncio.wait_for(asyncio.gather(*reading), 60)
        await until(lambda: sum(m[0] == "OK" for m in answered) == 6, 60)
        assert all(m[2] is True for m in answered if m[0] == "OK"), answered
        for conn in (one, two):
            await conn.close()
        assert relay.memory.used == 0


async def test_events_answered_after_their_connection_closed_leave_nothing_held(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that leaves with events in flight: they are still committed, their bytes held
    until then, and their answers, with nobody to read them, hold nothing (before, each OK
    queued after the close held its bytes in the process's budget for good)."""
    await seed(db_url)

    async def reads(text: str) -> None:
        pass

    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        held = HeldCommits(relay, monkeypatch)
        conn = Connection(relay, reads, slug="rel", url="ws://x/", address=None, pubkey=None)
        await conn.open()
        said = claim(MEMBER, "rel", f"said by one who left {time.time_ns()}", created_at=now())
        await conn.handle(json.dumps(["EVENT", said]))
        await until(lambda: len(held.submitted) == 1)
        await conn.close()
        assert relay.memory.used > 0  # the event, in flight
        held.release.set()
        await until(lambda: not conn.publishing._inflight, 60)
        assert relay.memory.used == 0


async def test_a_full_size_event_is_taken_on_an_idle_connection(live: Live) -> None:
    """The largest honest EVENT: 2,000,000 characters of content, every one escaped as the
    client's JSON sends it (about 12 MB on the wire, more than the connection's budget)."""
    async with await member(live) as client:
        shell = len(json.dumps({"collection": "rel", "text": ""}, separators=(",", ":")))
        text = f"{time.time_ns()} " + "é" * 2_000_000
        doc = evidence(MEMBER, "rel", text[: 2_000_000 - shell], created_at=now())
        assert len(doc["content"]) == 2_000_000
        message = json.dumps(["EVENT", doc])
        assert len(message.encode()) > OUTBOX_BYTES
        await client.send(message)
        assert await client.recv(120) == ["OK", doc["id"], True, ""]


async def test_a_prompt_subscriber_gets_every_live_event_however_many_come_at_once(
    db_url: str,
) -> None:
    """The hub hands over, at once, five events of 14 MB (70 MB: more than one body of 64 MiB,
    as when the commit feed fetches two batches of the largest body together): a subscriber
    that reads what it is sent gets all five and is not closed (before, a 64 MiB cap on one
    connection's live events closed it as "behind", as it had once closed every prompt
    subscriber for one batch of 11 MB). Time behind bounds a live queue, never its size."""
    await seed(db_url)
    sent: list[str] = []

    async def reads(text: str) -> None:
        sent.append(text[:80])

    content = json.dumps({"collection": "rel", "text": "x" * 14_000_000})
    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        conn = Connection(
            relay, reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        await conn.handle(json.dumps(["REQ", "new", {"kinds": [4701], "limit": 0}]))
        await until(lambda: any('"EOSE"' in text for text in sent))
        events = [
            Event(f"{n:064x}", OWNER.pubkey, now(), 4701, [], content, "0" * 128) for n in range(5)
        ]
        relay.hub.deliver([Stored(10**12 + n, "rel", event) for n, event in enumerate(events)])
        await until(lambda: sum(text.startswith('["EVENT","new"') for text in sent) == 5, 60)
        assert conn.outbox.ending is None
        await until(lambda: conn.outbox.queued_bytes == 0)
        assert relay.memory.live == 0
        await conn.close()
        assert relay.memory.used == 0


async def test_the_feed_hands_live_events_over_as_the_process_has_room(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two batches of three 1.9 MB evidence texts, committed while the commit feed is held, so
    that it fetches both together, on a relay whose connections may hold 4 MiB in all: the
    feed hands them over as the subscriber writes them, never more than the process's budget
    queued at once (before, all 11 MB at once), and the subscriber gets all six in order."""
    await seed(db_url)
    sent: list[str] = []
    queued: list[int] = []  # live bytes queued, at each write
    budget = 4 * 1024 * 1024
    batches = [
        [evidence(MEMBER, "rel", f"{b} {n} {time.time_ns()} {LARGE}") for n in range(3)]
        for b in range(2)
    ]
    async with in_process_relay(db_url, memory_bytes=budget) as relay:
        await relay.feed.ready.wait()

        async def reads(text: str) -> None:
            queued.append(conn.outbox._bytes[0])
            if text.startswith('["EVENT"'):
                sent.append(json.loads(text)[2]["id"])

        conn = Connection(
            relay, reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        await conn.handle(json.dumps(["REQ", "new", {"kinds": [4701], "limit": 0}]))
        await until(lambda: conn.reading.subs and not conn.reading.tasks)
        notices: list[object] = []
        put = relay.feed._put
        monkeypatch.setattr(relay.feed, "_put", notices.append)  # held: the feed sees nothing
        await publish(db_url, *batches)
        assert len(notices) == 2
        for notice in notices:  # both at once, as a feed behind the commits finds them
            put(notice)
        wanted = [event["id"] for batch in batches for event in batch]
        await until(lambda: len(sent) == len(wanted), 60)
        assert sent == wanted
        assert max(queued) <= budget, queued
        assert conn.outbox.ending is None
        await conn.close()
        assert relay.memory.used == 0


def unread(conn: Connection) -> int:
    """The bytes the server's socket buffer holds for this connection, not yet taken by the
    kernel (read from the test's thread: the server's is its own)."""
    lent = getattr(conn.outbox._send_many, "__self__", None)
    transport = lent._protocol.transport if lent is not None else None
    return 0 if transport is None or transport.is_closing() else transport.get_write_buffer_size()


def connections(relay: Any) -> list[Connection]:
    while True:  # the server's thread may change the set meanwhile
        try:
            return list(relay.hub.clients)
        except RuntimeError:
            continue


async def test_what_a_client_leaves_unread_in_the_servers_buffer_counts(db_url: str) -> None:
    """Fourteen clients that read nothing of their stored answer, on a relay whose connections
    may hold 16 MiB in all: each leaves its first message, 1.9 MB, in the server's socket
    buffer, beyond the kernel's (kept small here, as the kernel's own are on a busy machine).
    Those bytes count in the budget until the kernel has taken them, so the process holds them
    for as many clients as its budget allows, and the others wait (before, they counted only
    until the message was handed to the socket, and fourteen held 24 MB uncounted; ten thousand
    would hold 19 GB)."""
    await seed(db_url)
    T = now() - 100
    small = [evidence(OWNER, "rel", f"small {n} {MEDIUM[:70_000]}", created_at=T) for n in range(3)]
    large = evidence(OWNER, "rel", f"large {LARGE}", created_at=T + 1)
    await publish(db_url, small, [large])  # newest first: the large one leads every answer
    budget = 16 * 1024 * 1024
    clients: list[Client] = []
    config = settings(TMS_EMBED="off", TMS_RELAY_MEMORY_MB="16")
    # A client that reads a little (1 KiB a second) is not closed as one that does not read;
    # these read nothing, and are given a window long enough that the test never sees it.
    limits = dataclasses.replace(ConnectionLimits.of(config), rate_seconds=600)
    with live_server(db_url, config, limits) as live:
        relay = live.app.state.relay
        try:
            for _ in range(14):
                before = set(connections(relay))
                clients.append(await slow_reader(live.url, "/c/rel", MEMBER))
                [conn] = set(connections(relay)) - before
                sock = conn.outbox._send_many.__self__._protocol.transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
                await clients[-1].send(["REQ", "all", {"kinds": [4701]}])
                clients[-1].ws.transport.pause_reading()  # from now on it reads nothing
                await until(
                    lambda conn=conn: (
                        unread(conn) > 1024 * 1024 or relay.memory.used + 2 * 1024 * 1024 > budget
                    ),
                    30,
                )
            held = sum(unread(conn) for conn in connections(relay))
            assert held <= relay.memory.used + 14 * 64 * 1024, (held, relay.memory.used)
            assert held <= budget + 2 * 1024 * 1024, held
        finally:
            for client in clients:  # they read nothing, not even a close: dropped
                client.ws.transport.abort()
                await asyncio.wait_for(client.ws.wait_closed(), 10)  # before the server stops


async def test_room_for_a_stored_message_is_taken_as_it_is_found(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clients that read nothing, four stored answers each over 1.9 MB evidence, on a
    relay whose connections may hold 4 MiB in all; the large contents' reads are held until
    every answer that may read one has begun its read. Each read begins with room for its
    whole size already held, and the budget never holds more than itself and one message
    (before, each answer found room for 64 KiB, all twelve found it, and then queued 1.9 MB
    each: a hundred such clients held twice the budget)."""
    await seed(db_url)
    texts = [evidence(MEMBER, "rel", f"{n} {time.time_ns()} {LARGE}") for n in range(4)]
    await publish(db_url, texts)
    size = len(json.dumps(texts[0]))
    budget = 4 * 1024 * 1024

    async def never_reads(text: str) -> None:
        if text.startswith('["EVENT"'):
            await asyncio.Event().wait()

    async with in_process_relay(db_url, memory_bytes=budget) as relay:
        await relay.feed.ready.wait()
        memory = relay.memory
        peak, held_at_read = [0], []
        take = memory.take

        def counted(size: int) -> None:
            take(size)
            peak[0] = max(peak[0], memory.used)

        monkeypatch.setattr(memory, "take", counted)
        go = asyncio.Event()
        load = relay.stored.stored

        async def held_load(row: Any) -> Stored:
            if row["content"] is None:  # a large content, about to be read
                held_at_read.append(memory.used)
                await go.wait()
            return await load(row)

        monkeypatch.setattr(relay.stored, "stored", held_load)
        conns = [
            Connection(
                relay, never_reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
            )
            for _ in range(3)
        ]
        for conn in conns:
            await conn.open()
            for sub in "abcd":
                await conn.handle(json.dumps(["REQ", sub, {"kinds": [4701]}]))
        await until(lambda: len(held_at_read) >= 2)
        assert all(used >= size for used in held_at_read), held_at_read
        go.set()
        await until(lambda: sum(conn.outbox.queued_bytes > 0 for conn in conns) >= 2)
        await asyncio.sleep(0.5)  # the answers that would overfill it, were there any
        assert peak[0] <= budget + 2 * size, (peak[0], budget)
        for conn in conns:
            await conn.close()
        assert memory.used == 0


async def test_room_held_by_another_read_of_the_connection_is_not_a_stall(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reads everything at once, two stored answers over 1.9 MB evidence: while
    one holds room for its message and its read is slow (held here past the stall's clock),
    the other waits for that room without counting it against the client, who has nothing
    unread: both answers end in EOSE, and nobody is told they are behind."""
    await seed(db_url)
    texts = [evidence(MEMBER, "rel", f"{n} {time.time_ns()} {LARGE}") for n in range(2)]
    await publish(db_url, texts)
    monkeypatch.setattr("tms.relay.outbox.STALL_SECONDS", 0.2)
    got: list[list[Any]] = []

    async def reads(text: str) -> None:
        got.append(json.loads(text))

    async with in_process_relay(db_url) as relay:
        await relay.feed.ready.wait()
        load = relay.stored.stored

        async def slow_load(row: Any) -> Stored:
            if row["content"] is None:
                await asyncio.sleep(0.6)  # three times the stall's clock
            return await load(row)

        monkeypatch.setattr(relay.stored, "stored", slow_load)
        conn = Connection(
            relay, reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        for sub in "ab":
            await conn.handle(json.dumps(["REQ", sub, {"kinds": [4701]}]))
        await until(lambda: sum(m[0] == "EOSE" for m in got) == 2, 30)
        assert [m for m in got if m[0] in ("NOTICE", "CLOSED")] == []
        ids = {e["id"] for e in texts}
        for sub in "ab":
            assert {m[2]["id"] for m in got if m[:2] == ["EVENT", sub]} >= ids
        await conn.close()
        assert relay.memory.used == 0


async def test_a_page_larger_than_the_process_budget_is_sent_not_waited_on(db_url: str) -> None:
    """A page of 30 contents of 60 KB, each read with its row (1.8 MB in all), on a relay whose
    connections may hold 1 MiB: the page's rows are in the budget already, so sending them
    waits for the client only (before, each row waited for the process to have room, which
    only the page itself held: pages that filled the budget waited for each other for ever,
    and every stored answer of the process with them)."""
    await seed(db_url)
    T = now() - 100
    rows = [evidence(MEMBER, "rel", f"row {n} {MEDIUM[:60_000]}", created_at=T) for n in range(30)]
    await publish(db_url, rows)
    got: list[list[Any]] = []

    async def reads(text: str) -> None:
        got.append(json.loads(text))

    async with in_process_relay(db_url, memory_bytes=1024 * 1024) as relay:
        await relay.feed.ready.wait()
        conn = Connection(
            relay, reads, slug="rel", url="ws://x/", address=None, pubkey=MEMBER.pubkey
        )
        await conn.open()
        await conn.handle(json.dumps(["REQ", "page", {"kinds": [4701]}]))
        await until(lambda: ["EOSE", "page"] in got, 20)
        assert {m[2]["id"] for m in got if m[0] == "EVENT"} >= {e["id"] for e in rows}
        await conn.close()
        assert relay.memory.used == 0
