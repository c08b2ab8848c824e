"""The transparency logs' origin is the database's (sql/018 `tlog_origin`): recorded by the first
publish that signs a checkpoint, kept whatever the settings say later, and, on a database whose
checkpoints were signed before the table existed, adopted from them; a server configured with
another one says so at start and keeps the recorded one."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from factories import LOG_SIGNER, OWNER, admin, claim, drop_database
from publishing import open_collection, publish

from tms.ledger.service import Ledger
from tms.rules.publish import PublishError
from tms.store.database import load_migrations, migrate, open_pool, with_database
from tms.tlog.note import LogSigner, open_checkpoint

pytestmark = pytest.mark.anyio


def signer(host: str) -> LogSigner:
    return LogSigner(LOG_SIGNER, host)


async def recorded(pool: asyncpg.Pool) -> str | None:
    host: str | None = await pool.fetchval("SELECT host FROM tlog_origin")
    return host


async def test_the_first_signed_checkpoint_records_the_origin_and_later_ones_keep_it(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool = await open_pool(db_url, min_size=1, max_size=4)
    try:
        first = Ledger(pool, log=signer("127.0.0.1"))
        assert await first.log.check_origin() is None  # nothing signed yet: nothing recorded
        assert await recorded(pool) is None
        opened = await open_collection(first, OWNER, "lab")
        assert opened["checkpoints"][0]["origin"] == "127.0.0.1/c/lab"
        assert await recorded(pool) == "127.0.0.1"

        # Later, TMS_BASE_URL set: the origin stays, and the start says so, naming both.
        later = Ledger(pool, log=signer("tms.example.org"))
        with caplog.at_level(logging.WARNING, logger="tms.ledger.log.tree"):
            assert await later.log.check_origin() == "127.0.0.1"
        [warning] = [r.getMessage() for r in caplog.records if r.name == "tms.ledger.log.tree"]
        assert "recorded in the database is 127.0.0.1/c/<slug>" in warning
        assert "configured for tms.example.org/c/<slug>" in warning
        result = await publish(later, claim(OWNER, "lab", "Still named as before."))
        [checkpoint] = result["checkpoints"]
        assert checkpoint["origin"] == "127.0.0.1/c/lab"
        assert open_checkpoint(checkpoint["note"], LOG_SIGNER.verifier()).origin == (
            "127.0.0.1/c/lab"
        )

        # A server that never ran check_origin (a publish reaching it first) takes it too.
        unchecked = Ledger(pool, log=signer("elsewhere.example"))
        again = await publish(unchecked, claim(OWNER, "lab", "And again."))
        assert again["checkpoints"][0]["origin"] == "127.0.0.1/c/lab"
        assert await recorded(pool) == "127.0.0.1"
    finally:
        await pool.close()


async def test_a_failed_first_publish_records_nothing(db_url: str) -> None:
    """The origin is recorded by the publish that signs, in its transaction: one that stores
    nothing (a refused batch) leaves it to be chosen by the first that does."""
    pool = await open_pool(db_url, min_size=1, max_size=4)
    try:
        ledger = Ledger(pool, log=signer("staging.example"))
        await ledger.approve([OWNER.pubkey])
        with pytest.raises(PublishError):
            await publish(ledger, claim(OWNER, "lab", "No terms signed, no collection."))
        assert await recorded(pool) is None
        later = Ledger(pool, log=signer("tms.example.org"))
        opened = await open_collection(later, OWNER, "lab")
        assert opened["checkpoints"][0]["origin"] == "tms.example.org/c/lab"
    finally:
        await pool.close()


@pytest.fixture
async def empty_url(pg_server_url: str) -> AsyncIterator[str]:
    name = f"tms_origin_{uuid.uuid4().hex[:16]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    url = with_database(pg_server_url, name)
    yield url
    await drop_database(pg_server_url, url)


async def test_a_database_signed_before_018_adopts_the_origin_of_its_checkpoints(
    empty_url: str,
) -> None:
    """Checkpoints signed before the origin was recorded (under whatever host the server had,
    the newest one's when it changed) name the origin from then on."""
    before = [m for m in load_migrations() if m.version < 18]
    conn = await asyncpg.connect(empty_url)
    try:
        await migrate(conn, before)
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(empty_url, min_size=1, max_size=4)  # not migrated further
    try:
        old = Ledger(pool, log=signer("old.example"))
        old.log.settled = True  # as code before sql/018 signed: no table to read
        await open_collection(old, OWNER, "lab")
        moved = Ledger(pool, log=signer("kept.example"))
        moved.log.settled = True
        await publish(moved, claim(OWNER, "lab", "Signed under the newer host."))
    finally:
        await pool.close()
    pool = await open_pool(empty_url, min_size=1, max_size=4)  # the upgrade: sql/018 applied
    try:
        assert await recorded(pool) == "kept.example"
        now = Ledger(pool, log=signer("tms.example.org"))
        assert await now.log.check_origin() == "kept.example"
        result = await publish(now, claim(OWNER, "lab", "After the upgrade."))
        assert result["checkpoints"][0]["origin"] == "kept.example/c/lab"
    finally:
        await pool.close()


async def test_a_throwaway_key_never_records_the_origin(ledger: Ledger) -> None:
    """The operator's commands sign with a throwaway key (`tms export --checkpoint` builds a log
    not built yet): its host, tms.invalid, is never made the database's origin."""
    opened = await open_collection(ledger, OWNER, "lab")
    assert opened["checkpoints"][0]["origin"] == "tms.invalid/c/lab"
    assert await recorded(ledger.pool) is None
    server = Ledger(ledger.pool, log=signer("tms.example.org"))
    result = await publish(server, claim(OWNER, "lab", "The server's first."))
    assert result["checkpoints"][0]["origin"] == "tms.example.org/c/lab"
    assert await recorded(ledger.pool) == "tms.example.org"
