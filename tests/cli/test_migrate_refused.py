"""`tms migrate` on a database that refuses the migrations: an extension it lacks, a role without
the rights they need. One line in the database's words, exit 1, nothing applied; never a
traceback. (The test's own PostgreSQL plays each: a role made without rights, and pgvector hidden
from a session by `extension_control_path`, PostgreSQL 18's setting.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import cluster
import pytest
from factories import TMS, admin, drop_database, environment

from tms.store.database import with_database

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(bool(cluster.CITUS_URL), reason="roles and settings of one PostgreSQL"),
]


def as_role(url: str, role: str) -> str:
    """`url` logged in as `role` (the test server trusts local connections)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def with_setting(url: str, name: str, value: str) -> str:
    """asyncpg sends a URL's unknown query parameters as the session's settings."""
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


async def migrate(url: str) -> tuple[int, str, str]:
    result = await anyio.run_process(
        [TMS, "migrate"], env=environment(TMS_DATABASE_URL=url), check=False
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def tables(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
    finally:
        await conn.close()
    return [row["tablename"] for row in rows]


@pytest.fixture
async def empty(pg_server_url: str) -> AsyncIterator[tuple[str, str]]:
    """An empty database, and a role of its own that may log in and nothing more."""
    suffix = uuid.uuid4().hex[:12]
    name, role = f"tms_refused_{suffix}", f"tms_norights_{suffix}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"', f'CREATE ROLE "{role}" LOGIN')
    url = with_database(pg_server_url, name)
    try:
        yield url, role
    finally:
        await drop_database(pg_server_url, url)
        await admin(pg_server_url, f'DROP ROLE IF EXISTS "{role}"')


async def test_a_role_without_rights_is_one_line(empty: tuple[str, str]) -> None:
    url, role = empty
    code, out, err = await migrate(as_role(url, role))
    assert (code, out) == (1, "")
    *said, line = err.splitlines()  # the database named, the migrations begun, then why not
    assert all(not x.startswith("Traceback") for x in said)
    assert line.startswith("tms: cannot migrate the database: permission denied for schema public")
    assert await tables(url) == []


async def test_a_role_that_may_not_create_the_extension_is_one_line(
    pg_server_url: str, empty: tuple[str, str]
) -> None:
    """The database's owner may create its tables, but pgvector takes a superuser."""
    url, role = empty
    await admin(
        pg_server_url, f'ALTER DATABASE "{urlsplit(url).path.lstrip("/")}" OWNER TO "{role}"'
    )
    code, out, err = await migrate(as_role(url, role))
    assert (code, out) == (1, "")
    *said, line = err.splitlines()  # the database named, the migrations begun, then why not
    assert all(not x.startswith("Traceback") for x in said)
    assert line.startswith(
        'tms: cannot migrate the database: permission denied to create extension "vector"'
    )
    assert "superuser" in line
    assert await tables(url) == []  # one transaction: not even sql/001's tables


async def test_a_database_without_pgvector_is_one_line(empty: tuple[str, str]) -> None:
    url, _ = empty
    conn = await asyncpg.connect(url)
    try:
        major = int(await conn.fetchval("SHOW server_version_num")) // 10000
        superuser = await conn.fetchval(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await conn.close()
    if major < 18 or not superuser:
        pytest.skip(
            "hiding an extension takes PostgreSQL 18's extension_control_path, as superuser"
        )
    code, out, err = await migrate(with_setting(url, "extension_control_path", "/nonexistent"))
    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == (
        'tms: cannot migrate the database: extension "vector" is not available HINT: The '
        "extension must first be installed on the system where PostgreSQL is running."
    )
    assert await tables(url) == []
