"""The database layer: migrations applied once, in order, recorded, and never silently edited."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from factories import (
    T0,
    claim,
    contradiction,
    evidence,
    link,
    member_change,
    members,
    profile,
    terms,
)
from publishing import publish

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.kinds import KINDS
from tms.store.database import (
    DatabaseError,
    Migration,
    load_migrations,
    migrate,
    sql_dir,
    with_database,
)
from tms.store.driver import is_database_down

pytestmark = pytest.mark.anyio


async def test_fresh_database_has_every_migration_recorded(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch("SELECT version, name, sha256 FROM schema_migrations ORDER BY 1")
        assert [(r["version"], r["name"], r["sha256"]) for r in rows] == [
            (m.version, m.name, m.sha256) for m in load_migrations()
        ]
        assert await migrate(conn) == []  # running again applies nothing
    finally:
        await conn.close()


async def test_concurrent_start_ups_apply_each_migration_once(db_url: str) -> None:
    version = load_migrations()[-1].version + 1
    extra = [
        *load_migrations(),
        # a function, not a table: on a Citus coordinator a new table needs a placement
        Migration(
            version,
            f"{version:03d}_probe.sql",
            "CREATE FUNCTION tms_probe() RETURNS int LANGUAGE sql RETURN 1;",
        ),
    ]
    conns = [await asyncpg.connect(db_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c, extra) for c in conns))
        assert sorted(len(r) for r in results) == [0, 0, 1]
    finally:
        for c in conns:
            await c.close()


async def test_an_edited_migration_stops_start_up(db_url: str) -> None:
    edited = load_migrations()
    edited[0] = Migration(1, edited[0].name, edited[0].sql + "\n-- edited\n")
    conn = await asyncpg.connect(db_url)
    try:
        with pytest.raises(DatabaseError, match="changed after it was applied"):
            await migrate(conn, edited)
        with pytest.raises(DatabaseError, match="which this version of TMS does not know"):
            await migrate(conn, [])
    finally:
        await conn.close()


def test_migration_files_are_numbered_once_each(tmp_path: Path) -> None:
    versions = [m.version for m in load_migrations()]
    assert versions == sorted(set(versions)) and versions[0] == 1
    (tmp_path / "001_a.sql").write_text("SELECT 1;")
    (tmp_path / "003_c.sql").write_text("SELECT 1;")  # 002 is another branch's, not landed yet
    assert [m.version for m in load_migrations(tmp_path)] == [1, 3]
    (tmp_path / "003_d.sql").write_text("SELECT 1;")
    with pytest.raises(DatabaseError, match="each number once"):
        load_migrations(tmp_path)
    (tmp_path / "003_d.sql").unlink()
    (tmp_path / "2_b.sql").write_text("SELECT 1;")
    with pytest.raises(DatabaseError, match=r"NNN_name\.sql"):
        load_migrations(tmp_path)


def test_every_gap_in_the_numbers_is_explained() -> None:
    """A missing number is one another branch held (`load_migrations` allows it); sql/README.md
    says so for each, so that nobody takes a gap for a lost migration (issue 27 item 11)."""
    versions = {m.version for m in load_migrations()}
    gaps = [n for n in range(1, max(versions)) if n not in versions]
    said = (sql_dir() / "README.md").read_text("utf-8")
    assert [n for n in gaps if f"`{n:03d}`" not in said] == []
    assert all(f"sql/{n:03d}*" in said for n in gaps)


def test_with_database_keeps_the_socket_directory() -> None:
    url = "postgresql://postgres:@/postgres?host=/tmp/x/postgres"
    assert with_database(url, "tms") == "postgresql://postgres:@/tms?host=/tmp/x/postgres"
    assert with_database("postgresql://u:p@h:5432/db", "t") == "postgresql://u:p@h:5432/t"


async def test_every_typed_row_has_its_event(ledger: Ledger) -> None:
    """The typed tables carry no foreign keys (see sql/001): the projection is checked here."""
    key = SecretKey.generate()
    await ledger.approve([key.pubkey])
    doc = evidence(key, "c", "The sky is blue today.")
    a = claim(key, "c", "The sky is blue.")
    b = claim(key, "c", "The sky is green.")
    await publish(
        ledger,
        terms(key),
        profile(key, "tester"),
        doc,
        a,
        b,
        link(key, "c", doc["id"], a["id"], "sky is blue"),
        contradiction(key, "c", [a["id"], b["id"]], "Colours."),
        members(key, "c", []),
        member_change(key, "c", "allowpubkey", SecretKey.generate().pubkey, created_at=T0 + 1),
    )
    # Compared in Python rather than joined: the same on a single PostgreSQL and on Citus,
    # where profiles and terms are reference tables beside the distributed events.
    # A table may hold the rows of several kinds (member_changes: 27235, 28934, 28936).
    kinds_of: dict[str, list[int]] = {}
    for kind in KINDS.values():
        for table in kind.tables:
            if table.sequenced:
                kinds_of.setdefault(table.name, []).append(kind.number)
    for name, numbers in kinds_of.items():
        rows = await ledger.pool.fetch(f"SELECT id, seq, pubkey FROM {name}")
        stored = await ledger.pool.fetch(
            "SELECT id, seq, pubkey FROM events WHERE kind = ANY($1::int[])", numbers
        )
        assert {tuple(r) for r in rows} == {tuple(r) for r in stored}, name
        assert len(rows) == (2 if name == "claims" else 1), name
    assert (
        await ledger.pool.fetchval(
            """SELECT count(*) FROM contradiction_claims cc
               JOIN claims c ON c.id = cc.claim_id AND c.collection = cc.collection
               JOIN contradictions k
                 ON k.id = cc.contradiction_id AND k.collection = cc.collection"""
        )
        == 2
    )


def test_a_worker_lost_under_citus_reads_as_the_database_down() -> None:
    """Citus relays a worker's connection lost mid-statement as an internal error in libpq's
    words: the doors must answer "database unavailable", as for the coordinator itself; any
    other internal error stays a bug."""
    lost = asyncpg.InternalServerError(
        "server closed the connection unexpectedly\n\tThis probably means the server "
        "terminated abnormally\n\tbefore or while processing the request."
    )
    assert is_database_down(lost)
    assert is_database_down(
        asyncpg.InternalServerError("failure on connection marked as essential: 127.0.0.1:5702")
    )
    assert is_database_down(
        asyncpg.InternalServerError(
            "could not commit transaction for shard 102024 on at least one active node"
        )
    )
    assert not is_database_down(asyncpg.InternalServerError("cache lookup failed for type 0"))
