"""Upgrades as an operator runs them: a database one migration behind this release, and the
real `tms migrate` and `tms serve` in subprocesses. While a server of an older release is still
connected (a rolling restart), migrating would break it (sql/015 left old servers failing on
`ON CONFLICT` and `collection` NOT NULL), so the new one refuses in one line naming it; each
migration applied is printed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import asyncpg
import cluster
import pytest
from factories import TMS, admin, drop_database, environment

from tms.store.database import (
    application_name,
    load_migrations,
    migrate,
    older_server,
    with_database,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def behind(pg_server_url: str) -> AsyncIterator[str]:
    """A database at the previous schema: every migration but this release's newest."""
    if cluster.is_citus(pg_server_url):
        pytest.skip("a plain PostgreSQL's: a cluster's databases are made by tests/cluster.py")
    name = f"tms_test_upgrade_{uuid.uuid4().hex[:12]}"
    await admin(pg_server_url, f'CREATE DATABASE "{name}"')
    url = with_database(pg_server_url, name)
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn, load_migrations()[:-1])
    finally:
        await conn.close()
    yield url
    await drop_database(pg_server_url, url)


async def applied(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return [r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")]
    finally:
        await conn.close()


async def test_an_older_server_connected_stops_the_migration(behind: str) -> None:
    newest = load_migrations()[-1]
    old_release = await asyncpg.connect(behind, server_settings={"application_name": "tms-feed"})
    older = await asyncpg.connect(
        behind, server_settings={"application_name": "tms 0.0.9 schema 013 pool"}
    )
    same = await asyncpg.connect(
        behind, server_settings={"application_name": application_name("pool")}
    )
    env = environment(TMS_DATABASE_URL=behind, TMS_EMBED="off")
    try:
        for args in (["migrate"], ["serve", "--port", "1"]):
            refused = await anyio.run_process([TMS, *args], env=env, check=False)
            assert (refused.returncode, refused.stdout) == (1, b""), refused.stderr
            *named, line = refused.stderr.decode().splitlines()
            assert any("database: " in said for said in named), named  # the server's is logged
            assert line == (
                "tms: older TMS servers are using this database (tms 0.0.9 schema 013 pool "
                "from local (1 connection); tms-feed from local (1 connection)): migrating "
                f"it to schema {newest.version:03d} would break them: stop every older server "
                "first (or run `tms migrate --despite-older` to migrate all the same)"
            )
            assert newest.name not in await applied(behind)

        done = await anyio.run_process([TMS, "migrate", "--despite-older"], env=env, check=False)
        assert done.returncode == 0, done.stderr
        # Each migration named once, on stderr as it is applied; stdout says how many.
        schema = f"schema {newest.version:03d}"
        assert done.stdout.decode().splitlines() == [f"{schema}: 1 migration applied"]
        said = done.stderr.decode().splitlines()[1:]
        assert said[0] == (
            f"tms: migrating the database to {schema}, in one transaction: 1 migration"
        )
        assert said[1].startswith(f"tms: applied {newest.name} (")
        assert len(said) == 2
        assert newest.name in await applied(behind)
    finally:
        for conn in (old_release, older, same):
            await conn.close()


async def test_a_server_of_this_release_does_not_stop_it(behind: str) -> None:
    same = await asyncpg.connect(
        behind, server_settings={"application_name": application_name("feed")}
    )
    try:
        done = await anyio.run_process(
            [TMS, "migrate"], env=environment(TMS_DATABASE_URL=behind), check=False
        )
        assert done.returncode == 0, done.stderr
        assert load_migrations()[-1].name in await applied(behind)
    finally:
        await same.close()


def test_which_names_are_older() -> None:
    newest = load_migrations()[-1].version
    assert older_server("tms-feed", newest)
    assert older_server(f"tms 0.1.0 schema {newest - 1:03d} main", newest)
    assert not older_server(application_name("main"), newest)
    assert not older_server(f"tms 9.9.9 schema {newest + 1:03d} feed", newest)
    assert not older_server("psql", newest)
    assert not older_server("", newest)
    assert application_name("publish").startswith("tms ")
    assert len(application_name("x" * 100).encode()) <= 63
