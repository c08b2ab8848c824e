"""`tms migrate [--distribute]`: apply the migrations (the server does too, at start-up) and, on
a Citus coordinator, distribute the ledger by collection (`tms.store.citus`); then say what was
applied and, on Citus, where each table lives. What the database refuses (an extension it lacks,
rights the role lacks) is one line, as `serve` says it."""

from __future__ import annotations

import sys

from tms.config import Settings
from tms.errors import one_line


async def migrate(distribute: bool, despite_older: bool = False) -> int:
    """Apply what is missing (each migration said on stderr as it is applied; refused while an
    older TMS is connected, unless `despite_older`) and, with `distribute`, place the tables on
    the Citus cluster; then say where each table lives."""
    import asyncpg

    from tms.errors import DatabaseError
    from tms.ledger import application_name, citus, database_url, newest_schema
    from tms.ledger import migrate as apply_migrations

    settings = Settings.from_env()
    url = await database_url(settings.database_url, settings.data_dir)
    try:
        conn = await asyncpg.connect(
            url, server_settings={"application_name": application_name("migrate")}
        )
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the database: {one_line(exc)}") from exc
    try:
        applied = await apply_migrations(conn, distribute=distribute, despite_older=despite_older)
        placed = await citus.placements(conn)
        on_citus = await citus.installed(conn)
    except asyncpg.PostgresError as exc:
        # What the database refused (an extension it lacks, rights the role lacks), in its own
        # words and hint, as `serve` says it: nothing was applied (one transaction).
        raise DatabaseError(f"cannot migrate the database: {one_line(exc)}") from exc
    finally:
        await conn.close()
    # Each migration was named on stderr as it was applied: the result says only how many.
    schema = f"schema {newest_schema():03d}"
    count = len(applied)
    print(
        f"{schema}: {count} migration{'' if count == 1 else 's'} applied"
        if applied
        else f"{schema}: up to date"
    )
    if on_citus:
        width = max(len(table) for table in placed)
        for table, where in sorted(placed.items(), key=lambda item: (item[1], item[0])):
            how = " by collection" if where == "distributed" else ""
            print(f"  {table:<{width}}  {where}{how}")
        if placed.get(citus.ANCHOR) != "distributed":
            print("tms: the ledger is not distributed: tms migrate --distribute", file=sys.stderr)
    return 0
