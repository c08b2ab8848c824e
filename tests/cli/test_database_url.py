"""What docs/operating.md's "Upgrading" and "Backups and restores" say of the two commands that
serve a backup by hand (issue 34 item 5): the new release's `tms backup` dumps a database one
migration behind it without migrating it (the old servers keep running on it); `tms
database-url` prints the URL the other commands open, and refuses where there is none to give.
The running embedded database's URL is used by test_backup_procedure, which runs the block."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncpg
import cluster
import pytest
from factories import TMS, admin, drop_database, environment

from tms.store.database import load_migrations, migrate, with_database

pytestmark = pytest.mark.anyio


@pytest.fixture
async def behind(pg_server_url: str) -> AsyncIterator[str]:
    """A database at the previous schema: every migration but this release's newest."""
    if cluster.is_citus(pg_server_url):
        pytest.skip("a plain PostgreSQL's: tms backup refuses on Citus")
    name = f"tms_test_backup_behind_{uuid.uuid4().hex[:12]}"
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
        return sorted(r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations"))
    finally:
        await conn.close()


async def test_the_new_releases_backup_never_migrates(behind: str, tmp_path: Path) -> None:
    before = await applied(behind)
    assert len(before) == len(load_migrations()) - 1
    env = environment(TMS_DATABASE_URL=behind)
    dump = tmp_path / "old.dump"
    done = await anyio.run_process([TMS, "backup", str(dump)], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert await applied(behind) == before
    assert dump.stat().st_size > 0
    # where any other operator command would have migrated it
    done = await anyio.run_process([TMS, "approved"], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert len(await applied(behind)) == len(before) + 1


def url_of(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TMS, "database-url"],
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_database_url_prints_tms_database_url_as_set() -> None:
    url = "postgresql://tms:secret@db.internal:5432/tms"
    done = url_of(TMS_DATABASE_URL=url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{url}\n"
    assert "secret" not in done.stderr  # the `tms: database:` line hides the password


def test_database_url_refuses_where_there_is_none(data_root: Path) -> None:
    done = url_of(TMS_DATA_DIR=str(data_root / "nothing"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"tms: no database in {data_root / 'nothing'}")
    assert not (data_root / "nothing").exists()


def test_database_url_refuses_an_embedded_database_not_running(data_root: Path) -> None:
    """Made by `tms migrate --create`, which stops it as it exits: no URL would answer."""
    made = subprocess.run(
        [TMS, "migrate", "--create"],
        env=environment(TMS_DATA_DIR=str(data_root / "stopped")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    done = url_of(TMS_DATA_DIR=str(data_root / "stopped"))
    assert done.returncode == 1 and done.stdout == ""
    assert "is not running" in done.stderr and "tms serve" in done.stderr
