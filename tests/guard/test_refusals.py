"""The refusal log's recorder on real PostgreSQL: records written in batches, rate-limit refusals
counted a minute at a time, each kind kept to its own size with the drops counted (so that a
flood of one kind cannot push out another's records), a full queue giving way oldest first, a
database that is down costing nothing but a wait, and `record` never raising."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from factories import admin, allow_connections

from tms.errors import PublishError, Refusal, is_database_down
from tms.guard import clients
from tms.guard.refusal_store import Record, RefusalStore
from tms.guard.refusals import QUEUE, RefusalLog
from tms.store.database import (
    load_migrations,
    migrate,
    open_pool,
    with_database,
)

pytestmark = pytest.mark.anyio

KEY = "c" * 64
LONG_AGO = datetime.now(UTC) - timedelta(days=1)


async def test_records_hold_when_what_where_and_whose_only(db_url: str) -> None:
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool))
        token = clients.CURRENT.set("192.0.2.9")
        try:
            log.record(Refusal.STALE, "list_claims", KEY)
            log.refused(PublishError("quote not found").refused_as(Refusal.INVALID, KEY), "publish")
            log.refused(ValueError("not ours"), "publish")  # not a TMSError: no refusal
        finally:
            clients.CURRENT.reset(token)
        log.record(Refusal.SSRF, "fetch_url" * 20, address="2001:db8::1")
        await log.flush()
        store = RefusalStore(pool)
        records = await store.newest(LONG_AGO, None, 10)
        assert [(r.kind, r.tool, r.pubkey, r.address) for r in records] == [
            ("stale", "list_claims", KEY, "192.0.2.9"),
            ("invalid", "publish", KEY, "192.0.2.9"),
            ("ssrf", ("fetch_url" * 20)[:64], None, "2001:db8::1"),
        ]
        assert await store.counts(LONG_AGO) == {"invalid": 1, "ssrf": 1, "stale": 1}
        assert await store.counts(LONG_AGO, KEY) == {"invalid": 1, "stale": 1}
        assert await store.counts(datetime.now(UTC) + timedelta(minutes=1)) == {}
    finally:
        await pool.close()


async def test_the_log_keeps_the_newest_and_counts_what_it_drops(db_url: str) -> None:
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool), keep=100)
        for n in range(250):
            log.record(Refusal.RATE_LIMITED, f"tool{n}")
            if n % 60 == 59:
                await log.flush()
        await log.flush()
        store = RefusalStore(pool)
        kept = await store.newest(LONG_AGO, None, 1000)
        assert len(kept) == 100
        assert [r.tool for r in kept] == [f"tool{n}" for n in range(150, 250)]
        assert await store.dropped() == 150
    finally:
        await pool.close()


async def test_a_full_queue_gives_way_oldest_first_and_counts_it(db_url: str) -> None:
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool))
        for n in range(QUEUE + 5):
            log.record(Refusal.INVALID, str(n))
        await log.flush()
        store = RefusalStore(pool)
        assert (await store.counts(LONG_AGO)) == {"invalid": QUEUE}
        assert [r.tool for r in await store.newest(LONG_AGO, None, 1)] == [str(QUEUE + 4)]
        assert await store.dropped() == 5
    finally:
        await pool.close()


async def test_a_database_that_is_down_keeps_the_records_waiting(
    pg_server_url: str, db_url: str
) -> None:
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool))
        log.record(Refusal.REPLAY, "get_event", KEY)
        log.record(Refusal.RATE_LIMITED, "mcp", address="192.0.2.7")
        log.record(Refusal.RATE_LIMITED, "mcp", address="192.0.2.7")
        await allow_connections(pg_server_url, db_url, False)
        try:
            with pytest.raises(Exception) as down:  # any of the outage's forms
                await log.flush()
            # Over TCP a pooled connection the server ended may fail as asyncpg's
            # InternalClientError: the doors count every such form as the database down.
            assert is_database_down(down.value), repr(down.value)
            log.record(Refusal.REPLAY, "get_links", KEY)  # never raises, down or not
            log.record(Refusal.RATE_LIMITED, "mcp", address="192.0.2.7")
        finally:
            await allow_connections(pg_server_url, db_url, True)
        await log.flush()
        store = RefusalStore(pool)
        records = await store.newest(LONG_AGO, None, 10)
        assert sorted((r.tool, r.count) for r in records if r.kind == "replay") == [
            ("get_event", 1),
            ("get_links", 1),
        ]
        assert (await store.counts(LONG_AGO))["rate_limited"] == 3
        assert await store.dropped() == 0
    finally:
        await pool.close()


async def test_without_a_store_records_are_only_counted() -> None:
    log = RefusalLog(None)
    log.record(Refusal.INVALID, "publish")
    await log.flush()
    await log.close()


async def test_a_flood_of_429s_from_one_address_leaves_the_others_records_in_place(
    db_url: str,
) -> None:
    """The attack: one address far over its rate limit for long enough to fill the log. Its
    refusals are counted a minute at a time, so the log does not even fill; every other
    address's records stay, bad signatures included, and every refusal is counted."""
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool), keep=100)
        for n in range(30):
            log.record(Refusal.BAD_SIGNATURE, "publish", address=f"192.0.2.{n + 1}")
        log.record(Refusal.REPLAY, "list_claims", KEY, address="192.0.2.99")
        await log.flush()
        for n in range(20_000):  # 200 times what the log keeps of a kind
            log.record(Refusal.RATE_LIMITED, "mcp", address="198.51.100.7")
            if n % 1000 == 999:  # as the writer does when that many wait
                await log.flush()
        log.record(Refusal.RATE_LIMITED, "page publish", address="198.51.100.7")
        await log.flush()
        store = RefusalStore(pool)
        assert await store.counts(LONG_AGO) == {
            "rate_limited": 20_001,
            "bad_signature": 30,
            "replay": 1,
        }
        rows = await store.newest(LONG_AGO, None, 1000)
        bad = [r.address for r in rows if r.kind == "bad_signature"]
        assert sorted(bad) == sorted(f"192.0.2.{n + 1}" for n in range(30))
        flood = [r for r in rows if r.kind == "rate_limited"]
        # One row a minute and route (the flood may straddle a minute's end).
        assert {r.tool for r in flood} == {"mcp", "page publish"}
        assert len(flood) <= 4
        assert sum(r.count for r in flood) == 20_001
        assert all(r.at.second == 0 and r.at.microsecond == 0 for r in flood)
        assert await store.dropped() == 0
    finally:
        await pool.close()


async def test_each_kind_keeps_its_own_budget(db_url: str) -> None:
    """A kind over `keep` rows loses its own oldest, never another kind's; the refusals in the
    rows deleted are counted as dropped (a minute's row counts all of its refusals)."""
    pool = await open_pool(db_url, max_size=2)
    try:
        store = RefusalStore(pool)
        minute = datetime.now(UTC).replace(second=0, microsecond=0)
        bad = [Record(minute, "bad_signature", "publish", None, f"192.0.2.{n}") for n in range(5)]
        await store.write(bad, keep=10)
        for batch in range(3):
            invalid = [
                Record(minute, "invalid", f"tool{batch * 10 + n}", None, "192.0.2.200")
                for n in range(10)
            ]
            await store.write(invalid, keep=10)
        # Rate limits from 25 addresses, 3 refusals each: 25 rows, 15 of them pruned.
        flood = [
            Record(minute, "rate_limited", "mcp", None, f"203.0.113.{n}", count=3)
            for n in range(25)
        ]
        await store.write(flood, keep=10)
        rows = await store.newest(LONG_AGO, None, 1000)
        by_kind: dict[str, list[Record]] = {}
        for row in rows:
            by_kind.setdefault(row.kind, []).append(row)
        assert [r.address for r in by_kind["bad_signature"]] == [r.address for r in bad]
        assert [r.tool for r in by_kind["invalid"]] == [f"tool{n}" for n in range(20, 30)]
        assert [r.address for r in by_kind["rate_limited"]] == [
            f"203.0.113.{n}" for n in range(15, 25)
        ]
        assert await store.dropped() == 20 + 15 * 3
        kept = await pool.fetch("SELECT kind, rows FROM refusals_kept ORDER BY kind")
        assert [(r["kind"], r["rows"]) for r in kept] == [
            ("bad_signature", 5),
            ("invalid", 10),
            ("rate_limited", 10),
        ]
    finally:
        await pool.close()


async def test_a_flood_in_memory_cannot_push_out_another_kind(db_url: str) -> None:
    """Before the writer runs: rate limits from more addresses than a queue holds give way
    among themselves (counted as lost), and the bad signature queued first is still written."""
    pool = await open_pool(db_url, max_size=2)
    try:
        log = RefusalLog(RefusalStore(pool))
        log.record(Refusal.BAD_SIGNATURE, "publish", address="192.0.2.1")
        for n in range(QUEUE + 5):
            log.record(
                Refusal.RATE_LIMITED, "mcp", address=f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"
            )
        await log.flush()
        store = RefusalStore(pool)
        counts = await store.counts(LONG_AGO)
        assert counts["bad_signature"] == 1
        assert counts["rate_limited"] == QUEUE
        assert await store.dropped() == 5
    finally:
        await pool.close()


async def test_the_migration_counts_the_rate_limits_recorded_one_by_one(
    pg_server_url: str,
) -> None:
    """sql/011 on a log written before it: the rate-limit rows become a minute's count each
    (rows of one microsecond included), the other rows stay as they were, and each kind's rows
    are counted for its budget."""
    name = f"tms_test_011_{uuid.uuid4().hex[:12]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    url = with_database(pg_server_url, name)
    try:
        conn = await asyncpg.connect(url)
        try:
            before = [m for m in load_migrations() if m.version < 11]
            await migrate(conn, before)
            minute = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
            rows = [
                (minute + timedelta(seconds=1), "rate_limited", "mcp", None, "192.0.2.1"),
                (minute + timedelta(seconds=1), "rate_limited", "mcp", None, "192.0.2.1"),
                (minute + timedelta(seconds=59), "rate_limited", "mcp", None, "192.0.2.1"),
                (minute + timedelta(seconds=61), "rate_limited", "mcp", None, "192.0.2.1"),
                (minute + timedelta(seconds=2), "rate_limited", "list_claims", KEY, "192.0.2.1"),
                (minute + timedelta(seconds=3), "bad_signature", "publish", None, "192.0.2.2"),
            ]
            await conn.executemany(
                "INSERT INTO refusals (at, kind, tool, pubkey, address) "
                "VALUES ($1, $2, $3, $4, $5)",
                rows,
            )
            await migrate(conn)
            found = await conn.fetch(
                "SELECT at, kind, tool, pubkey, count FROM refusals ORDER BY seq"
            )
            assert [tuple(r) for r in found] == [
                (minute + timedelta(seconds=3), "bad_signature", "publish", None, 1),
                (minute, "rate_limited", "mcp", None, 3),
                (minute + timedelta(minutes=1), "rate_limited", "mcp", None, 1),
                (minute, "rate_limited", "list_claims", KEY, 1),
            ]
            kept = await conn.fetch("SELECT kind, rows FROM refusals_kept ORDER BY kind")
            assert [tuple(r) for r in kept] == [("bad_signature", 1), ("rate_limited", 3)]
        finally:
            await conn.close()
    finally:
        await admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}"')
