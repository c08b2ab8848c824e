"""A Citus cluster for the suite, when `TMS_TEST_CITUS_URL` names its coordinator (a database on
it whose `pg_dist_node` lists the workers, as `.ci/citus` starts it).

Each Citus database is a cluster of its own: the database must exist on every node with the
extension, and the coordinator must know the workers. Tests want a fresh database each, fast:
the suite builds one template cluster (migrated and distributed, `TMS_TEST_CITUS_SHARDS` shards
a table, 4 by default, so that both workers hold some), closes it to connections (Citus' own
maintenance daemon would otherwise keep it busy), and copies it node by node with `CREATE
DATABASE ... TEMPLATE`: each node's copy carries that node's shards and metadata, so the copies
form a working cluster of their own, as the template did.
"""

from __future__ import annotations

import asyncio
import os
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tms.store.database import migrate, with_database

CITUS_URL: Final = os.environ.get("TMS_TEST_CITUS_URL") or None
SHARDS: Final = int(os.environ.get("TMS_TEST_CITUS_SHARDS", "4"))
# Databases are created and dropped on each node by hand: the coordinator would otherwise pass
# a CREATE DATABASE on to the workers itself (the test cluster propagates them).
_LOCAL_ONLY: Final = "SET citus.enable_create_database_propagation = off"


def _authority(url: str) -> str:
    return urlsplit(url).netloc.rsplit("@", 1)[-1]


def is_citus(server_url: str) -> bool:
    """Whether this server URL is the test cluster's coordinator."""
    return CITUS_URL is not None and _authority(server_url) == _authority(CITUS_URL)


def server_url() -> str:
    """The coordinator's maintenance database."""
    assert CITUS_URL is not None
    return with_database(CITUS_URL, "postgres")


_NODES: list[tuple[str, int]] = []


async def nodes() -> list[tuple[str, int]]:
    """The coordinator then each worker, as host and port (the workers as the coordinator
    knows them, from the cluster database `TMS_TEST_CITUS_URL` names); looked up once."""
    assert CITUS_URL is not None
    if not _NODES:
        conn = await asyncpg.connect(CITUS_URL)
        try:
            rows = await conn.fetch(
                "SELECT nodename, nodeport FROM pg_dist_node "
                "WHERE groupid <> 0 AND noderole = 'primary' ORDER BY nodeport"
            )
        finally:
            await conn.close()
        assert rows, "TMS_TEST_CITUS_URL's database lists no workers (citus_add_node)"
        coordinator = urlsplit(CITUS_URL)
        _NODES.append((coordinator.hostname or "127.0.0.1", coordinator.port or 5432))
        _NODES.extend((r["nodename"], r["nodeport"]) for r in rows)
    return _NODES


def node_url(host: str, port: int, database: str) -> str:
    """The URL of `database` on one node: the coordinator URL's credentials, the node's place."""
    assert CITUS_URL is not None
    parts = urlsplit(CITUS_URL)
    credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit((parts.scheme, f"{credentials}{host}:{port}", f"/{database}", "", ""))


async def worker_urls(database: str) -> list[str]:
    return [node_url(host, port, database) for host, port in (await nodes())[1:]]


async def node_urls(database_url: str) -> list[str]:
    """The database on every node that holds part of it: the coordinator and the workers on
    the cluster; elsewhere, just itself."""
    if not is_citus(database_url):
        return [database_url]
    return [database_url, *await worker_urls(urlsplit(database_url).path.lstrip("/"))]


async def _on_node(host: str, port: int, *sql: str) -> None:
    conn = await asyncpg.connect(node_url(host, port, "postgres"))
    try:
        for statement in sql:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _on_every_node(*sql: str) -> None:
    await asyncio.gather(*(_on_node(host, port, _LOCAL_ONLY, *sql) for host, port in await nodes()))


async def build_template(name: str) -> str:
    """A cluster database, migrated and distributed, closed for copying; returns its URL."""
    await drop(name)
    await _on_every_node(f'CREATE DATABASE "{name}"')
    for host, port in await nodes():
        conn = await asyncpg.connect(node_url(host, port, name))
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await conn.close()
    (head_host, head_port), *workers = await nodes()
    url = node_url(head_host, head_port, name)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT citus_set_coordinator_host($1, $2)", head_host, head_port)
        for host, port in workers:
            await conn.execute("SELECT citus_add_node($1, $2)", host, port)
        await conn.execute(f"SET citus.shard_count = {SHARDS}")
        await migrate(conn, distribute=True)
    finally:
        await conn.close()
    await _on_every_node(
        f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false',
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
    )
    return url


async def copy(template: str, name: str) -> str:
    """A copy of the template cluster under `name`, on every node; returns its URL."""
    await _on_every_node(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    host, port = (await nodes())[0]
    return node_url(host, port, name)


async def drop(name: str) -> None:
    """Drop the database on every node, ending whatever is connected to it. Citus' maintenance
    daemon may connect again between the ending and the dropping: then the drop is tried
    again."""
    for attempt in range(20):
        try:
            await _on_every_node(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except asyncpg.ObjectInUseError:
            if attempt == 19:
                raise
            await asyncio.sleep(0.25)
