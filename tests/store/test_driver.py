"""The driver's failures are translated where the database is called (`tms.store.driver`), and
only there: an OSError or a TimeoutError elsewhere is never the database down."""

from __future__ import annotations

import errno

import asyncpg
import pytest

from tms.errors import (
    DATABASE_UNAVAILABLE,
    INTERNAL_ERROR,
    DatabaseUnavailable,
    Outcome,
    StatementTimeout,
    outcome_of,
    told,
)
from tms.store.database import open_pool
from tms.store.driver import translated

pytestmark = pytest.mark.anyio


def test_an_oserror_or_a_timeout_outside_the_database_is_not_an_outage() -> None:
    for failure in (OSError(errno.ENOSPC, "No space left on device"), TimeoutError()):
        assert outcome_of(failure) is Outcome.INTERNAL
        assert told(failure) == INTERNAL_ERROR


def test_the_same_failures_from_the_driver_are_the_database_down() -> None:
    for failure in (ConnectionRefusedError(111, "refused"), TimeoutError()):
        typed = translated(failure)
        assert isinstance(typed, DatabaseUnavailable)
        assert told(typed) == DATABASE_UNAVAILABLE
    assert isinstance(translated(asyncpg.QueryCanceledError("canceling")), StatementTimeout)
    bug = asyncpg.UndefinedColumnError("column x does not exist")
    assert translated(bug) is bug


async def test_a_pool_says_the_database_down_and_a_statement_timeout_by_their_class(
    db_url: str,
) -> None:
    pool = await open_pool(db_url, max_size=2, statement_seconds=0.2)
    try:
        with pytest.raises(StatementTimeout):
            await pool.fetchval("SELECT pg_sleep(2)")
        async with pool.acquire() as conn:
            with pytest.raises(StatementTimeout):
                async with conn.transaction():
                    await conn.execute("SELECT pg_sleep(2)")
        with pytest.raises(DatabaseUnavailable) as down:  # met in the block or giving it back
            async with pool.acquire() as conn, pool.acquire() as other:
                victim = await conn.fetchval("SELECT pg_backend_pid()")
                # The pid's type named: Citus adds a pg_terminate_backend of a global pid.
                terminate = "SELECT pg_terminate_backend($1::integer, 5000::bigint)"
                await other.execute(terminate, victim)
                await conn.fetchval("SELECT 1")
        assert isinstance(
            down.value.__cause__,
            (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.exceptions.InternalClientError,
            ),
        )
    finally:
        await pool.close()
