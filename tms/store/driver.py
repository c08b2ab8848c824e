"""The driver's failures translated where the database is called, as procrastinate's connector
does: every statement a pooled or connected `Connection` runs, every connection a `Pool` hands
out or `connect` opens, raises TMS's typed errors in place of asyncpg's (the driver's error is
their `__cause__`), so that no caller sorts a failure after the fact by broad classes:

- `DatabaseUnavailable`: the database cannot be used right now (refused, lost, shutting down,
  too many connections, a pooled connection the server ended, a Citus worker lost);
- `StatementTimeout`: PostgreSQL stopped the statement at its pool's `statement_timeout`;
- anything else (a statement of ours PostgreSQL refuses, a bad argument) stays the driver's
  own class: a bug, which every door calls internal.

Only failures raised by the driver's calls are translated: an `OSError` or a `TimeoutError`
anywhere else (a full disk while a body spills, a fetch's deadline) is never read as the database
being down. A cursor iterated outside these calls (`Connection.cursor`) is covered by the pool:
what of the driver's own classes leaves an acquired connection's block is translated there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, ParamSpec, TypeVar

import asyncpg
from asyncpg.pool import PoolAcquireContext, PoolConnectionProxy

from tms.errors import DatabaseUnavailable, Outcome, StatementTimeout, StoreError, outcome_of

P = ParamSpec("P")
T = TypeVar("T")

# The driver's classes that mean the database cannot be used right now.
_DOWN: Final[tuple[type[BaseException], ...]] = (
    OSError,  # raised by the driver's own calls: ConnectionRefusedError, TimeoutError, ...
    asyncpg.PostgresConnectionError,  # includes ConnectionDoesNotExistError
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ObjectNotInPrerequisiteStateError,  # e.g. a database not accepting connections
    asyncpg.exceptions.InternalClientError,  # a pooled connection the server terminated
    asyncpg.InterfaceError,  # "connection is closed", at a transaction's end among others
)
# The InterfaceErrors that are our own mistakes (bad arguments to a query), not an outage.
_OURS: Final[tuple[type[BaseException], ...]] = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.ClientConfigurationError,
    asyncpg.exceptions.UnsupportedClientFeatureError,
    asyncpg.exceptions.UnsupportedServerFeatureError,
)
# The driver's own classes, which the pool translates when they leave an acquired block.
_DRIVER: Final[tuple[type[BaseException], ...]] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)
# A Citus coordinator relays a connection to a worker lost mid-statement (a worker restarting,
# say) as an internal error carrying libpq's or its own words for it, rather than a connection
# error (which it does use when a worker cannot be reached at all). Lost at the commit, the
# outcome is unknown, as with any database lost then: a publish sent again is safe (what was
# stored is skipped). The one place a message's text is read: the driver's, where it is raised.
_WORKER_LOST: Final = re.compile(
    "server closed the connection unexpectedly|could not receive data from server"
    "|no connection to the server|SSL SYSCALL error|connection not open"
    "|failure on connection marked as essential|could not establish any connections to the node"
    "|could not commit transaction for shard"
)


def translated(exc: BaseException) -> BaseException:
    """The typed error a driver's failure is, or the failure itself when it is a bug of ours
    (or already translated)."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, asyncpg.QueryCanceledError):
        return StatementTimeout(str(exc))
    if isinstance(exc, _DOWN) and not isinstance(exc, _OURS):
        return DatabaseUnavailable(str(exc) or type(exc).__name__)
    if isinstance(exc, asyncpg.InternalServerError) and _WORKER_LOST.search(str(exc)):
        return DatabaseUnavailable(str(exc))
    return exc


def is_database_down(exc: BaseException) -> bool:
    """Whether a driver's failure (or a typed one) means the database cannot be used right
    now: what `translated` makes of it."""
    return outcome_of(translated(exc)) is Outcome.UNAVAILABLE


def _raise_translated(exc: BaseException) -> None:
    typed = translated(exc)
    if typed is not exc:
        raise typed from exc


def _translating(
    call: Callable[P, Awaitable[T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """A driver call whose failures are translated."""

    @functools.wraps(call)
    async def calling(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await call(*args, **kwargs)
        except Exception as exc:
            _raise_translated(exc)
            raise

    return calling


class Connection(asyncpg.Connection):
    """A connection whose statements raise TMS's typed errors (`translated`).

    It goes back to a pool without a reset: TMS leaves no session state behind (its settings
    are transaction-scoped, its cursors live inside transactions, the session-level locks a
    publish takes are let go before its connection goes back: `tms.ledger.writes.session_locks`),
    so the reset asyncpg sends on every release would be a round trip for nothing on every
    request. What a connection keeps on purpose, the publish's locking function in `pg_temp`
    (`tms.ledger.snapshots`), a reset would drop."""

    execute = _translating(asyncpg.Connection.execute)
    executemany = _translating(asyncpg.Connection.executemany)
    # The stubs overload these three on `record_class`, which TMS never passes: the wrapper
    # keeps the plain signature.
    fetch = _translating(asyncpg.Connection.fetch)  # type: ignore[assignment]
    fetchval = _translating(asyncpg.Connection.fetchval)
    fetchrow = _translating(asyncpg.Connection.fetchrow)  # type: ignore[assignment]
    fetchmany = _translating(asyncpg.Connection.fetchmany)  # type: ignore[assignment]
    copy_from_query = _translating(asyncpg.Connection.copy_from_query)
    copy_from_table = _translating(asyncpg.Connection.copy_from_table)
    copy_to_table = _translating(asyncpg.Connection.copy_to_table)
    copy_records_to_table = _translating(asyncpg.Connection.copy_records_to_table)
    add_listener = _translating(asyncpg.Connection.add_listener)

    def get_reset_query(self) -> str:
        return ""


class _Acquired(PoolAcquireContext):
    """A pool's connection for a block: what of the driver's own classes leaves the block (a
    cursor's rows, read outside the connection's calls) is translated as it leaves."""

    async def __aexit__(self, *exc: object) -> None:
        try:
            await super().__aexit__(*exc)  # giving back a connection the server ended may fail
        except Exception as failure:
            _raise_translated(failure)
            raise
        if len(exc) > 1 and isinstance(exc[1], _DRIVER):
            _raise_translated(exc[1])


class Pool(asyncpg.Pool):
    """A pool of `Connection`s whose acquiring, when the database cannot be reached, raises
    `DatabaseUnavailable`."""

    def acquire(self, *, timeout: float | None = None) -> PoolAcquireContext:
        return _Acquired(self, timeout)

    async def _acquire(self, timeout: float | None) -> PoolConnectionProxy:
        try:
            proxy: PoolConnectionProxy = await super()._acquire(timeout)  # type: ignore[misc]
            return proxy
        except Exception as exc:
            _raise_translated(exc)
            raise


async def create_pool(url: str, *, min_size: int, max_size: int, **settings: Any) -> Pool:
    """asyncpg's `create_pool`, of a `Pool` of `Connection`s (`settings` are `connect`'s)."""
    pool = Pool(
        url,
        min_size=min_size,
        max_size=max_size,
        max_queries=50000,
        max_inactive_connection_lifetime=300.0,
        connect=None,
        setup=None,
        init=None,
        reset=None,
        loop=None,
        connection_class=Connection,
        record_class=asyncpg.Record,
        **settings,
    )
    try:
        return await pool
    except Exception as exc:
        _raise_translated(exc)
        raise


async def connect(url: str, **settings: Any) -> Connection:
    """A `Connection` of its own (a listener's, a lock's), or `DatabaseUnavailable`."""
    try:
        conn: Connection = await asyncpg.connect(url, connection_class=Connection, **settings)
    except Exception as exc:
        _raise_translated(exc)
        raise
    return conn
