"""strfry's write-policy protocol: a strfry-style plugin script (tests/extension/strfry_script.py)
run as strfry runs one, accepting, rejecting and shadow-rejecting; crashing (the event in flight
rejected cleanly, the command started again), hanging (a timeout), answering out of protocol; a
batch of hundreds of events; what each request carries."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from factories import OWNER, settings, sign
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from tms.extension import Door, Event, Origin
from tms.nostr.events import Event as CoreEvent
from tms.plugins.loading import load_extensions
from tms.plugins.policies import WritePolicies
from tms.plugins.strfry import (
    MAX_ANSWER_BYTES,
    STDERR_CHARS,
    STDERR_LINES,
    StrfryPolicy,
    parse_answer,
    plugin_environment,
    source_of,
)
from tms.rules.admission import ACCEPTED, Action, Decision

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).with_name("strfry_script.py")
FAILED = "write policy 'strfry' failed; the server's log has the details"
RELAY = Origin(Door.RELAY, pubkey=OWNER.pubkey, address="127.0.0.1")


class Plugin:
    """The script as a running policy, and what it noted."""

    def __init__(self, tmp_path: Path, seconds: float = 5.0, command: str | None = None) -> None:
        self.notes = tmp_path / "notes.jsonl"
        self.command = command or f"{shlex.quote(sys.executable)} {SCRIPT} {self.notes}"
        environ = {"PATH": "/usr/bin:/bin", "TMS_SECRET": "s" * 40, "STRFRY_LIKE": "1"}
        self.policy = StrfryPolicy("strfry", self.command, seconds, environ=environ)
        self.runner = WritePolicies([self.policy])

    async def admit(self, *texts: str, origin: Origin = RELAY) -> Decision:
        return await self.runner.admit(batch(*texts), origin)

    def noted(self) -> list[dict[str, Any]]:
        if not self.notes.exists():
            return []
        *lines, _partial = self.notes.read_text().split("\n")  # it may be writing one now
        return [json.loads(line) for line in lines]

    def requests(self) -> list[dict[str, Any]]:
        return [note for note in self.noted() if "type" in note]

    def starts(self) -> list[dict[str, Any]]:
        return [note for note in self.noted() if "started" in note]


@pytest.fixture
async def plugin(tmp_path: Path) -> AsyncIterator[Plugin]:
    running = Plugin(tmp_path)
    yield running
    await running.policy.close()


def batch(*texts: str) -> list[CoreEvent]:
    return [sign(OWNER, 4702, {"collection": "mcas", "text": text}) for text in texts]


def starts() -> float:
    return REGISTRY.get_sample_value("tms_strfry_starts_total") or 0.0


def failures(cause: str) -> float:
    labels = {"plugin": "strfry", "seam": "write_policy", "cause": cause}
    return REGISTRY.get_sample_value("tms_plugin_failures_total", labels) or 0.0


async def test_accept_reject_and_shadow_reject(plugin: Plugin) -> None:
    assert await plugin.admit("fine", "also fine") is ACCEPTED
    events = batch("fine", "reject:blocked: not on the white-list", "fine too")
    decision = await plugin.runner.admit(events, RELAY)
    assert decision.action is Action.REJECT
    assert (decision.message, decision.event) == ("not on the white-list", 1)
    decision = await plugin.admit("fine", "shadow")
    assert (decision.action, decision.policy) == (Action.SHADOW_REJECT, "strfry")
    assert len(plugin.starts()) == 1  # one long-lived process for all of it


async def test_each_request_is_stryfrys_line(plugin: Plugin) -> None:
    [event] = batch("fine")
    before = int(time.time())
    assert await plugin.runner.admit([event], RELAY) is ACCEPTED
    await plugin.admit("v6", origin=Origin(Door.MCP, address="::1"))
    await plugin.admit("stdio", origin=Origin(Door.STDIO))
    first, v6, stdio = plugin.requests()
    assert first == {
        "type": "new",
        "event": event.to_dict(),
        "receivedAt": first["receivedAt"],
        "sourceType": "IP4",
        "sourceInfo": "127.0.0.1",
        "authed": OWNER.pubkey,
    }
    assert before <= first["receivedAt"] <= time.time()
    assert (v6["sourceType"], v6["sourceInfo"], "authed" in v6) == ("IP6", "::1", False)
    assert (stdio["sourceType"], stdio["sourceInfo"]) == ("Import", "stdio")
    # the server's settings (its secrets among them) are not the plugin's
    assert plugin.starts()[0]["tms"] == []


def test_sources_and_environment() -> None:
    assert source_of(Origin(Door.WEB, address="203.0.113.9")) == ("IP4", "203.0.113.9")
    assert source_of(Origin(Door.RELAY, address="2001:db8::1")) == ("IP6", "2001:db8::1")
    assert source_of(Origin(Door.CLI)) == ("Import", "cli")
    assert plugin_environment({"TMS_SECRET": "x", "HOME": "/root"}) == {"HOME": "/root"}


async def test_a_crash_rejects_the_event_in_flight_and_the_command_starts_again(
    plugin: Plugin,
) -> None:
    assert await plugin.admit("warm up") is ACCEPTED
    started, failed = starts(), failures("exited")
    decision = await plugin.admit("fine", "crash", "never read")
    assert decision.action is Action.REJECT
    assert decision.message.endswith(
        "write policy 'strfry' failed; the server's log has the details"
    )
    assert failures("exited") == failed + 1
    assert await plugin.admit("after the crash") is ACCEPTED  # started again, at once
    assert starts() == started + 1
    assert len(plugin.starts()) == 2


async def test_a_hang_times_out_and_the_command_is_replaced(tmp_path: Path) -> None:
    plugin = Plugin(tmp_path, seconds=0.5)
    try:
        timed_out = failures("timeout")
        clock = time.monotonic()
        decision = await plugin.admit("fine", "hang", "fine")
        assert time.monotonic() - clock < 3
        assert decision.action is Action.REJECT
        assert decision.message.endswith("write policy 'strfry' did not answer within 0.5 s")
        assert failures("timeout") == timed_out + 1
        assert await plugin.admit("fine again") is ACCEPTED
        assert len(plugin.starts()) == 2
    finally:
        await plugin.policy.close()


async def test_out_of_protocol_answers(plugin: Plugin) -> None:
    # a line that is not JSON, and an answer for an event never asked, are skipped
    assert await plugin.admit("garbage", "stranger", "fine") is ACCEPTED
    decision = await plugin.admit("unknown")
    assert decision.message.endswith(
        "write policy 'strfry' failed; the server's log has the details"
    )
    # a line longer than strfry's 8,192 bytes ends the process; the next batch starts another
    decision = await plugin.admit("long")
    assert decision.action is Action.REJECT
    assert await plugin.admit("fine") is ACCEPTED
    assert len(plugin.starts()) == 2


async def test_hundreds_of_events_in_one_batch(plugin: Plugin) -> None:
    texts = [f"event {i}" for i in range(600)]
    clock = time.monotonic()
    assert await plugin.admit(*texts) is ACCEPTED
    texts[400] = "reject:too many"
    events = batch(*texts)
    decision = await plugin.runner.admit(events, RELAY)
    assert (decision.message, decision.event) == ("too many", 400)
    assert time.monotonic() - clock < 20
    # every event asked, in order (those after the reject may still be on their way)
    asked = [request["event"]["id"] for request in plugin.requests()]
    assert len(asked) >= 1001 and asked[600:1001] == [event.id for event in events[:401]]


async def test_a_command_that_keeps_failing_is_paused(tmp_path: Path) -> None:
    plugin = Plugin(tmp_path, command="exit 1")
    try:
        started = starts()
        for _ in range(2):  # the first failure restarts at once
            decision = await plugin.admit("fine")
            assert decision.action is Action.REJECT
        assert starts() == started + 2
        decision = await plugin.admit("fine")  # paused: not started again yet
        assert decision.action is Action.REJECT
        assert starts() == started + 2
    finally:
        await plugin.policy.close()


async def test_closing_stops_the_command(plugin: Plugin) -> None:
    assert await plugin.admit("fine") is ACCEPTED
    await plugin.policy.close()
    decision = await plugin.admit("fine")
    assert decision.action is Action.REJECT


def test_the_event_view_is_what_strfry_sends() -> None:
    [core] = batch("x")
    assert Event(core).to_dict() == json.loads(core.to_json())


@given(st.binary(max_size=MAX_ANSWER_BYTES) | st.text(max_size=500).map(str.encode))
def test_any_line_a_plugin_writes_is_an_answer_or_skipped(line: bytes) -> None:
    answer = parse_answer(line)
    assert answer is None or (isinstance(answer[0], str) and answer[1]["id"] == answer[0])


def test_answers_that_are_skipped() -> None:
    assert parse_answer(b'{"id":"ab","action":"accept"}\n') == (
        "ab",
        {"id": "ab", "action": "accept"},
    )
    for line in (b"[" * 8000, b'{"id": 1}', b"[]", b"\xff\xfe", b'"text"', b'{"id":"a"'):
        assert parse_answer(line) is None, line


async def test_the_built_in_plugin_as_an_operator_enables_it(tmp_path: Path) -> None:
    command = Plugin(tmp_path).command
    config = settings(TMS_PLUGINS="strfry", TMS_STRFRY_COMMAND=command)
    extensions = load_extensions(config, {"PATH": "/usr/bin:/bin"})
    async with extensions.running():
        assert await extensions.admission.admit(batch("fine"), RELAY) is ACCEPTED
        decision = await extensions.admission.admit(batch("reject:no"), RELAY)
        assert (decision.action, decision.policy) == (Action.REJECT, "strfry")
    decision = await extensions.admission.admit(batch("fine"), RELAY)  # stopped with the server
    assert decision.action is Action.REJECT


# --- what the command may see, and how long it may take ------------------------------------------


async def test_the_command_sees_nothing_of_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started from the server's directory, with the server's log on its stderr and secrets in
    its environment: the command runs in an empty directory of its own, holds only its pipes
    (and the file it opened itself), and gets only the allow-listed variables."""
    server = tmp_path / "server"
    (server / "data").mkdir(parents=True)
    (server / "data" / "secret").write_text("the server's secret")
    (server / "data" / "log-key").write_text("the server's log key")
    server_log = server / "server.log"
    monkeypatch.chdir(server)
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "TMS_SECRET": "s" * 40,
        "TMS_DATABASE_URL": "postgresql://tms:password@db/tms",
        "AWS_SECRET_ACCESS_KEY": "not the plugin's",
    }
    notes = tmp_path / "notes.jsonl"
    command = f"{shlex.quote(sys.executable)} {SCRIPT} {notes}"
    policy = StrfryPolicy("strfry", command, 5.0, environ=environ)
    saved = os.dup(2)
    log_fd = os.open(server_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 2)  # the server's stderr is its log, as under systemd or `>> log`
    try:
        assert await WritePolicies([policy]).admit(batch("probe"), RELAY) is ACCEPTED
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)
        await policy.close()
    noted = [json.loads(line) for line in notes.read_text().splitlines()]
    [probe] = [note["probe"] for note in noted if "probe" in note]
    assert Path(probe["cwd"]) != server and probe["listing"] == []
    assert not Path(probe["cwd"]).exists()  # removed when the command ended
    assert set(probe["opened"].values()) == {"FileNotFoundError"}
    assert probe["env"] == ["HOME", "LC_ALL", "PATH", "PWD"]  # PWD: /bin/sh sets it
    fds = probe["fds"]
    assert all(fds[fd].startswith("pipe:") for fd in ("0", "1", "2")), fds
    assert set(fds.values()) - {fds["0"], fds["1"], fds["2"]} == {str(notes)}, fds


async def test_a_batch_has_the_deadline_however_fast_each_event_is(tmp_path: Path) -> None:
    """Three events of 0.4 s each, each within the 1 s strfry gives an event: the batch is
    over its 1 s, refused, and the command started again for the next."""
    plugin = Plugin(tmp_path, seconds=1.0)
    try:
        timed_out = failures("timeout")
        decision = await plugin.admit("slow:0.4", "slow:0.4", "slow:0.4")
        assert decision.action is Action.REJECT
        assert decision.message.endswith("write policy 'strfry' did not answer within 1 s")
        assert failures("timeout") == timed_out + 1
        assert await plugin.admit("fine") is ACCEPTED
        assert len(plugin.starts()) == 2
    finally:
        await plugin.policy.close()


async def test_a_slow_batch_does_not_hold_the_batches_behind_it(tmp_path: Path) -> None:
    """A batch the command hangs on, and one from another door asked meanwhile (queued behind
    it in the one command): the first is refused at its deadline and the command killed; the
    second is asked again of the new command, and accepted."""
    plugin = Plugin(tmp_path, seconds=2.0)  # room for the new command to start
    try:
        assert await plugin.admit("warm up") is ACCEPTED
        slow = asyncio.create_task(plugin.admit("hang"))
        while len(plugin.requests()) < 2:  # the command has read it, and hangs
            await asyncio.sleep(0.01)
        other = asyncio.create_task(plugin.admit("fine", origin=Origin(Door.MCP, address="::1")))
        decision = await slow
        assert decision.action is Action.REJECT
        assert decision.message.endswith("write policy 'strfry' did not answer within 2 s")
        assert await other is ACCEPTED
        assert len(plugin.starts()) == 2
    finally:
        await plugin.policy.close()


async def test_the_commands_stderr_is_logged_in_bounds(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "tms.extension.strfry"):
        assert await plugin.admit("chatty") is ACCEPTED
        await plugin.policy.close()  # its stderr read to the end
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("strfry: stderr:")]
    assert len(said) == STDERR_LINES
    assert said[0].startswith("strfry: stderr: line 0 xxx")
    assert all(len(line) <= len("strfry: stderr: ") + STDERR_CHARS for line in said)
