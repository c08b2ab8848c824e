"""Citus: where each table lives when the database is a Citus cluster, and the step that puts
it there (`tms migrate --distribute`). On a PostgreSQL without the extension nothing here runs.

- **Distributed by `collection`, co-located with `events`**: everything a collection is made of.
  A publish locks, reads and writes one collection, so its statements all go to the one worker
  that holds the collection's shards, in one transaction; reads of a collection are answered
  there too. Every key of these tables includes the collection (sql/015 says why that changes
  no uniqueness).
- **Reference tables** (a copy on every node): what every request and every access check reads
  and only onboarding and membership changes write: the collections' directory, member lists
  as they stand, approvals, profiles and terms signatures. A collection's own queries join them
  on the worker, without leaving it. The logs' origin (sql/018) too: the publish that signs the
  first checkpoint writes it, on the collection's worker.
- **Local to the coordinator**: the server's bookkeeping, which no ledger query joins: used
  request ids, login nonces and sessions, the refusal log, the migrations record. TMS talks to
  the coordinator, which holds them.

A new kind's typed table (`tms.rules.kinds.KINDS`: `Kind.tables`) needs no entry here: it is
placed as its kind is, distributed with `events` when the kind is scoped, a reference table when
it is not (`placement`). Its migration writes the table as sql/015 left the others: `collection`
as `text COLLATE "C"` (co-located tables share the distribution column's type) and every key
holding it. Any other table a migration adds must be named below, or start-up on a distributed
ledger stops with its name.

The append-only guard: Citus creates a distributed table's triggers on each of its shards only
when `citus.enable_unsafe_triggers` is on while it distributes the table. "Unsafe" means a
trigger that reads or writes other tables, which on a shard would see only that shard; ours
only raises, so it is exactly as safe on a shard as on a table. It is turned on for the
distributing transaction only; every shard (and every shard Citus makes later, when it moves or
splits them) refuses UPDATE, DELETE and TRUNCATE as the table always did, and so does the
coordinator's table, through which a TRUNCATE reaches the shards.
"""

from __future__ import annotations

import logging
from typing import Final

from tms.errors import DatabaseError
from tms.rules.kinds import KINDS
from tms.store.connection import Connection

log = logging.getLogger(__name__)

ANCHOR: Final[str] = "events"  # the table every distributed one is co-located with
DISTRIBUTED: Final[tuple[str, ...]] = (
    "events",
    "evidence",
    "claims",
    "links",
    "contradictions",
    "contradiction_claims",
    "member_lists",
    "member_changes",
    "link_anchors",
    "claim_counts",
    "collection_counts",
    "embeddings",
    "embedding_queue",
    "contradiction_search",
    "tlog_leaves",
    "tlog_nodes",
    "tlog_checkpoints",
    "claim_keys",
    "tlog_cosignatures",
    "tlog_witness_state",
)
# In an order that keeps foreign keys pointing at tables already placed.
REFERENCE: Final[tuple[str, ...]] = (
    "collections",
    "current_member_lists",
    "blocked_addresses",
    "relay_details",
    "memberships",
    "approvals",
    "profiles",
    "terms_signatures",
    "tlog_origin",  # one row, which the first signing publish writes on the collection's worker
)
LOCAL: Final[tuple[str, ...]] = (
    "schema_migrations",
    "used_requests",
    "login_nonces",
    "web_sessions",
    "refusals",
    "refusals_dropped",
    "refusals_kept",
    "witnessed_logs",
)
PLACEMENT: Final[dict[str, str]] = {
    **{table: "distributed" for table in DISTRIBUTED},
    **{table: "reference" for table in REFERENCE},
    **{table: "local" for table in LOCAL},
}


def placement() -> dict[str, str]:
    """Where every table the schema should hold lives on Citus: `PLACEMENT`, and the typed
    tables of kinds registered since (a scoped kind's distributed, another's reference)."""
    placed = dict(PLACEMENT)
    for kind in KINDS.values():
        for table in kind.tables:
            placed.setdefault(table.name, "distributed" if kind.scoped else "reference")
    return placed


_SQL_INSTALLED: Final = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
_SQL_TABLES: Final = """
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    ORDER BY 1"""
# What Citus holds: 'distributed' (hash), 'reference', or another kind it made itself.
_SQL_PLACED: Final = """
    SELECT logicalrelid::regclass::text AS name,
           CASE WHEN partmethod = 'h' THEN 'distributed'
                WHEN partmethod = 'n' AND repmodel = 't' THEN 'reference'
                ELSE 'citus local' END AS placed
    FROM pg_dist_partition"""
_SQL_WORKERS: Final = """
    SELECT count(*) FROM pg_dist_node
    WHERE noderole = 'primary' AND isactive AND shouldhaveshards AND groupid <> 0"""
_SQL_HAS_ROWS: Final = "SELECT EXISTS (SELECT 1 FROM ONLY {table})"
_SQL_TRUNCATE_TRIGGERS: Final = """
    SELECT t.tgname FROM pg_trigger t
    WHERE t.tgrelid = $1::regclass AND NOT t.tgisinternal AND t.tgtype & 32 <> 0"""
_SQL_VIEWS: Final = """
    SELECT c.relname, pg_get_viewdef(c.oid) AS body
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind = 'v' ORDER BY 1"""


async def installed(conn: Connection) -> bool:
    """Whether this database has the citus extension."""
    return bool(await conn.fetchval(_SQL_INSTALLED))


async def placements(conn: Connection) -> dict[str, str]:
    """Each table of the schema and where it lives now: 'distributed', 'reference', or
    'local' (a plain table on the node TMS talks to)."""
    tables = [row["relname"] for row in await conn.fetch(_SQL_TABLES)]
    placed: dict[str, str] = {}
    if await installed(conn):
        placed = {row["name"]: row["placed"] for row in await conn.fetch(_SQL_PLACED)}
    return {table: placed.get(table, "local") for table in tables}


async def is_distributed(conn: Connection) -> bool:
    """Whether the ledger has been distributed (`distribute` ran here)."""
    return await installed(conn) and (await placements(conn)).get(ANCHOR) == "distributed"


async def distribute(conn: Connection) -> list[str]:
    """Place every table Citus does not hold yet as `placement()` says, inside the caller's
    transaction (the migrations' own, under their lock); returns the tables placed now.
    Idempotent: on a distributed ledger it places only tables a later migration added.

    A table that held rows on the coordinator has them copied to its shards by Citus; the
    coordinator's copy is then emptied (its TRUNCATE guard lifted for that one statement, on
    the coordinator's table only), so the ledger is not kept twice."""
    if not await installed(conn):
        raise DatabaseError(
            "the citus extension is not installed in this database: create it first "
            "(CREATE EXTENSION citus, on the coordinator and on every worker)"
        )
    current = await placements(conn)
    wanted = placement()
    unknown = sorted(set(current) - set(wanted))
    if unknown:
        raise DatabaseError(
            f"tables with no Citus placement in tms.store.citus.PLACEMENT: {', '.join(unknown)}"
            " (a migration added them: say whether each is distributed, reference or local, or"
            " register the kind whose typed table it is)"
        )
    # Reference tables first (foreign keys point at them), then `events`, then the rest.
    order = {"reference": 0, "distributed": 2, "local": 3}
    todo = sorted(
        (t for t, where in wanted.items() if where != "local" and current.get(t) == "local"),
        key=lambda t: (order[wanted[t]] - (t == ANCHOR), _position(t)),
    )
    if not todo:
        return []
    if not await conn.fetchval(_SQL_WORKERS):
        raise DatabaseError(
            "this Citus coordinator has no worker nodes to distribute to: add them first "
            "(SELECT citus_add_node('host', port) for each)"
        )
    await conn.execute("SET LOCAL citus.enable_unsafe_triggers = on")  # see the module's notes
    await conn.execute("SET LOCAL client_min_messages = warning")  # Citus' notices per table
    with_rows = [t for t in todo if await conn.fetchval(_SQL_HAS_ROWS.format(table=t))]
    for table in todo:
        if wanted[table] == "reference":
            await conn.execute("SELECT create_reference_table($1)", table)
        elif table == ANCHOR:
            await conn.execute("SELECT create_distributed_table($1, 'collection')", table)
        else:
            await conn.execute(
                "SELECT create_distributed_table($1, 'collection', colocate_with => $2)",
                table,
                ANCHOR,
            )
    if with_rows:
        await _empty_coordinator_copies(conn, with_rows)
    await _propagate_views(conn)
    return todo


def _position(table: str) -> int:
    """A table's place in the lists above (the order they are placed in); later tables after."""
    listed = (*REFERENCE, *DISTRIBUTED)
    return listed.index(table) if table in listed else len(listed)


async def _empty_coordinator_copies(conn: Connection, tables: list[str]) -> None:
    """Empty the coordinator's own copies of rows Citus has copied to shards. DDL propagation
    is off meanwhile, so lifting and restoring the TRUNCATE guards touches the coordinator's
    tables only: the shards keep theirs throughout."""
    await conn.execute("SET LOCAL citus.enable_ddl_propagation = off")
    guards = {t: [r["tgname"] for r in await conn.fetch(_SQL_TRUNCATE_TRIGGERS, t)] for t in tables}
    for table, names in guards.items():
        for name in names:
            await conn.execute(f'ALTER TABLE "{table}" DISABLE TRIGGER "{name}"')
    for table in tables:
        await conn.execute("SELECT truncate_local_data_after_distributing_table($1)", table)
    for table, names in guards.items():
        for name in names:
            await conn.execute(f'ALTER TABLE "{table}" ENABLE TRIGGER "{name}"')
    await conn.execute("SET LOCAL citus.enable_ddl_propagation = on")


async def _propagate_views(conn: Connection) -> None:
    """Views made before their tables were Citus' stay on the coordinator; made again now, Citus
    creates them on every node too (for servers that query a worker directly)."""
    for row in await conn.fetch(_SQL_VIEWS):
        await conn.execute(f'CREATE OR REPLACE VIEW "{row["relname"]}" AS {row["body"]}')
