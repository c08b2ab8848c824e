"""The server's database, as the commands open it: `TMS_DATABASE_URL`, else the embedded
PostgreSQL in `TMS_DATA_DIR` (started if no other process has it running), whether or not the
server is running. An operator command's failure on it is one line on stderr and exit 1, in the
words every other door uses (`run_on_database`).

`TMS_DATA_DIR` defaults to `./tms-data`, relative to the working directory: an operator who ran
`tms approve` one directory off once approved a key in a brand-new, empty database while the
server went on refusing it, and a backup loop run there exported nothing and exited 0. So every
command says on stderr which database it opens (`describe`), and one that would create a new
embedded database where there is none refuses unless told to (`--create`; `tms serve` may)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tms.cli.said import failed
from tms.config import Settings
from tms.errors import Outcome, TMSError, outcome_of

if TYPE_CHECKING:
    from tms.ledger import Ledger, Pool


def without_password(url: str) -> str:
    """The URL as it may be shown: its password (in the user part or as `password=`) left out."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a TMS_DATABASE_URL that is not a URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{hosts}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query  # as given (an embedded socket's path stays readable), unless it has one
    if any(key == "password" for key, _ in pairs):
        query = urlencode([(key, value) for key, value in pairs if key != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def describe(settings: Settings) -> str:
    """Which database the settings name, as every command says it on stderr."""
    if settings.database_url is not None:
        return f"{without_password(settings.database_url)} (TMS_DATABASE_URL)"
    return f"embedded PostgreSQL in {settings.data_dir} (TMS_DATA_DIR)"


def no_database(settings: Settings) -> str | None:
    """Why a command that must not create a database refuses to, or None when it has one to
    open: an URL always names one; an embedded one must have been made already."""
    from tms.ledger import EmbeddedPostgres

    if settings.database_url is not None or EmbeddedPostgres.exists(settings.data_dir):
        return None
    return (
        f"no database in {settings.data_dir} (TMS_DATA_DIR, relative to the working directory "
        "unless absolute): run this where the server's data directory is, or set TMS_DATA_DIR "
        "to it; --create makes a new, empty one there"
    )


def announce(settings: Settings, *, create: bool) -> bool:
    """Say on stderr which database the command opens; False (and one line saying why) when
    it would create a new embedded one and was not told to."""
    refused = None if create else no_database(settings)
    if refused is not None:
        print(f"tms: {refused}", file=sys.stderr, flush=True)
        return False
    print(f"tms: database: {describe(settings)}", file=sys.stderr, flush=True)
    report_upgrades()
    return True


def report_upgrades() -> None:
    """Print the migrations applied and the back-fills run (the `tms.upgrade` log) on stderr,
    one line each, for the operator watching a start or an upgrade."""
    upgrade = logging.getLogger("tms.upgrade")
    if upgrade.handlers or logging.getLogger("tms").handlers:  # set up already (`tms.cli.logs`)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tms: %(message)s"))
    upgrade.addHandler(handler)
    upgrade.setLevel(logging.INFO)
    upgrade.propagate = False


async def usable_database(settings: Settings) -> str:
    """The database URL, once the database is known to start, answer and be migrated, and to
    have the log key its checkpoints were signed with, if any (`refuse_new_log_key`)."""
    from tms.runtime import refuse_new_log_key

    url, pool = await open_pool(settings, max_size=1)
    try:
        await refuse_new_log_key(pool, settings)
    finally:
        await pool.close()
    return url


async def open_pool(settings: Settings, *, max_size: int) -> tuple[str, Pool]:
    """The database the server uses: `TMS_DATABASE_URL`, else the embedded PostgreSQL in
    `TMS_DATA_DIR` (started if no other process has it running). Failures are `DatabaseError`."""
    from tms import ledger

    url = await ledger.database_url(settings.database_url, settings.data_dir)
    return url, await ledger.open_pool(url, min_size=1, max_size=max_size, part="cli")


@asynccontextmanager
async def open_ledger() -> AsyncIterator[Ledger]:
    from tms.ledger import Ledger

    _, pool = await open_pool(Settings.from_env(), max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()


def run_on_database(command: Coroutine[Any, Any, int], *, create: bool = False) -> int:
    """Run an operator command, once it has said which database it opens (and refused to make
    a new embedded one unless `create`); a refusal or a database that cannot be used is one
    line on stderr and exit 1, in the words every other door uses (the CLI's wire table,
    `tms.cli.said`: the operator also reads why the database could not be used)."""
    try:
        try:
            settings = Settings.from_env()
        except TMSError:
            command.close()
            raise
        if not announce(settings, create=create):
            command.close()
            return 1
        return asyncio.run(command)
    except Exception as exc:
        if outcome_of(exc) is Outcome.INTERNAL:  # a bug: its traceback
            raise
        return failed(exc)  # a refusal in its own words, the database lost with why
