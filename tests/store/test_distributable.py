"""sql/015: the schema made distributable, in place, on a ledger that already holds events; and
what `tms.store.citus` says of a database without Citus (nothing changes)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

import asyncpg
import pytest
from factories import OWNER, admin, claim, drop_database, evidence, profile, terms
from publishing import publish, readable

from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr.events import compact_json
from tms.rules.quotes import claim_key
from tms.store import citus
from tms.store.database import DatabaseError, load_migrations, migrate, open_pool, with_database
from tms.types import UNSCOPED

pytestmark = pytest.mark.anyio

BEFORE = 13  # the last migration before sql/015


@pytest.fixture
async def empty_url(pg_server_url: str) -> AsyncIterator[str]:
    """A database with no schema at all."""
    name = f"tms_empty_{uuid.uuid4().hex[:16]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    url = with_database(pg_server_url, name)
    yield url
    await drop_database(pg_server_url, url)


_SQL_EVENT = """
    INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq"""


async def test_015_refiles_a_populated_ledger_in_place(empty_url: str) -> None:
    """A ledger stored under sql/013 (profiles and terms with no collection, an embedding queue
    without one, the old keys, a claim's key keyed by its id alone) is migrated without losing
    or moving a row: profiles and terms are filed under UNSCOPED, the queue learns each event's
    collection, the guard is back on, and the server exports and publishes on it as before."""
    key = OWNER
    events = [
        (terms(key), None),
        (profile(key, "owner"), None),
        (evidence(key, "lab", "The sky is blue today."), "lab"),
        (claim(key, "lab", "The sky is blue."), "lab"),
    ]
    conn = await asyncpg.connect(empty_url)
    try:
        await migrate(conn, [m for m in load_migrations() if m.version <= BEFORE])
        seqs = {}
        for event, collection in events:
            seqs[event["id"]] = await conn.fetchval(
                _SQL_EVENT,
                event["id"],
                event["pubkey"],
                event["created_at"],
                event["kind"],
                compact_json(event["tags"]),
                event["content"],
                event["sig"],
                collection,
            )
        signed, doc, fact = events[0][0], events[2][0], events[3][0]
        await conn.execute(
            "INSERT INTO terms_signatures (id, seq, pubkey, version, sha256) "
            "VALUES ($1, $2, $3, $4, $5)",
            signed["id"],
            seqs[signed["id"]],
            key.pubkey,
            *(json.loads(signed["content"])[field] for field in ("version", "sha256")),
        )
        await conn.execute(
            "INSERT INTO collections (slug, owner, created_by) VALUES ('lab', $1, $2)",
            key.pubkey,
            doc["id"],
        )
        await conn.execute(
            "INSERT INTO claims (id, seq, collection, pubkey, text) VALUES ($1, $2, 'lab', $3, $4)",
            fact["id"],
            seqs[fact["id"]],
            key.pubkey,
            json.loads(fact["content"])["text"],
        )
        await conn.execute(
            "INSERT INTO embedding_queue (event_id, seq) VALUES ($1, $2)",
            fact["id"],
            seqs[fact["id"]],
        )
        await conn.execute(
            "INSERT INTO claim_keys (claim_id, collection, key) VALUES ($1, 'lab', $2)",
            fact["id"],
            claim_key(json.loads(fact["content"])["text"]),
        )

        assert "015_distributable.sql" in await migrate(conn)

        rows = await conn.fetch("SELECT id, seq, collection FROM events ORDER BY seq")
        assert [(r["id"], r["seq"], r["collection"]) for r in rows] == [
            (event["id"], seqs[event["id"]], collection or UNSCOPED) for event, collection in events
        ]
        queued = await conn.fetch("SELECT event_id, seq, collection FROM embedding_queue")
        assert [tuple(r) for r in queued] == [(fact["id"], seqs[fact["id"]], "lab")]
        keyed = await conn.fetch("SELECT claim_id, collection FROM claim_keys")
        assert [tuple(r) for r in keyed] == [(fact["id"], "lab")]
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await conn.execute("UPDATE events SET kind = kind")
        with pytest.raises(asyncpg.UniqueViolationError):  # one id, one row: as before
            await conn.execute(
                "INSERT INTO claims (id, seq, collection, pubkey, text) "
                "SELECT id, seq, collection, pubkey, text FROM claims"
            )
        assert not await citus.is_distributed(conn)
    finally:
        await conn.close()

    pool = await open_pool(empty_url, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.log.backfill()
        lines = Exporter(pool).lines(await readable(Exporter(pool), "lab"))
        async with aclosing(lines):
            exported = [json.loads(line)["id"] async for line in lines]
        assert exported == [event["id"] for event, _ in events]  # terms and profile first
        more = claim(key, "lab", "The sky is not green.")
        assert (await publish(ledger, more))["accepted"] == [more["id"]]
    finally:
        await pool.close()


async def test_every_table_has_a_placement(db_url: str) -> None:
    """A migration that adds a table must say where it lives on Citus (tms.store.citus), or
    `tms migrate --distribute` refuses to guess."""
    conn = await asyncpg.connect(db_url)
    try:
        tables = set(await citus.placements(conn))
    finally:
        await conn.close()
    assert tables == set(citus.PLACEMENT) == set(citus.placement())


async def test_without_citus_nothing_is_distributed(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        if await citus.installed(conn):
            pytest.skip("this database is a Citus cluster's")
        assert set((await citus.placements(conn)).values()) == {"local"}
        with pytest.raises(DatabaseError, match="needs a Citus coordinator"):
            await migrate(conn, distribute=True)
        with pytest.raises(DatabaseError, match="citus extension is not installed"):
            await citus.distribute(conn)
    finally:
        await conn.close()
