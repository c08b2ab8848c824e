"""The commit feed (tms.ledger.read.feed): what committed is handed over once, after its commit,
never what rolled back; and after the listening connection is lost, each collection's events above
the last `seq` handed over are caught up, even one with a *lower* global `seq` that committed
*later* than another collection's (why the feed keeps a position per collection)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest
from factories import NOW, OWNER, claim, members, terms
from publishing import publish

from tms.ledger.read.feed import APPLICATION_NAME, CommitFeed
from tms.ledger.read.filters import Stored
from tms.ledger.service import Ledger
from tms.ledger.write.writes import CHANNEL

pytestmark = pytest.mark.anyio


class Seen:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.arrived = asyncio.Event()

    def __call__(self, batch: Sequence[Stored]) -> None:
        self.ids.extend(s.event.id for s in batch)
        self.arrived.set()

    async def until(self, count: int, seconds: float = 10) -> list[str]:
        async with asyncio.timeout(seconds):
            while len(self.ids) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.ids


@pytest.fixture
async def feed(ledger: Ledger, db_url: str) -> AsyncIterator[tuple[CommitFeed, Seen]]:
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER), members(OWNER, "x", []), members(OWNER, "y", []))
    seen = Seen()
    running = CommitFeed(db_url, ledger.pool, wanted=lambda key: True, deliver=seen)
    running.start()
    await asyncio.wait_for(running.ready.wait(), 10)
    try:
        yield running, seen
    finally:
        await running.close()


async def test_committed_events_arrive_once_in_commit_order(
    ledger: Ledger, feed: tuple[CommitFeed, Seen]
) -> None:
    _, seen = feed
    batch = [claim(OWNER, "x", f"claim {n}", created_at=NOW) for n in range(3)]
    await publish(ledger, *batch)
    other = claim(OWNER, "y", "in y")
    await publish(ledger, other)
    await publish(ledger, *batch)  # stored already: skipped, nothing new
    assert await seen.until(4) == [e["id"] for e in [*batch, other]]
    await asyncio.sleep(0.3)
    assert len(seen.ids) == 4


async def _insert(conn: asyncpg.Connection, collection: str) -> tuple[str, int]:
    """An event row as the publish statement writes it, with its notification."""
    event_id = secrets.token_hex(32)
    seq = await conn.fetchval(
        "INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection) "
        "VALUES ($1, $2, 0, 4702, '[]', '{}', $3, $4) RETURNING seq",
        event_id,
        OWNER.pubkey,
        "0" * 128,
        collection,
    )
    await conn.execute(
        "SELECT pg_notify($1, json_build_array($2::text, $3::bigint, $3::bigint, false)::text)",
        CHANNEL,
        collection,
        seq,
    )
    return event_id, seq


async def test_a_rolled_back_write_delivers_nothing(
    db_url: str, feed: tuple[CommitFeed, Seen]
) -> None:
    _, seen = feed
    conn = await asyncpg.connect(db_url)
    try:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await _insert(conn, "x")
                raise RuntimeError("roll back")
        async with conn.transaction():
            kept, _ = await _insert(conn, "x")
    finally:
        await conn.close()
    assert await seen.until(1) == [kept]
    await asyncio.sleep(0.3)
    assert seen.ids == [kept]


async def test_catch_up_finds_a_lower_seq_that_committed_later(
    db_url: str, feed: tuple[CommitFeed, Seen]
) -> None:
    running, seen = feed
    early, late = await asyncpg.connect(db_url), await asyncpg.connect(db_url)
    admin = await asyncpg.connect(db_url)
    try:
        slow = early.transaction()
        await slow.start()
        first_id, first_seq = await _insert(early, "x")  # the lower seq, not committed yet
        async with late.transaction():
            second_id, second_seq = await _insert(late, "y")
        assert first_seq < second_seq
        assert await seen.until(1) == [second_id]  # y's committed; x's not yet
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1",
            APPLICATION_NAME,
        )
        assert ended == 1
        await slow.commit()  # while nobody listens: its notification is lost
        assert await seen.until(2) == [second_id, first_id]  # caught up all the same
        await asyncio.sleep(0.3)
        assert len(seen.ids) == 2
        assert running.seen["x"] == first_seq and running.seen["y"] == second_seq
    finally:
        for conn in (early, late, admin):
            await conn.close()
