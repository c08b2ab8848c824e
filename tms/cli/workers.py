"""`tms serve --workers N`: N server processes on one listening socket, one database, one set of
budgets and connection caps.

The supervisor (this module, in the process `tms serve` started as) has checked everything
`tms serve` checks, bound the port and migrated the database before it forks: each worker is a
copy of it that runs the app on the inherited socket (the kernel hands each new connection to
one of them). The supervisor serves nothing itself. It

- keeps the embedded PostgreSQL, when there is one, for as long as it runs, sized for N workers
  (`max_connections`, `connections_needed`): a worker's pools and connections join it, and it
  stops when the supervisor, the last process using it, exits;
- makes the table the workers share their budgets and connection counts in (`tms.guard.shared`),
  and hands each worker its number;
- replaces a worker that dies (after wiping the counts it held, so that its clients' connections
  are not held against them), at once unless it died within `FAST_DEATH_SECONDS` of its start,
  then after a pause that doubles up to `MAX_PAUSE_SECONDS`;
- on SIGTERM or Ctrl-C, passes SIGTERM to every worker (each closes its connections within
  `SHUTDOWN_GRACE_SECONDS`, as `tms serve` alone does), waits for them, kills what is left
  after `STOP_SECONDS`, and only then exits: the database stops last.

Only worker 0 serves the metrics port (`TMS_METRICS_PORT`): one port, one process; its figures
are its own (docs/operating.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tms.config import Settings, load_log_key, load_relay_key, load_secret
from tms.guard import shared
from tms.ledger import embedded_url, start_embedded

log = logging.getLogger("tms.serve")

FAST_DEATH_SECONDS: Final = 5.0  # a worker dying this soon after its start is paused before again
MAX_PAUSE_SECONDS: Final = 30.0
STOP_SECONDS: Final = 45.0  # after SIGTERM, what a worker may take before it is killed
POLL_SECONDS: Final = 0.1
PR_SET_PDEATHSIG: Final = 1  # prctl(2)
# The database connections one worker holds at most, counted from the code: the main pool
# (`tms.ledger.open_pool`'s default, 10), the publish pool (`runtime.PUBLISH_CONNECTIONS`, 8), the
# exports' (`TMS_MAX_EXPORTS`), the relay's reads' (`TMS_RELAY_CONNECTIONS`), and one each for
# the health check, the relay's commit feed (LISTEN) and the witness submitter.
MAIN_POOL: Final = 10
ONE_EACH: Final = 3
# Beyond the workers': the commands run beside the server (`tms backup`, `tms migrate`, psql),
# and PostgreSQL's own reserved slots (superuser_reserved_connections, 3).
SPARE_CONNECTIONS: Final = 20


def worker_connections(settings: Settings) -> int:
    """The database connections one worker holds at most."""
    from tms.runtime import PUBLISH_CONNECTIONS

    return (
        MAIN_POOL
        + PUBLISH_CONNECTIONS
        + settings.max_exports
        + settings.relay_connections
        + ONE_EACH
    )


def connections_needed(settings: Settings, workers: int) -> int:
    """`max_connections` the database needs for `workers` workers and the commands beside."""
    return workers * worker_connections(settings) + SPARE_CONNECTIONS


@dataclasses.dataclass(slots=True)
class Running:
    pid: int
    started: float


class Supervisor:
    def __init__(
        self,
        workers: int,
        counts: shared.SharedCounts,
        run_worker: Callable[[int], int],
    ) -> None:
        self.workers = workers
        self.counts = counts
        self.run_worker = run_worker  # in the child: serve as worker n, return the exit code
        self.running: dict[int, Running] = {}  # by worker number
        self.pauses: dict[int, float] = {}  # by worker number: the pause before its next start
        self.due: dict[int, float] = {}  # worker number -> when to start it again
        self.stopping = False

    def start(self, slot: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(os.getppid())
                os.environ[shared.SLOT_ENV] = str(slot)
                code = self.run_worker(slot)
            except BaseException:
                log.exception("worker %d failed", slot)
            finally:
                logging.shutdown()
                os._exit(code)  # never the supervisor's atexit (it holds the database)
        self.running[slot] = Running(pid, time.monotonic())
        log.info("worker %d started (pid %d)", slot, pid)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for slot in range(self.workers):
            self.start(slot)
        while not self.stopping:
            self._reap()
            now = time.monotonic()
            for slot, when in list(self.due.items()):
                if when <= now and not self.stopping:
                    del self.due[slot]
                    self.start(slot)
            time.sleep(POLL_SECONDS)
        return self._stop_all()

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _reap(self) -> None:
        for slot, worker in list(self.running.items()):
            try:
                pid, status = os.waitpid(worker.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = worker.pid, 0
            if pid == 0:
                continue
            del self.running[slot]
            wiped = self.counts.forget_owner(slot)
            if self.stopping:
                continue
            lived = time.monotonic() - worker.started
            pause = 0.0
            if lived < FAST_DEATH_SECONDS:
                pause = min(max(1.0, 2 * self.pauses.get(slot, 0.5)), MAX_PAUSE_SECONDS)
            self.pauses[slot] = pause
            log.warning(
                "worker %d (pid %d) %s after %.0f s; %s",
                slot,
                worker.pid,
                _ended(status),
                lived,
                f"starting it again in {pause:.0f} s" if pause else "starting it again",
            )
            if wiped:
                log.info("worker %d's %d connection counts forgotten", slot, wiped)
            self.due[slot] = time.monotonic() + pause

    def _stop_all(self) -> int:
        log.info("stopping %d workers", len(self.running))
        for worker in self.running.values():
            _signal(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self.running and time.monotonic() < deadline:
            self._reap()
            time.sleep(POLL_SECONDS)
        for slot, worker in list(self.running.items()):
            log.warning("worker %d (pid %d) did not stop; killing it", slot, worker.pid)
            _signal(worker.pid, signal.SIGKILL)
            os.waitpid(worker.pid, 0)
        return 0


def _die_with(parent: int) -> None:
    """Be sent SIGTERM when the supervisor dies, however it dies (Linux's parent-death signal):
    a supervisor killed outright leaves no worker serving without it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the workers outlive a killed supervisor
        return
    if os.getppid() != parent:  # it died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with {os.waitstatus_to_exitcode(status)}"


def state_file() -> Path:
    """Where the shared table lives: memory (/dev/shm) when the system has it."""
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None
    handle, path = tempfile.mkstemp(prefix="tms-workers-", dir=where)
    os.close(handle)
    return Path(path)


def supervise(settings: Settings, listener: socket.socket, run: Callable[[Settings], int]) -> int:
    """Serve with `settings.workers` processes on `listener`; `run(settings)` serves as one
    worker, in the child (worker 0 with the metrics port, the others without)."""
    if settings.database_url is None:
        # Held until this process, the last to use it, exits.
        needed = connections_needed(settings, settings.workers)
        asyncio.run(size_embedded(settings.data_dir, needed))
    else:
        asyncio.run(check_database(settings.database_url, settings))
    # Made once, here, not by N workers at once: the keys in the data directory.
    made = (load_secret(settings), load_log_key(settings), load_relay_key(settings))
    for _, chosen in made:
        if chosen is not None:
            log.warning("%s", chosen)
    path = state_file()
    counts = shared.SharedCounts(path, create=True)
    os.environ[shared.STATE_ENV] = str(path)
    listener.listen(2048)
    rest = dataclasses.replace(settings, metrics_port=None)

    def run_worker(slot: int) -> int:
        return run(settings if slot == 0 else rest)

    log.info("serving with %d workers", settings.workers)
    try:
        return Supervisor(settings.workers, counts, run_worker).run()
    finally:
        listener.close()
        counts.close()
        path.unlink(missing_ok=True)


async def size_embedded(data_dir: Path, needed: int) -> None:
    """Start (or join) the embedded PostgreSQL, and raise its `max_connections` to `needed`
    when it is lower (a restart, before any worker connects)."""
    import asyncpg

    embedded = await start_embedded(data_dir)
    url = await embedded_url(embedded)
    conn = await asyncpg.connect(url)
    try:
        have = int(await conn.fetchval("SHOW max_connections"))
        if have >= needed:
            return
        await conn.execute(f"ALTER SYSTEM SET max_connections = {int(needed)}")
    finally:
        await conn.close()
    log.info("the embedded PostgreSQL's max_connections raised from %d to %d", have, needed)
    await asyncio.to_thread(embedded.restart_for_settings)


async def check_database(url: str, settings: Settings) -> None:
    """Say, when `TMS_DATABASE_URL`'s server allows fewer connections than the workers may
    hold, how many it should (TMS cannot change another's server)."""
    import asyncpg

    needed = connections_needed(settings, settings.workers)
    conn = await asyncpg.connect(url)
    try:
        have = int(await conn.fetchval("SHOW max_connections"))
    finally:
        await conn.close()
    if have < needed:
        log.warning(
            "the database allows %d connections, and %d workers may hold %d (%d each, and %d "
            "for commands beside): raise its max_connections, or lower TMS_WORKERS",
            have,
            settings.workers,
            needed,
            worker_connections(settings),
            SPARE_CONNECTIONS,
        )
