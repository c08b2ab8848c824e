"""Run `tms.fetch.extract` in worker processes, so a hostile document cannot hurt the server.

Extraction is pure CPU work on bytes already downloaded, and some documents make it slow
(megabytes of tiny elements keep trafilatura busy for minutes), memory-hungry, or crash PDFium
outright. In the server's process it held the GIL, filled the default thread pool that publish's
signature checks share, kept running and kept its memory after the caller gave up, and a
segfault would take the server down with it. So:

- Extraction runs in at most `workers` worker processes (`tms.fetch.worker`: fresh interpreters
  that import only the extractor, at a lower CPU priority than the server). Callers queue for a
  free one for at most the extraction time limit, then get "busy, try again".
- Each extraction is bounded in time (`seconds`, per call) and memory (`memory_bytes`, per pool:
  the pool kills a worker whose resident memory passes it, looking every `WATCH_SECONDS` of
  `tms.fetch.process`; the worker caps its own address space at twice that). A worker past
  either limit, or that dies (a segfault in PDFium), costs that one extraction, with a one-line
  `FetchError` saying which.
  A fresh worker takes its place at once, so the pool stays whole.
- When the caller goes away (its task is cancelled: a client that hung up, a server shutting
  down), its worker is killed then and there: no extraction outlives its request.
- A worker that ran out of memory, hit an unexpected error, or is left big by a job is replaced
  too, so the memory one huge page needed goes back to the system.

The pool belongs to no event loop: its processes and sockets are plain, and waiting uses futures
and tasks of the caller's loop, so one pool serves successive `asyncio.run` calls too. Every
front door shares the process-wide `default_pool()`; the server calls `await shutdown()` when it
stops. An `atexit` hook kills whatever workers are left, and a worker whose server died sees its
socket close and exits by itself.

Settings (bad values raise FetchError):

- `TMS_FETCH_EXTRACT_SECONDS` (default 20): how long one extraction may take, and the longest a
  fetch waits for a free worker; read on every fetch (`extract_seconds_from_env`).
- `TMS_FETCH_EXTRACT_MEMORY_MB` (default 1024, at least 64): the memory one worker may use, in
  MiB; read when the process-wide pool starts (`ExtractionPool.from_env`).
- `TMS_FETCH_EXTRACT_WORKERS` (default 2, 1 to 64): how many extractions run at once; read when
  the process-wide pool starts.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import os
import signal
import subprocess
import time
import weakref
from collections.abc import Mapping
from typing import Any, Final

from tms.errors import FetchError, FetchRefused, one_line
from tms.fetch.extract import Extracted
from tms.fetch.process import REAP_SECONDS, WorkerDied, WorkerProcess

SECONDS_ENV: Final = "TMS_FETCH_EXTRACT_SECONDS"
MEMORY_ENV: Final = "TMS_FETCH_EXTRACT_MEMORY_MB"
WORKERS_ENV: Final = "TMS_FETCH_EXTRACT_WORKERS"
DEFAULT_SECONDS: Final = 20.0
DEFAULT_MEMORY_MB: Final = 1024
DEFAULT_WORKERS: Final = 2
MiB: Final = 1024 * 1024
START_SECONDS: Final = 60.0  # a worker starts in under a second; this is for a swamped machine


def extract_seconds_from_env(env: Mapping[str, str] | None = None) -> float:
    """TMS_FETCH_EXTRACT_SECONDS: how long one extraction may take (default 20)."""
    env = os.environ if env is None else env
    return _number(env, SECONDS_ENV, DEFAULT_SECONDS, 0.01, 3600, "seconds")


def _number(
    env: Mapping[str, str],
    name: str,
    default: float,
    low: float,
    high: float,
    unit: str,
    *,
    whole: bool = False,
) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(int(text)) if whole else float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise FetchError(f"{name} must be {unit} from {low:g} to {high:g}, got {text!r}")
    return value


class ExtractionPool:
    """At most `workers` extractions at once, each in its own process; see the module doc.

    `await pool.extract(body, content_type, url, max_chars=..., seconds=...)` returns what
    `tms.fetch.extract.extract` would, or raises a one-line FetchError. `await pool.aclose()`
    (or `async with ExtractionPool() as pool:`) stops every worker; `close()` does it at once.
    """

    def __init__(
        self, workers: int = DEFAULT_WORKERS, memory_bytes: int = DEFAULT_MEMORY_MB * MiB
    ) -> None:
        if workers < 1:
            raise ValueError("an extraction pool needs at least one worker")
        self.size = workers
        self.memory_bytes = memory_bytes
        self._idle: list[WorkerProcess] = []
        self._busy: set[WorkerProcess] = set()
        self._dying: list[WorkerProcess] = []  # killed, exit status not collected yet
        self._waiters: collections.deque[asyncio.Future[WorkerProcess]] = collections.deque()
        self._closed = False
        _POOLS.add(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExtractionPool:
        """A pool sized by TMS_FETCH_EXTRACT_WORKERS and TMS_FETCH_EXTRACT_MEMORY_MB."""
        env = os.environ if env is None else env
        workers = _number(env, WORKERS_ENV, DEFAULT_WORKERS, 1, 64, "a whole number", whole=True)
        megabytes = _number(env, MEMORY_ENV, DEFAULT_MEMORY_MB, 64, 1 << 20, "MiB")
        return cls(int(workers), int(megabytes * MiB))

    async def __aenter__(self) -> ExtractionPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    def pids(self) -> list[int]:
        """The process ids of the live workers (for tests and diagnostics)."""
        return self.busy_pids() + [w.pid for w in self._idle]

    def busy_pids(self) -> list[int]:
        """The process ids of the workers lent out to callers."""
        return [w.pid for w in self._busy]

    async def extract(
        self,
        body: bytes,
        content_type: str,
        url: str,
        *,
        max_chars: int,
        seconds: float = DEFAULT_SECONDS,
    ) -> Extracted:
        worker = await self._acquire(seconds)
        healthy = False
        try:
            if not worker.ready:
                try:
                    async with asyncio.timeout(START_SECONDS):
                        await worker.start()
                except (TimeoutError, WorkerDied):
                    raise FetchError(
                        "fetch failed: the text extractor could not start; see the server's log"
                    ) from None
            job = {"content_type": content_type, "url": url, "max_chars": max_chars}
            watch = asyncio.ensure_future(worker.watch(self.memory_bytes))
            try:
                async with asyncio.timeout(seconds):
                    reply, payload = await worker.run(job, body, 4 * max_chars)
            except TimeoutError:
                raise FetchError(
                    f"no text could be extracted from {url}: extraction took longer than "
                    f"{seconds:g} s; the page is too large or too complex to extract"
                ) from None
            except WorkerDied:
                raise await self._death(worker, url) from None
            finally:
                watch.cancel()
            healthy = isinstance(reply, dict) and reply.get("retire") is False
            return self._result(reply, payload, url)
        finally:
            self._release(worker, healthy=healthy)

    def _out_of_memory(self, url: str) -> FetchError:
        return FetchError(
            f"no text could be extracted from {url}: extraction ran out of memory (more than "
            f"{self.memory_bytes / MiB:,.0f} MiB); the page is too large or too complex to extract"
        )

    def _result(self, reply: Any, payload: bytes, url: str) -> Extracted:
        misbehaved = FetchError(f"no text could be extracted from {url}: the extractor misbehaved")
        if not isinstance(reply, dict):
            raise misbehaved
        why, error, title = reply.get("why"), reply.get("error"), reply.get("title")
        if why == "refused" and isinstance(error, str):
            raise FetchRefused(error)
        if why == "unreadable" and isinstance(error, str):
            raise FetchError(error)
        if why == "memory":
            raise self._out_of_memory(url)
        if why == "failed":
            raise FetchError(
                f"no text could be extracted from {url}: the extractor failed ({error})"
            )
        if why is not None or not (title is None or isinstance(title, str)):
            raise misbehaved
        try:
            return Extracted(payload.decode("utf-8"), title)
        except UnicodeDecodeError:
            raise misbehaved from None

    async def _death(self, worker: WorkerProcess, url: str) -> FetchError:
        """The error for a worker that died during a job: killed for its memory, or crashed."""
        if self._closed:
            return FetchError("fetch failed: the server is shutting down")
        if worker.over_memory:
            return self._out_of_memory(url)
        worker.kill()  # it may still be alive, having closed its socket
        status = await worker.exit_status()
        how = ""
        if status is not None and status < 0:
            try:
                how = f" ({signal.Signals(-status).name})"
            except ValueError:
                how = f" (signal {-status})"
        elif status:
            how = f" (exit status {status})"
        return FetchError(
            f"no text could be extracted from {url}: the extractor crashed on this document{how}"
        )

    async def _acquire(self, seconds: float) -> WorkerProcess:
        if self._closed:
            raise FetchError("fetch failed: the server is shutting down")
        self._reap()
        if self._idle:
            worker = self._idle.pop()
        elif len(self._busy) < self.size:
            worker = self._spawn()
        else:
            return await self._wait(seconds)
        self._busy.add(worker)
        return worker

    async def _wait(self, seconds: float) -> WorkerProcess:
        """Queue for a worker that `_release` hands over, for at most `seconds`."""
        waiter: asyncio.Future[WorkerProcess] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(seconds):
                return await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result(), healthy=True)  # handed one just as we gave up
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise FetchError(
                    f"fetch failed: every text extractor stayed busy for {seconds:g} s; "
                    "try again in a minute"
                ) from None
            raise

    def _spawn(self) -> WorkerProcess:
        try:
            return WorkerProcess(self.memory_bytes)
        except OSError as exc:
            raise FetchError(
                f"fetch failed: the text extractor could not start ({one_line(exc)})"
            ) from None

    def _release(self, worker: WorkerProcess, *, healthy: bool) -> None:
        """Take a worker back from a caller: to the next waiter, or idle; or replace it."""
        self._busy.discard(worker)
        if not healthy or self._closed:
            worker.discard()
            self._dying.append(worker)
            self._reap_soon()
            if self._closed:
                return
            try:
                worker = self._spawn()  # a replacement, warming up while nobody needs it yet
            except FetchError:
                return  # the next caller tries again, and says why
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                self._busy.add(worker)
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    def _reap(self) -> None:
        self._dying = [w for w in self._dying if not w.reaped()]

    def _reap_soon(self, delay: float = 0.05) -> None:
        """Collect killed workers' exit status shortly, and again until none is left: a
        SIGKILLed process takes a moment to go, and should not linger as a zombie."""
        self._reap()
        if self._dying and delay < REAP_SECONDS:
            with contextlib.suppress(RuntimeError):  # no running loop: the next call reaps
                asyncio.get_running_loop().call_later(delay, self._reap_soon, delay * 2)

    def close(self) -> None:
        """Kill every worker now; extractions in flight fail with "shutting down"."""
        self._closed = True
        for worker in self._idle:
            worker.discard()
            self._dying.append(worker)
        self._idle.clear()
        for worker in self._busy:
            worker.kill()  # its caller sees the socket close, then discards it
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
        self._reap()

    async def aclose(self) -> None:
        """Kill every worker and wait (briefly) until each has exited."""
        self.close()
        deadline = time.monotonic() + REAP_SECONDS
        while (self._dying or self._busy) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            self._reap()

    def _close_at_exit(self) -> None:
        self.close()
        for worker in [*self._busy, *self._dying]:
            worker.discard()
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(REAP_SECONDS)
        self._busy.clear()
        self._dying.clear()


_POOLS: Final[weakref.WeakSet[ExtractionPool]] = weakref.WeakSet()
_default: ExtractionPool | None = None


def default_pool() -> ExtractionPool:
    """The process-wide pool, started on first use (`ExtractionPool.from_env`)."""
    global _default
    if _default is None or _default.closed:
        _default = ExtractionPool.from_env()
    return _default


async def shutdown() -> None:
    """Stop the process-wide pool's workers; a later fetch starts a new pool."""
    global _default
    pool, _default = _default, None
    if pool is not None:
        await pool.aclose()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool._close_at_exit()
