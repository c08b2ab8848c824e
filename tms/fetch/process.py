"""One extraction worker process as the server holds it: started, spoken to, watched, killed.

`tms.fetch.worker` is the program a worker runs; this is the server's end of it. A
`WorkerProcess` starts that program as a fresh interpreter with an environment stripped to
locale, paths and Python's own variables (no `TMS_*` secret reaches the process that parses
hostile documents), speaks its framing over a socket pair (JSON headers, never pickle, and no
frame larger than the caller allows), watches its resident memory from the outside (a parser
stuck in C code cannot hide from `/proc`), and kills and reaps it. Any way the worker goes
silent mid-job is one `WorkerDied`.

It decides nothing: when to start, reuse, replace or kill a worker, and what a death means to
the caller, is the pool's (`tms.fetch.pool`). Kept apart so that the pool reads as a policy over
workers, and the process plumbing (sockets, signals, `/proc`) is in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Final

from tms.fetch.worker import FRAME, MAX_HEADER, READY, encode

WATCH_SECONDS: Final = 0.02  # how often a busy worker's memory is looked at
REAP_SECONDS: Final = 2.0  # how long to wait for a dead worker's exit status

# What a worker may see of the server's environment: enough to run Python, nothing else.
_ENV_KEPT: Final = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "VIRTUAL_ENV")
_ENV_PREFIXES: Final = ("LC_", "PYTHON")


class WorkerDied(Exception):
    """The worker's socket closed in the middle of a job."""


class WorkerProcess:
    """One worker process and the server's end of its socket."""

    def __init__(self, memory_bytes: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tms.fetch.worker",
                    str(theirs.fileno()),
                    str(memory_bytes),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=_worker_env(),
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.socket = ours
        self.ready = False
        self.over_memory = False  # killed by `watch` for passing the memory limit

    @property
    def pid(self) -> int:
        return self.process.pid

    async def start(self) -> None:
        """Wait for the worker's "ready" (it has loaded its libraries)."""
        header, _ = await self._receive(0)
        if header != READY:
            raise WorkerDied("the worker did not say it was ready")
        self.ready = True

    async def run(self, header: dict[str, Any], body: bytes, max_text: int) -> tuple[Any, bytes]:
        """Send one job, return the worker's reply header and payload."""
        loop = asyncio.get_running_loop()
        head, payload = encode(header, body)
        try:
            await loop.sock_sendall(self.socket, head)
            await loop.sock_sendall(self.socket, payload)
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died first
            raise WorkerDied(str(exc)) from None
        return await self._receive(max_text)

    async def watch(self, memory_bytes: int) -> None:
        """Kill the worker if its resident memory passes `memory_bytes` (runs until cancelled)."""
        statm = f"/proc/{self.pid}/statm"
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                with open(statm, "rb") as file:
                    resident = int(file.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                return  # gone, or no /proc here: the worker's own address-space cap still holds
            if resident > memory_bytes:
                self.over_memory = True
                self.kill()
                return

    async def _receive(self, max_payload: int) -> tuple[Any, bytes]:
        lengths = await self._exactly(FRAME.size)
        head_size, payload_size = FRAME.unpack(lengths)
        if head_size > MAX_HEADER or payload_size > max_payload:
            raise WorkerDied(f"the worker sent a frame of {head_size}+{payload_size} bytes")
        head = await self._exactly(head_size)
        payload = await self._exactly(payload_size)
        try:
            return json.loads(head.decode("utf-8")), bytes(payload)
        except ValueError:
            raise WorkerDied("the worker sent a header that is not JSON") from None

    async def _exactly(self, size: int) -> bytearray:
        loop = asyncio.get_running_loop()
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            try:
                n = await loop.sock_recv_into(self.socket, view[got:])
            except OSError as exc:
                raise WorkerDied(str(exc)) from None
            if n == 0:
                raise WorkerDied("the worker closed its socket")
            got += n
        return buffer

    def kill(self) -> None:
        """SIGKILL the process. Our socket stays open until `discard`, so that a coroutine
        reading it sees it close rather than wait on a closed descriptor."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    def discard(self) -> None:
        """Kill the process and close our socket (no coroutine may be using it)."""
        self.kill()
        self.socket.close()

    def reaped(self) -> bool:
        """True once the process has exited and its status was collected."""
        return self.process.poll() is not None

    async def exit_status(self) -> int | None:
        """The exit status of a worker whose socket closed, waiting briefly for it."""
        deadline = time.monotonic() + REAP_SECONDS
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.process.returncode


def _worker_env() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if name in _ENV_KEPT or name.startswith(_ENV_PREFIXES)
    }
