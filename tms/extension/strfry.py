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
answers are matched to requests by id, in the order asked. A plugin has `TMS_STRFRY_TIMEOUT_SECONDS`
for each event once it has answered the ones before it (so a sequential plugin sees strfry's own
per-event timeout); one that does not is taken as hung and killed, and the events still waiting
are rejected. As strfry, lines that are not JSON are skipped (logged), an answer longer than
8,192 bytes (strfry's limit too) ends the process, and a process that exits is started again at
the next event, at once the first time and after a growing pause (to 30 s) while it keeps
failing; the events it owed answers to are rejected ("write policy 'strfry' failed..."), never
let through. Its stderr is the server's, as strfry logs its plugins'. It gets the server's
environment without the `TMS_*` variables, which hold the server's secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tms.extension.api import ACCEPT, SHADOW_REJECT, Event, Verdict, reject
from tms.extension.policies import failed, timed_out
from tms.metrics import PLUGIN_FAILURES, STRFRY_STARTS
from tms.rules.admission import Action, Origin

log = logging.getLogger("tms.extension.strfry")

MAX_ANSWER_BYTES: Final = 8192  # one line of the plugin's output, as strfry bounds it
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
    """The server's environment without its own settings: `TMS_SECRET`, `TMS_LOG_KEY`,
    `TMS_DATABASE_URL` and the rest are no business of a write policy's."""
    return {name: value for name, value in environ.items() if not name.startswith("TMS_")}


@dataclass(frozen=True, slots=True)
class _Failure:
    """What a request is answered with when the command could not answer it."""

    cause: str  # "timeout" or "exited"


_Answer = dict[str, Any] | _Failure


class _Child:
    """One run of the command, and the requests it owes answers to, in the order asked."""

    def __init__(self, process: asyncio.subprocess.Process, seconds: float) -> None:
        self.process = process
        self.seconds = seconds
        self.hung: Callable[[], None] = lambda: self.end("timeout")  # the policy's, once made
        self.order: deque[asyncio.Future[_Answer]] = deque()
        self.waiting: dict[str, deque[asyncio.Future[_Answer]]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.ended = False
        self.reader: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()

    def ask(self, event_id: str) -> asyncio.Future[_Answer]:
        future: asyncio.Future[_Answer] = self.loop.create_future()
        if self.ended:
            future.set_result(_Failure("exited"))
            return future
        self.order.append(future)
        self.waiting.setdefault(event_id, deque()).append(future)
        if self.timer is None:
            self._arm()
        return future

    def answer(self, event_id: str, answer: dict[str, Any]) -> bool:
        """Hand an answer to the oldest request for its id; False if none waits for one."""
        futures = self.waiting.get(event_id)
        if not futures:
            return False
        future = futures.popleft()
        if not futures:
            del self.waiting[event_id]
        head = self.order[0] is future
        if not future.done():
            future.set_result(answer)
        if head:
            self._arm()
        return True

    def _arm(self) -> None:
        """The oldest request unanswered has `seconds` from now (it just became the oldest)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.order and self.order[0].done():
            self.order.popleft()
        if self.order and not self.ended:
            self.timer = self.loop.call_later(self.seconds, self._hung)

    def _hung(self) -> None:
        self.timer = None
        log.warning(
            "strfry: the command answered nothing for %g s while an event waited: killed; it "
            "is started again at the next event",
            self.seconds,
        )
        self.hung()

    def end(self, cause: str) -> None:
        """Kill the command (its whole process group: `sh -c` may have children of its own)
        and answer every request still waiting with a failure."""
        if not self.ended:
            self.ended = True
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for future in self.order:
            if not future.done():
                future.set_result(_Failure(cause))
        self.order.clear()
        self.waiting.clear()


class StrfryPolicy:
    """A write policy run by an external command speaking strfry's protocol (see the module's
    docstring); the runner (`tms.extension.policies.WritePolicies`) asks it a batch at a time."""

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

    # --- the runner's side ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the command now rather than at the first event, so that one that cannot run is
        in the log at start-up. It is never an error here: the events will be rejected."""
        await self._running()

    async def judge(self, events: Sequence[Event], origin: Origin) -> list[Verdict]:
        if not events:
            return []
        child = await self._running()
        if child is None:
            return [self._failed("exited")]
        source_type, source_info = source_of(origin)
        received_at = int(time.time())
        futures: list[asyncio.Future[_Answer]] = []
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
                    break
                try:
                    stdin.write(_line(request))
                    await stdin.drain()
                except (ConnectionError, RuntimeError) as exc:  # it exited, or was killed
                    log.warning("strfry: writing to the command failed: %s", exc)
                    self._ended(child, "exited")
                    break
        verdicts: list[Verdict] = []
        for future in futures:
            answer = await future
            if isinstance(answer, _Failure):
                verdicts.append(self._failed(answer.cause))
                break
            verdicts.append(self._verdict(answer))
            if verdicts[-1].action is Action.REJECT:
                break
        return verdicts

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
        if child.reader is not None:
            await child.reader

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
            try:
                process = await asyncio.create_subprocess_exec(
                    SHELL,
                    "-c",
                    self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=MAX_ANSWER_BYTES,
                    start_new_session=True,  # its own process group, killed as one
                    env=self._environ,
                )
            except OSError as exc:
                log.error("strfry: cannot start %r: %s", self.command, exc)
                self._failures += 1
                self._paused()
                return None
            STRFRY_STARTS.inc()
            log.info("strfry: started %r (pid %d)", self.command, process.pid)
            started = _Child(process, self._seconds)
            started.hung = functools.partial(self._ended, started, "timeout")
            started.reader = asyncio.create_task(self._read(started), name="tms-strfry-reader")
            self._child = started
            return started

    async def _read(self, child: _Child) -> None:
        """Read the command's answers until it exits; then it is over, whatever ended it."""
        stdout = child.process.stdout
        assert stdout is not None
        cause = "exited"
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
            self._ended(child, cause)
            status = await child.process.wait()
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
