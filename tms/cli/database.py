"""The server's database, as the commands open it: `TMS_DATABASE_URL`, else the embedded
PostgreSQL in `TMS_DATA_DIR` (started if no other process has it running), whether or not the
server is running. An operator command's failure on it is one line on stderr and exit 1, in the
words every other door uses (`run_on_database`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tms.config import Settings
from tms.errors import DATABASE_UNAVAILABLE, TMSError, one_line

if TYPE_CHECKING:
    from tms.ledger.service import Ledger
    from tms.store.database import Pool


async def usable_database(settings: Settings) -> str:
    """The database URL, once the database is known to start, answer and be migrated."""
    url, pool = await open_pool(settings, max_size=1)
    await pool.close()
    return url


async def open_pool(settings: Settings, *, max_size: int) -> tuple[str, Pool]:
    """The database the server uses: `TMS_DATABASE_URL`, else the embedded PostgreSQL in
    `TMS_DATA_DIR` (started if no other process has it running). Failures are `DatabaseError`."""
    from tms.store import database

    url = await database.database_url(settings.database_url, settings.data_dir)
    return url, await database.open_pool(url, min_size=1, max_size=max_size)


@asynccontextmanager
async def open_ledger() -> AsyncIterator[Ledger]:
    from tms.ledger.service import Ledger

    _, pool = await open_pool(Settings.from_env(), max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()


def run_on_database(command: Coroutine[Any, Any, int]) -> int:
    """Run an operator command; a refusal or a database that cannot be used is one line on
    stderr and exit 1, in the words every other door uses."""
    from tms.store.database import is_database_down

    try:
        return asyncio.run(command)
    except TMSError as exc:
        print(f"tms: {exc}", file=sys.stderr)
    except Exception as exc:
        if not is_database_down(exc):  # lost mid-command: one line; anything else is a bug
            raise
        print(f"tms: {DATABASE_UNAVAILABLE} ({one_line(exc, 300)})", file=sys.stderr)
    return 1
