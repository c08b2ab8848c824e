"""`tms backup FILE` and `tms restore FILE`: the whole database (approvals, sessions, vectors
and the refusal log included, consistent at one moment) as a `pg_dump` archive, and back, with
the `pg_dump` and `pg_restore` the embedded PostgreSQL ships (its own major version, 18), whether
or not the server runs: the embedded database is started or joined as for any command.

What the documented commands got wrong, and these do not: `pg_dump` of the embedded database
needed a running server and wrote to stdout without `-f`; `pg_restore --no-owner --role=tms`
exited 1 on `COMMENT ON EXTENSION vector` (only the extension's owner may comment on it) though
the data was restored. `restore` leaves that one comment out (`pg_restore -L`), restores in one
transaction that stops at the first error (so nothing half-restored remains), and only into a
database that holds no ledger yet. A backup is written beside `FILE` and renamed into place
once complete. The log key and the login secret are files beside the database, not in it: each
command says so (docs/operating.md, "Backups and restores")."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from tms.config import LOG_KEY_FILE, RELAY_KEY_FILE, SECRET_FILE, Settings
from tms.errors import DatabaseError, one_line

_LEFT_OUT = " COMMENT - EXTENSION "  # what `pg_restore -l` lists for COMMENT ON EXTENSION


def libpq(url: str) -> tuple[str, dict[str, str]]:
    """The URL for `pg_dump`/`pg_restore` without its password, and the environment carrying it
    (`PGPASSWORD`): a password in a program's arguments shows in every `ps`."""
    parts = urlsplit(url)
    env = dict(os.environ)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        if password:
            env["PGPASSWORD"] = unquote(password)
        netloc = f"{user}@{hosts}"
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "password":
            env["PGPASSWORD"] = value
        else:
            query.append((key, value))
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), "")), env


async def _run(program: str, *args: str, env: dict[str, str]) -> bytes:
    """Run one of the wheel's PostgreSQL programs; its failure is one line with its last
    words."""
    from tms.ledger import client_program

    process = await asyncio.create_subprocess_exec(
        str(client_program(program)),
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        words = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        said = one_line(Exception(" ".join(words[-3:])), 400) if words else "no message"
        raise DatabaseError(f"{program} failed (exit {process.returncode}): {said}")
    return out


async def _database(settings: Settings) -> str:
    """The database's URL (the embedded one started or joined), checked to answer."""
    import asyncpg

    from tms.ledger import database_url

    url = await database_url(settings.database_url, settings.data_dir)
    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the database: {one_line(exc)}") from exc
    await conn.close()
    return url


async def _fetchval(url: str, sql: str) -> object:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


def _keys_note(settings: Settings) -> str | None:
    """Which key files a backup does not hold, for the operator to keep beside it."""
    keys = (
        (LOG_KEY_FILE, settings.log_key),
        (SECRET_FILE, settings.secret),
        (RELAY_KEY_FILE, settings.relay_key),  # the relays' identity (NIP-11 `self`)
    )
    files = [
        str(settings.data_dir / name)
        for name, set_by_env in keys
        if set_by_env is None and (settings.data_dir / name).is_file()
    ]
    if not files:
        return None
    return f"keep {' and '.join(files)} with it: the backup does not hold them"


async def database_url() -> int:
    """The URL of the database the other commands open, on stdout, for PostgreSQL's own
    programs: `TMS_DATABASE_URL` as set, else the running embedded PostgreSQL's `tms` database
    (its socket directory in the query string). An embedded one that is not running has no URL
    to give (this command starting it would stop it again as it exits): one line, exit 1."""
    from tms.ledger import DATABASE_NAME, running_url, with_database

    settings = Settings.from_env()
    if settings.database_url is not None:
        print(settings.database_url)
        return 0
    url = running_url(settings.data_dir)
    if url is None:
        print(
            f"tms: the embedded PostgreSQL in {settings.data_dir} is not running: its URL holds "
            "only while it runs, so run this while `tms serve` does",
            file=sys.stderr,
        )
        return 1
    print(with_database(url, DATABASE_NAME))
    return 0


async def backup(target: Path) -> int:
    """`pg_dump` of the whole database into `target`, complete or not at all."""
    settings = Settings.from_env()
    if target.exists():
        print(f"tms: {target} exists: back up to a new file", file=sys.stderr)
        return 1
    url = await _database(settings)
    if await _fetchval(url, "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"):
        print(
            "tms: this is a Citus cluster: a pg_dump of the coordinator holds none of the "
            "workers' rows; back each node up (docs/operating.md, Backups and restores)",
            file=sys.stderr,
        )
        return 1
    dsn, env = libpq(url)
    folder = target.resolve().parent
    handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    os.close(handle)
    try:
        await _run("pg_dump", "--format=custom", f"--file={partial}", f"--dbname={dsn}", env=env)
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    print(f"backed up to {target} ({target.stat().st_size:,} bytes)")
    note = _keys_note(settings)
    if note is not None:
        print(f"tms: {note}", file=sys.stderr)
    return 0


async def restore(source: Path) -> int:
    """`pg_restore` of a `tms backup` (or any `pg_dump -Fc` of a TMS database) into a database
    that holds no ledger yet, in one transaction."""
    settings = Settings.from_env()
    if not source.is_file():
        print(f"tms: no backup file {source}", file=sys.stderr)
        return 1
    url = await _database(settings)
    if await _fetchval(url, "SELECT to_regclass('schema_migrations') IS NOT NULL"):
        print(
            "tms: this database already holds a ledger: restore into a new, empty one (a new "
            "TMS_DATA_DIR with --create, or a new database in TMS_DATABASE_URL)",
            file=sys.stderr,
        )
        return 1
    dsn, env = libpq(url)
    listing = await _run("pg_restore", "--list", str(source), env=env)
    kept = [line for line in listing.decode().splitlines() if _LEFT_OUT not in line]
    with tempfile.NamedTemporaryFile("w", suffix=".list", encoding="utf-8") as chosen:
        chosen.write("\n".join(kept) + "\n")
        chosen.flush()
        await _run(
            "pg_restore",
            "--no-owner",
            "--exit-on-error",
            "--single-transaction",
            f"--use-list={chosen.name}",
            f"--dbname={dsn}",
            str(source),
            env=env,
        )
    print(f"restored {source}")
    missing = [
        name
        for name, set_by_env in ((LOG_KEY_FILE, settings.log_key), (SECRET_FILE, settings.secret))
        if set_by_env is None and not (settings.data_dir / name).is_file()
    ]
    if LOG_KEY_FILE in missing:
        print(
            f"tms: warning: no {settings.data_dir / LOG_KEY_FILE} and no TMS_LOG_KEY: copy the "
            "old server's log-key there before starting the server, or it makes a new key and "
            "every checkpoint it signed before reads as another server's",
            file=sys.stderr,
        )
    if SECRET_FILE in missing:
        print(
            f"tms: warning: no {settings.data_dir / SECRET_FILE} and no TMS_SECRET: copy the old "
            "server's secret there too, or every login ends",
            file=sys.stderr,
        )
    return 0
