"""PostgreSQL: which database, the connection pools and the migrations. The pools' connections
raise typed errors where the database is called (`tms.store.driver`). The embedded server
itself is `tms.store.embedded`.

Every connection TMS opens names its release and schema in `application_name` (`tms 0.1.0
schema 017 pool`), so that a server about to migrate sees, in `pg_stat_activity`, the older
servers still using the database, and refuses rather than break them (a rolling restart over
sql/015 left the old servers failing on `ON CONFLICT` and on `collection` being NOT NULL). The
releases before this one named only their commit feed, `tms-feed`; that name counts as older.
The migrations applied, and the start-up back-fills, are told in the `tms.upgrade` log, which
the commands print on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Final

import asyncpg

from tms.errors import DatabaseError, StoreError, one_line
from tms.store import citus, driver
from tms.store.connection import Connection as Connection  # named here for the ledger and search
from tms.store.connection import Pool as Pool
from tms.store.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)
upgrade = logging.getLogger("tms.upgrade")  # migrations and back-fills, printed by the commands

DATABASE_NAME: Final = "tms"
_MIGRATION_LOCK: Final = 0x746D73_6D6967  # "tms" "mig": one advisory lock id for migrations
_MIGRATION_NAME = re.compile(r"(\d{3})_[a-z0-9_]+\.sql")
SCHEMA_FILE = "schema.sql"  # what the migrations build, for reading (tests/store/test_schema.py)
OLD_FEED_NAME: Final = "tms-feed"  # every connection's name before releases named themselves
_APPLICATION_NAME = re.compile(r"tms (\S+) schema (\d+)(?: .*)?")


def sql_dir() -> Path:
    """`sql/` beside the package in a checkout, or inside it in an installed wheel."""
    here = Path(__file__).resolve().parent.parent  # the `tms` package
    for candidate in (here / "sql", here.parent / "sql"):
        if candidate.is_dir():
            return candidate
    raise DatabaseError(f"no sql/ migrations folder found next to {here}")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@cache
def newest_schema() -> int:
    """The highest migration number this code knows: the schema it runs on."""
    return max(m.version for m in load_migrations())


def application_name(part: str) -> str:
    """What a connection of this process is called in `pg_stat_activity`: release, schema and
    which part of the server holds it (at most 63 bytes, PostgreSQL's limit)."""
    return f"tms {installed_version('tms')} schema {newest_schema():03d} {part}"[:63]


def older_server(name: str, schema: int) -> bool:
    """Whether a connection's `application_name` is that of a TMS older than `schema`."""
    if name == OLD_FEED_NAME:
        return True
    match = _APPLICATION_NAME.fullmatch(name)
    return match is not None and int(match.group(2)) < schema


def _connections(count: int) -> str:
    return f"{count} connection" + ("" if count == 1 else "s")


async def _tms_connections(conn: Connection) -> list[asyncpg.Record]:
    """The TMS connections to this database other than `conn`, by name and client."""
    return await conn.fetch(
        """SELECT application_name, coalesce(host(client_addr), 'local') AS client,
                  count(*) AS connections
           FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND (application_name = $1 OR application_name LIKE 'tms % schema %')
           GROUP BY 1, 2""",
        OLD_FEED_NAME,
    )


def _named(rows: list[asyncpg.Record]) -> str:
    """Connections as the log names them, five at most, in a stable order (sorted in Python:
    the database's collation may order names otherwise)."""
    rows = sorted(rows, key=lambda row: (row["application_name"], row["client"]))
    return "; ".join(
        f"{row['application_name']} from {row['client']} ({_connections(row['connections'])})"
        for row in rows[:5]
    ) + ("; ..." if len(rows) > 5 else "")


async def refuse_if_older_servers(conn: Connection, migrations: list[Migration]) -> None:
    """Raise, in one line naming them, if a TMS older than the schema `migrations` would build
    is connected to this database (other than this connection)."""
    newest = max(m.version for m in migrations)
    rows = await _tms_connections(conn)
    older = [row for row in rows if older_server(row["application_name"], newest)]
    if not older:
        return
    raise DatabaseError(
        f"older TMS servers are using this database ({_named(older)}): migrating it to schema "
        f"{newest:03d} would break them: stop every older server first (or run `tms migrate "
        "--despite-older` to migrate all the same)"
    )


def _release(text: str) -> tuple[int, ...]:
    """A release's number as a tuple to compare (`0.1.10` after `0.1.9`); its local part,
    after `+`, left out."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+", 1)[0])[:4])


def older_release(name: str) -> bool:
    """Whether a connection's `application_name` is that of an older TMS than this one: an
    older schema, or the same schema and an older release."""
    if older_server(name, newest_schema()):
        return True
    match = _APPLICATION_NAME.fullmatch(name)
    return (
        match is not None
        and int(match.group(2)) == newest_schema()
        and _release(match.group(1)) < _release(installed_version("tms"))
    )


async def note_older_releases(pool: asyncpg.Pool) -> None:
    """Log, once at start-up, the older TMS releases still connected to this database (the
    migration refuses only those of an older schema: one of the same schema runs on, and an
    operator upgrading should hear that it does)."""
    async with pool.acquire() as conn:
        rows = await _tms_connections(conn)
    older = [row for row in rows if older_release(row["application_name"])]
    if older:
        log.warning(
            "older TMS releases are connected to this database (%s): this is tms %s schema "
            "%03d; stop them once every client has moved here",
            _named(older),
            installed_version("tms"),
            newest_schema(),
        )


def load_migrations(folder: Path | None = None) -> list[Migration]:
    migrations = []
    for path in sorted((folder or sql_dir()).glob("*.sql")):
        if path.name == SCHEMA_FILE:
            continue
        match = _MIGRATION_NAME.fullmatch(path.name)
        if match is None:
            raise DatabaseError(f"migration file {path.name} is not named NNN_name.sql")
        migrations.append(Migration(int(match.group(1)), path.name, path.read_text("utf-8")))
    # Each number once. A gap is allowed: numbers are handed out to branches built side by side,
    # so one may land before a lower number does; `migrate` applies whatever is missing, in order.
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions) or 0 in versions:
        raise DatabaseError(
            f"migrations must be numbered 001, 002, ..., each number once: {versions}"
        )
    return migrations


async def migrate(
    conn: Connection,
    migrations: list[Migration] | None = None,
    *,
    distribute: bool = False,
    despite_older: bool = False,
) -> list[str]:
    """Apply what is missing, in order, in one transaction under an advisory lock, so that two
    processes starting at once neither race nor half-apply. Returns the names applied.

    A recorded migration whose file has changed since, or one this code does not know, stops
    start-up: running against a schema we did not build would corrupt the ledger quietly.

    On a Citus coordinator, `distribute` places the tables on the cluster (`tms.store.citus`),
    in the same transaction; once the ledger is distributed, every later run places the tables
    new migrations add, so a distributed ledger never grows a table only the coordinator has."""
    migrations = load_migrations() if migrations is None else migrations
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        # Made when missing, not with IF NOT EXISTS: on a Citus coordinator that statement is
        # refused to a role that does not own the table, even when it exists.
        if await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
            await conn.execute(
                """CREATE TABLE schema_migrations (
                       version    integer PRIMARY KEY,
                       name       text NOT NULL,
                       sha256     text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
        rows = await conn.fetch("SELECT version, name, sha256 FROM schema_migrations")
        recorded = {row["version"]: row for row in rows}
        known = {m.version for m in migrations}
        for version in sorted(set(recorded) - known):
            raise DatabaseError(
                f"the database has migration {recorded[version]['name']}, which this version of "
                "TMS does not know: run a newer TMS against it"
            )
        for migration in migrations:
            row = recorded.get(migration.version)
            if row is not None:
                if row["sha256"] != migration.sha256:
                    raise DatabaseError(
                        f"migration {migration.name} changed after it was applied; migrations "
                        "that have landed are never edited (add a new numbered file instead)"
                    )
                continue
            if not applied_now:  # the first to apply: nobody older may be using the schema
                if not despite_older:
                    await refuse_if_older_servers(conn, migrations)
                pending = [m for m in migrations if m.version not in recorded]
                upgrade.info(
                    "migrating the database to schema %03d, in one transaction: %d migration%s",
                    max(m.version for m in migrations),
                    len(pending),
                    "" if len(pending) == 1 else "s",
                )
            started = time.monotonic()
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.sha256,
            )
            applied_now.append(migration.name)
            upgrade.info("applied %s (%.1f s)", migration.name, time.monotonic() - started)
        if await citus.installed(conn):
            if distribute or await citus.is_distributed(conn):
                await citus.distribute(conn)
            else:
                log.warning(
                    "the citus extension is installed but the ledger is not distributed: every "
                    "table lives on this node (run `tms migrate --distribute` to spread it)"
                )
        elif distribute:
            raise DatabaseError(
                "--distribute needs a Citus coordinator: the citus extension is not installed "
                "in this database"
            )
    return applied_now


def with_database(url: str, database: str) -> str:
    """The same server URL pointing at another database (the embedded URL keeps its socket
    directory in the query string, so only the path changes)."""
    head, sep, query = url.partition("?")
    scheme, _, rest = head.partition("://")
    authority = rest.split("/", 1)[0]
    return f"{scheme}://{authority}/{database}{sep}{query}"


async def ensure_database(server_url: str, database: str) -> None:
    try:
        conn = await asyncpg.connect(server_url)
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the embedded database: {one_line(exc)}") from exc
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if not exists:
            # another process may create it between our look and our create
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()


async def database_url(given: str | None, data_dir: Path) -> str:
    """The URL of the database to use: the one given (`TMS_DATABASE_URL`), or the `tms`
    database of the embedded server in `data_dir` (created on first use)."""
    if given is not None:
        return given
    return await embedded_url(await start_embedded(data_dir))


async def start_embedded(data_dir: Path) -> EmbeddedPostgres:
    return await asyncio.to_thread(EmbeddedPostgres.start, data_dir)


async def embedded_url(server: EmbeddedPostgres) -> str:
    """The embedded server's `tms` database, created on first use."""
    await ensure_database(server.url, DATABASE_NAME)
    return with_database(server.url, DATABASE_NAME)


async def open_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    generic_plans: bool = False,
    statement_seconds: float | None = None,
    part: str = "pool",
    despite_older: bool = False,
) -> driver.Pool:
    """A pool on a migrated database, of `tms.store.driver.Connection`s (their errors typed,
    no reset on release). `generic_plans`: prepared statements are planned once,
    not again at each call: for the publish path, whose statements look rows up by key (its
    snapshot spent half its time planning, 0.5 of 1.0 ms, with PostgreSQL's default choice);
    never for searches, whose best plans depend on their arguments. Not on Citus either, which
    plans a statement for the shard its arguments name, so at each call: a generic plan is one
    it refuses to make. `statement_seconds`: PostgreSQL's `statement_timeout` on every
    connection, so that no statement holds one longer, whoever stopped waiting for it (the
    relay's reads, which anyone may send: `StatementTimeout`). Its connections are named
    `application_name(part)`; `despite_older` migrates even while older servers are connected
    (`refuse_if_older_servers`)."""
    settings: dict[str, str] = {"application_name": application_name(part)}
    if statement_seconds is not None:
        settings["statement_timeout"] = str(max(1, round(statement_seconds * 1000)))
    try:
        pool = await driver.create_pool(
            url, min_size=min_size, max_size=max_size, server_settings=settings
        )
    except (StoreError, OSError, ValueError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the database: {one_line(exc)}") from exc
    try:
        async with pool.acquire() as conn:
            await migrate(conn, despite_older=despite_older)
            generic_plans = generic_plans and not await citus.installed(conn)
        if generic_plans:  # every connection from now on; the first is replaced
            settings["plan_cache_mode"] = "force_generic_plan"
            pool.set_connect_args(url, server_settings=settings)
            await pool.expire_connections()
    except BaseException as exc:
        await pool.close()
        if isinstance(exc, (StoreError, OSError, asyncpg.InterfaceError, asyncpg.PostgresError)):
            raise DatabaseError(f"cannot migrate the database: {one_line(exc)}") from exc
        raise
    return pool


class HealthCheck:
    """Whether the database answers, on a connection of its own: a pool busy with slow work
    must never read as a database that is down."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url = url
        self.timeout = timeout
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()

    async def problem(self) -> str | None:
        """None when `SELECT 1` answers within the timeout; else what went wrong, in a line."""
        async with self._lock:
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(
                        self.url,
                        timeout=self.timeout,
                        server_settings={"application_name": application_name("health")},
                    )
                await self._conn.fetchval("SELECT 1", timeout=self.timeout)
            except Exception as exc:  # asyncpg has several families; all of them mean "down"
                await self.close()
                return one_line(exc, 300)
            return None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.terminate()
