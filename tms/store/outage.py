"""A database outage in the server's log: one line when it is first noticed, one when the
database answers again, however many requests, pools and background tasks meet it meanwhile.

Each of those parts used to log on its own, many with a traceback: asyncpg's pools warn at every
failed reconnection, Starlette re-raised what a handler had already answered with a 503, the
health check, the tools, the refusal log's writer and the embedding catch-up each wrote a line
per failure. A two-second restart of the embedded PostgreSQL wrote 19 tracebacks. Now each of
them reports here (`failed`) and answers as it always did ("database unavailable, try again
shortly"). The first report logs a warning and starts a probe that asks the database every
second; its first answer (or a health check's) logs the recovery: how long, how many failures.

One per server process (the runtime's), like the log it writes to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from tms.errors import one_line

log = logging.getLogger("tms.database")

PROBE_SECONDS: Final = 1.0
# asyncpg's pool, reconnecting its minimum of connections in the background, warns with a
# traceback at each failure: one of the lines an outage is folded into.
ASYNCPG_POOL_LOGGER: Final = "asyncpg.pool"
ASYNCPG_FLOOR: Final = "Failed to restore the pool connection floor"

Probe = Callable[[], Awaitable[str | None]]  # None when the database answers, else why not


class Outage:
    def __init__(self, probe: Probe | None = None, *, every: float = PROBE_SECONDS) -> None:
        self.probe = probe
        self.every = every
        self._since: float | None = None
        self._failures = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, where: str, reason: BaseException | str) -> None:
        """`where` met the database down: the first such report of an outage is logged."""
        text = reason if isinstance(reason, str) else one_line(reason, 300)
        if self._since is not None:
            self._failures += 1
            log.debug("database still unavailable (%s): %s", where, text)
            return
        self._since = time.monotonic()
        self._failures = 1
        log.warning(
            "database unavailable, first noticed by %s: %s; requests are answered "
            '"database unavailable, try again shortly" and nothing more is logged about it '
            "until it answers again",
            where,
            text,
        )
        self._watch()

    def answered(self) -> None:
        """The database answered: if it was down, the outage is over (logged once)."""
        if self._since is None:
            return
        seconds = time.monotonic() - self._since
        failures, self._since, self._failures = self._failures, None, 0
        log.warning(
            "database answers again, after %.1f s unavailable (%d %s met meanwhile)",
            seconds,
            failures,
            "failure" if failures == 1 else "failures",
        )

    def _watch(self) -> None:
        """Ask the database every `every` seconds until it answers, so the recovery is logged
        when it happens, whether or not any request comes."""
        if self.probe is None or (self._task is not None and not self._task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # reported from outside the loop: a later report starts it
            return
        self._task = loop.create_task(self._probing(self.probe), name="tms-database-probe")

    async def _probing(self, probe: Probe) -> None:
        while self._since is not None:
            await asyncio.sleep(self.every)
            try:
                problem = await probe()
            except Exception as exc:  # a probe that fails is one more failure, never a crash
                problem = one_line(exc, 300)
            if problem is None:
                self.answered()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @contextlib.contextmanager
    def folding_asyncpg(self) -> Iterator[None]:
        """While the block lasts, asyncpg's reconnection warnings are reported here instead of
        written to the log with their tracebacks."""
        folder = _FoldAsyncpg(self)
        logger = logging.getLogger(ASYNCPG_POOL_LOGGER)
        logger.addFilter(folder)
        try:
            yield
        finally:
            logger.removeFilter(folder)


class _FoldAsyncpg(logging.Filter):
    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(ASYNCPG_FLOOR):
            return True
        cause = record.exc_info[1] if record.exc_info else None
        self.outage.failed("a connection pool reconnecting", cause or record.getMessage())
        return False
