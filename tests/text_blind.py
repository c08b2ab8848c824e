"""A database role that cannot read any evidence text: what proves that a read (or a whole page
served over this role) never loads one.

The role may read and write everything else, but of `evidence` only the columns beside the
text (`SELECT text FROM evidence` is refused, and so is any expression over it), and of `events`
no evidence row at all (row-level security), since an evidence's event holds its text in
`content` too. A read that needs a text fails loudly; one that does not works as usual.

Making a role takes CREATEROLE: against a `TMS_TEST_DATABASE_URL` whose role lacks it, the
tests that need one are skipped. The role is made and dropped from the test's own database, so
that on a Citus cluster (`TMS_TEST_CITUS_URL`) Citus makes and drops it on every node, as it
does the grants and the policy.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from factories import database_name

# Every column of `evidence` except `text` (sql/001, sql/010).
READABLE_EVIDENCE = "id, seq, collection, pubkey, title, url, source, chars"


def _as_role(database_url: str, role: str) -> str:
    parts = urlsplit(database_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


async def make_text_blind_role(database_url: str) -> tuple[str, str]:
    """A new role blind to evidence texts in the database of `database_url`: its name and a
    URL that connects as it (skips the test where roles cannot be made)."""
    conn = await asyncpg.connect(database_url)
    try:
        if not await conn.fetchval(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ):
            pytest.skip("the test database's role cannot create roles")
    finally:
        await conn.close()
    role = f"tms_text_blind_{uuid.uuid4().hex[:12]}"
    database = database_name(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        for statement in (
            f'CREATE ROLE "{role}" LOGIN',
            f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"',
            f'GRANT USAGE, CREATE ON SCHEMA public TO "{role}"',
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"',
            f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"',
            f'REVOKE SELECT ON evidence FROM "{role}"',
            f'GRANT SELECT ({READABLE_EVIDENCE}) ON evidence TO "{role}"',
            "ALTER TABLE events ENABLE ROW LEVEL SECURITY",
            f'CREATE POLICY "{role}_no_texts" ON events FOR SELECT TO "{role}" '
            "USING (kind <> 4701)",
        ):
            await conn.execute(statement)
    finally:
        await conn.close()
    return role, _as_role(database_url, role)


async def drop_role(database_url: str, role: str) -> None:
    """Undo `make_text_blind_role` in a database that is still there, then drop the role."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
        await conn.execute(f'DROP POLICY IF EXISTS "{role}_no_texts" ON events')
        await conn.execute("ALTER TABLE events DISABLE ROW LEVEL SECURITY")
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'REVOKE ALL ON DATABASE "{database_name(database_url)}" FROM "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')
    finally:
        await conn.close()
