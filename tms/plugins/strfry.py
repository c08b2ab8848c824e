"""strfry's write-policy plugin protocol, so that a strfry plugin runs unchanged as a TMS write
policy (https://github.com/hoytech/strfry/blob/master/docs/plugins.md).

The command (`TMS_STRFRY_COMMAND`, or a plugin's `strfry_command`) is run as strfry runs it,
`/bin/sh -c <command>`, once, and kept running. For each event it reads one JSON line on stdin:

    {"type": "new", "event": {...}, "receivedAt": <unix seconds>, "sourceType": "IP4" | "IP6" |
     "Import", "sourceInfo": "<address, or the door>", "authed": "<hex pubkey>"}

(`authed` only when the door authenticated a key), and writes one line on stdout:
`{"id": "<event id>", "action": "accept" | "reject" | "shadowReject", "msg": "..."}`.

The doors map to strfry's sources as a strfry plugin expects: a door with a client address (the
relay, MCP over HTTP, the pages) is `IP4` or `IP6` with that address, the one a plugin's IP
allow-list or rate limit keys on; a door without one (`tms stdio`, the CLI) is `Import`, what
`strfry import` reports, with the door's name as `sourceInfo`.

Where this differs from strfry, it is because a TMS batch holds up to 1,000 events: the events
of a batch are written one after the other without waiting (strfry writes one and waits), and
answers are matched to requests by id, in the order asked. A batch has
`TMS_STRFRY_TIMEOUT_SECONDS` from being asked to its last answer, however many events it holds
and however many batches from other doors wait before it: a plugin that takes 9 s an event would
otherwise hold every door's publishes behind it. Past it, the batch is refused (`write policy
'strfry' did not answer within 10 s`); if the command was working on it, the command is killed
and started again at once, and the batches it owed answers to are asked again of the new run
(with the time again, once). As strfry, lines that are not JSON are skipped (logged), an answer
longer than 8,192 bytes (strfry's limit too) ends the process, and a process that exits is
started again at the next event, at once the first time and after a growing pause (to 30 s)
while it keeps failing; the events it owed answers to are rejected ("write policy 'strfry'
failed..."), never let through.

The command is the operator's, but not the server's: it runs in an empty directory of its own
(removed when it ends), not the server's, whose `data/secret` and `data/log-key` would be a
relative path away; it holds no descriptor of the server's but its three pipes (its stderr is
read, and logged a line at a time, cut and at most `STDERR_LINES` a minute); and it gets only
`PATH`, `HOME`, `USER`, `LOGNAME`, `LANG`, `LANGUAGE`, `TZ` and `LC_*` from the server's
environment, never a `TMS_*` setting nor anything else there (a program that needs a variable
is given it in its command: `env NAME=value /path/to/plugin`). It still runs as the server's
user: files that user may read, by their absolute paths, are for the operator to keep from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tms.extension import ACCEPT, SHADOW_REJECT, Action, Event, Origin, Verdict, reject
from tms.metrics import PLUGIN_FAILURES, STRFRY_STARTS
from tms.plugins.policies import failed, timed_out

log = logging.getLogger("tms.extension.strfry")  # the name operators filter on, kept

MAX_ANSWER_BYTES: Final = 8192  # one line of the plugin's output, as strfry bounds it
STDERR_CHARS: Final = 500  # of one line of its stderr, in the server's log
STDERR_LINES: Final = 20  # of its stderr logged a minute; the rest are counted
STDERR_WINDOW_SECONDS: Final = 60.0
# The command's environment: what a program needs to run, nothing of the server's (`LC_*` too).
ENVIRONMENT: Final = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ"})
FIRST_PAUSE_SECONDS: Final = 0.25  # before the second restart in a row; doubled each time
MAX_PAUSE_SECONDS: Final = 30.0
STOP_SECONDS: Final = 2.0  # for the command to exit once its stdin is closed, before a kill
SHELL: Final = "/bin/sh"


def source_of(origin: Origin) -> tuple[str, str]:
    """strfry's `sourceType` and `sourceInfo` for where a batch came from."""
    if origin.address is None:
        return "Import", origin.door.value
    try:
        version = ipaddress.ip_address(origin.address).version
    except ValueError:  # not an IP address (a test client's name): said as it is
        return "IP4", origin.address
    return ("IP6" if version == 6 else "IP4"), origin.address


def plugin_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The few variables a program needs to run (`ENVIRONMENT`, and the locale's `LC_*`), none
    of the server's: its settings (`TMS_SECRET`, `TMS_DATABASE_URL`, ...) and whatever else
    its environment holds (a cloud token, a proxy's password) are no business of a write
    policy's. A program that needs more is given it in its command: `env NAME=value ...`."""
    return {
        name: value
        for name, value in environ.items()
        if name in ENVIRONMENT or (name.startswith("LC_") and name.isupper())
    }


@dataclass(frozen=True, slots=True)
class _Failure:
    """What a request is answered with when the command could not answer it."""

    cause: str  # "timeout", "exited", or "restarted" (killed for another batch's deadline)


_Answer = dict[str, Any] | _Failure


class _Child:
    """One run of the command, and the requests it owes answers to, in the order asked."""

    def __init__(self, process: asyncio.subprocess.Process, home: Path) -> None:
        self.process = process
        self.home = home  # its working directory, empty and its own; removed when it ends
        self.order: deque[asyncio.Future[_Answer]] = deque()
        self.waiting: dict[str, deque[asyncio.Future[_Answer]]] = {}
        self.ended = False
        self.readers: list[asyncio.Task[None]] = []
        self.loop = asyncio.get_running_loop()

    def ask(self, event_id: str) -> asyncio.Future[_Answer]:
        future: asyncio.Future[_Answer] = self.loop.create_future()
        if self.ended:
            future.set_result(_Failure("exited"))
            return future
        self.order.append(future)
        self.waiting.setdefault(event_id, deque()).append(future)
        return future

    def answer(self, event_id: str, answer: dict[str, Any]) -> bool:
        """Hand an answer to the oldest request for its id; False if none waits for one. A
        request its batch gave up on (done already) takes its answer all the same, so that the
        answers after it reach the requests they are for."""
        futures = self.waiting.get(event_id)
        if not futures:
            return False
        future = futures.popleft()
        if not futures:
            del self.waiting[event_id]
        if not future.done():
            future.set_result(answer)
        self.head()
        return True

    def head(self) -> asyncio.Future[_Answer] | None:
        """The oldest request still awaited: the one the command works on, unless it works on
        one its batch gave up on."""
        while self.order and self.order[0].done():
            self.order.popleft()
        return self.order[0] if self.order else None

    def end(self, cause: str) -> None:
        """Kill the command (its whole process group: `sh -c` may have children of its own)
        and answer every request still waiting with a failure."""
        if not self.ended:
            self.ended = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for future in self.order:
            if not future.done():
                future.set_result(_Failure(cause))
        self.order.clear()
        self.waiting.clear()


def _given_up(futures: Sequence[asyncio.Future[_Answer]], cause: str) -> None:
    for future in futures:
        if not future.done():
            future.set_result(_Failure(cause))


class StrfryPolicy:
    """A write policy run by an external command speaking strfry's protocol (see the module's
    docstring); the runner (`tms.plugins.policies.WritePolicies`) asks it a batch at a time."""

    def __init__(
        self,
        name: str,
        command: str,
        seconds: float,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self._seconds = seconds
        self._environ = plugin_environment(os.environ if environ is None else environ)
        self._child: _Child | None = None
        self._starting = asyncio.Lock()
        self._writing = asyncio.Lock()
        self._failures = 0  # the command's runs in a row that ended badly
        self._not_before = 0.0  # no start before this (loop time): the pause after failures
        self._closed = False
        self._stderr = _Stderr()

    # --- the runner's side ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the command now rather than at the first event, so that one that cannot run is
        in the log at start-up. It is never an error here: the events will be rejected."""
        await self._running()

    async def judge(self, events: Sequence[Event], origin: Origin) -> list[Verdict]:
        """The verdicts, within `seconds` of the call, or the batch refused with a timeout. A
        batch whose command was killed for another batch's deadline is asked again of the next
        run, with `seconds` from then (once: killed for another again, it is refused)."""
        if not events:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._seconds
        restarted = False
        verdicts: list[Verdict] = []
        while True:
            try:
                async with asyncio.timeout_at(deadline):  # a start is never cut halfway
                    child = await asyncio.shield(self._running())
            except TimeoutError:
                return [*verdicts, self._failed("timeout")]
            if child is None:
                return [*verdicts, self._failed("exited")]
            cause = await self._asked(child, events[len(verdicts) :], origin, verdicts, deadline)
            if cause is None:
                return verdicts
            if cause != "restarted" or restarted:
                return [*verdicts, self._failed("timeout" if cause == "restarted" else cause)]
            restarted = True
            deadline = max(deadline, loop.time() + self._seconds)

    async def _asked(
        self,
        child: _Child,
        events: Sequence[Event],
        origin: Origin,
        verdicts: list[Verdict],
        deadline: float,
    ) -> str | None:
        """Ask `child` about `events`, adding their verdicts to `verdicts` until one is not an
        accept; None when done, else why the rest could not be answered."""
        futures: list[asyncio.Future[_Answer]] = []
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._write(child, events, origin, futures)
                    for future in futures:
                        answer = await asyncio.shield(future)
                        if isinstance(answer, _Failure):
                            return answer.cause
                        verdicts.append(self._verdict(answer))
                        if verdicts[-1].action is not Action.ACCEPT:
                            return None
            except TimeoutError:
                self._late(child, futures)
                return "timeout"
            return None
        finally:
            _given_up(futures, "abandoned")  # answers still due are taken and dropped

    async def _write(
        self,
        child: _Child,
        events: Sequence[Event],
        origin: Origin,
        futures: list[asyncio.Future[_Answer]],
    ) -> None:
        source_type, source_info = source_of(origin)
        received_at = int(time.time())
        stdin = child.process.stdin
        assert stdin is not None
        async with self._writing:
            for event in events:
                request: dict[str, Any] = {
                    "type": "new",
                    "event": event.to_dict(),
                    "receivedAt": received_at,
                    "sourceType": source_type,
                    "sourceInfo": source_info,
                }
                if origin.pubkey is not None:
                    request["authed"] = origin.pubkey
                futures.append(child.ask(event.id))
                if child.ended:
                    return
                try:
                    stdin.write(_line(request))
                    await stdin.drain()
                except (ConnectionError, RuntimeError) as exc:  # it exited, or was killed
                    log.warning("strfry: writing to the command failed: %s", exc)
                    self._ended(child, "exited")
                    return

    def _late(self, child: _Child, futures: Sequence[asyncio.Future[_Answer]]) -> None:
        """A batch's deadline passed. If the command is working on it (its oldest request
        still awaited is the batch's), the command is killed, and the other batches it owed
        answers to are asked again of the next run; else the batch gives up on its requests
        and the command goes on with the one it works on, whose own deadline stands."""
        if child.head() not in futures:
            return
        log.warning(
            "strfry: the command did not answer a batch within %g s: killed; it is started "
            "again at once for the batches that were waiting",
            self._seconds,
        )
        _given_up(futures, "timeout")
        self._ended(child, "restarted")

    async def close(self) -> None:
        """Close the command's stdin (a strfry plugin then exits), kill it if it has not within
        `STOP_SECONDS`, and reject whatever still waited."""
        self._closed = True
        async with self._starting:
            child, self._child = self._child, None
        if child is None:
            return
        stdin = child.process.stdin
        if stdin is not None and not child.ended:
            stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.process.wait(), STOP_SECONDS)
        child.end("exited")
        for reader in child.readers:
            await reader

    # --- the command -----------------------------------------------------------------------------

    async def _running(self) -> _Child | None:
        """The command's current run, started if there is none (None while it may not be
        started again yet, after it closed, or when it could not be)."""
        async with self._starting:
            child = self._child
            if child is not None and not child.ended:
                return child
            loop = asyncio.get_running_loop()
            if self._closed or loop.time() < self._not_before:
                return None
            home = Path(tempfile.mkdtemp(prefix="tms-strfry-"))
            try:
                process = await asyncio.create_subprocess_exec(
                    SHELL,
                    "-c",
                    self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=MAX_ANSWER_BYTES,
                    start_new_session=True,  # its own process group, killed as one
                    env=self._environ,
                    cwd=home,  # not the server's: no `data/secret` one relative path away
                    close_fds=True,  # no descriptor of the server's (its log, its sockets)
                    pass_fds=(),
                )
            except OSError as exc:
                shutil.rmtree(home, ignore_errors=True)
                log.error("strfry: cannot start %r: %s", self.command, exc)
                self._failures += 1
                self._paused()
                return None
            STRFRY_STARTS.inc()
            log.info("strfry: started %r (pid %d)", self.command, process.pid)
            started = _Child(process, home)
            started.readers = [
                asyncio.create_task(self._read(started), name="tms-strfry-reader"),
                asyncio.create_task(self._stderr.read(process), name="tms-strfry-stderr"),
            ]
            self._child = started
            return started

    async def _read(self, child: _Child) -> None:
        """Read the command's answers until it exits; then it is over, whatever ended it."""
        stdout = child.process.stdout
        assert stdout is not None
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # asyncio's word for a line over the limit
                    log.error(
                        "strfry: the command wrote a line longer than %d bytes: killed",
                        MAX_ANSWER_BYTES,
                    )
                    break
                if not line:
                    break
                self._take(child, line)
        finally:
            self._ended(child, "exited")
            status = await child.process.wait()
            shutil.rmtree(child.home, ignore_errors=True)
            if not self._closed:
                log.warning("strfry: the command %r ended (status %s)", self.command, status)

    def _take(self, child: _Child, line: bytes) -> None:
        answer = parse_answer(line)
        if answer is None:
            log.warning("strfry: skipped a line that is not a JSON object: %r", line[:200])
            return
        if not child.answer(answer[0], answer[1]):
            log.warning("strfry: skipped an answer for no event asked: %r", line[:200])
            return
        self._failures = 0

    def _ended(self, child: _Child, cause: str) -> None:
        if child.ended:
            return
        child.end(cause)
        if self._closed:
            return
        self._failures += 1
        if self._failures > 1:
            self._paused()

    def _paused(self) -> None:
        """No start for a while after failures in a row: 0.25 s, 0.5 s, ... up to 30 s."""
        pause = min(MAX_PAUSE_SECONDS, FIRST_PAUSE_SECONDS * 2 ** max(0, self._failures - 2))
        self._not_before = asyncio.get_running_loop().time() + pause

    # --- answers ---------------------------------------------------------------------------------

    def _verdict(self, answer: dict[str, Any]) -> Verdict:
        action = answer.get("action")
        if action == "accept":
            return ACCEPT
        if action == "shadowReject":
            return SHADOW_REJECT
        if action == "reject":
            message = answer.get("msg")
            return reject(message if isinstance(message, str) else "")
        log.error("strfry: the command answered an unknown action %r", str(action)[:64])
        return self._failed("protocol")

    def _failed(self, cause: str) -> Verdict:
        PLUGIN_FAILURES.labels(self.name, "write_policy", cause).inc()
        if cause == "timeout":
            return reject(timed_out(self.name, self._seconds))
        return reject(failed(self.name))


class _Stderr:
    """The command's stderr in the server's log, bounded: each line cut to `STDERR_CHARS`, at
    most `STDERR_LINES` lines a minute (the rest counted, and the count said), and always read,
    so that a program writing without end neither blocks nor fills the log."""

    def __init__(self) -> None:
        self._window = 0.0  # when the current minute began (loop time)
        self._said = 0
        self._dropped = 0

    async def read(self, process: asyncio.subprocess.Process) -> None:
        stderr = process.stderr
        assert stderr is not None
        while True:
            try:
                line = await stderr.readline()
            except ValueError:  # longer than the stream's limit: dropped by asyncio
                line = b"(a line too long to log)"
            if not line:
                return
            self._said_line(line.rstrip(b"\n").decode("utf-8", "replace"))

    def _said_line(self, text: str) -> None:
        now = asyncio.get_running_loop().time()
        if now >= self._window + STDERR_WINDOW_SECONDS:
            if self._dropped:
                log.warning(
                    "strfry: %d more lines of the command's stderr were not logged",
                    self._dropped,
                )
            self._window, self._said, self._dropped = now, 0, 0
        if self._said >= STDERR_LINES:
            self._dropped += 1
            return
        self._said += 1
        if len(text) > STDERR_CHARS:
            text = text[: STDERR_CHARS - 1] + "…"
        log.warning("strfry: stderr: %s", text)


def parse_answer(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """A line of the plugin's output as an answer, its event id and the object; None for what
    is not a JSON object with a string `id` (skipped, as strfry skips what it cannot parse).
    The line is at most `MAX_ANSWER_BYTES`, but it is the plugin's: any bytes at all."""
    try:
        answer = json.loads(line)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the parser
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        return None
    return answer["id"], answer


def _line(request: dict[str, Any]) -> bytes:
    return (json.dumps(request, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
