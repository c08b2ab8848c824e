"""The refusal log's recorder on real PostgreSQL: records written in batches, the log kept to its
size with the drops counted, a full queue giving way oldest first, a database that is down
costing nothing but a wait, and `record` never raising."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from factories import allow_connections

from tms.errors import PublishError, Refusal
from tms.guard import clients
from tms.guard.refusals import QUEUE, RefusalLog
from tms.ledger.refusals import RefusalStore
from tms.store.database import is_database_down, open_pool

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
        await allow_connections(pg_server_url, db_url, False)
        try:
            with pytest.raises(Exception) as down:  # any of the outage's forms
                await log.flush()
            # Over TCP a pooled connection the server ended may fail as asyncpg's
            # InternalClientError: the doors count every such form as the database down.
            assert is_database_down(down.value), repr(down.value)
            log.record(Refusal.REPLAY, "get_links", KEY)  # never raises, down or not
        finally:
            await allow_connections(pg_server_url, db_url, True)
        await log.flush()
        records = await RefusalStore(pool).newest(LONG_AGO, None, 10)
        assert [r.tool for r in records] == ["get_event", "get_links"]
    finally:
        await pool.close()


async def test_without_a_store_records_are_only_counted() -> None:
    log = RefusalLog(None)
    log.record(Refusal.INVALID, "publish")
    await log.flush()
    await log.close()
