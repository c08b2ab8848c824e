"""Witnesses that are not honest (issue 33.5): a TMS submitting its checkpoints to a witness
that answers add-checkpoint with a 200 whose body never ends, one that trickles a byte at a
time, and ones that answer a 200 with a lying or garbage cosignature. The witness is a real HTTP
server on 127.0.0.1 that this test starts; the TMS is the real app under uvicorn. Each peer
costs one failure, recorded and logged, within a byte cap and a deadline; the server keeps
publishing and serving meanwhile."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import asyncpg
import httpx
import pytest
from factories import (
    LOG_SIGNER,
    Live,
    allow_connections,
    claim,
    fresh_database,
    live_server,
    nip98_header,
    settings,
)
from factories import terms as terms_event
from mcp_helpers import Caller, approve
from prometheus_client import REGISTRY

from tms.nostr.events import SecretKey
from tms.tlog.cosignature import CosignerKey
from tms.tlog.note import split_note
from tms.witness import submit

ENDLESS_CAP = 64 * 1024 * 1024  # what the endless witness sends at most, unless cut off first
CUT_OFF = 16 * 1024 * 1024  # the cap, and what the kernel's socket buffers hold, and room
TRICKLE_SECONDS = 0.3
DEADLINE = 2.0  # the submitter's, for this test: the trickle never finishes within it

KEYS = {name: CosignerKey.generate(f"{name}.example/witness") for name in ("endless", "trickle")}
KEYS |= {name: CosignerKey.generate(f"{name}.example/witness") for name in ("liar", "garbage")}
KEYS["flaky"] = CosignerKey.generate("flaky.example/witness")  # fails once, then cosigns
ONCE = CosignerKey.generate("once.example/witness")  # cosigns once, then fails (its own test)


class Witness(socketserver.BaseRequestHandler):
    """One add-checkpoint call, answered as the path's first part says."""

    sent: ClassVar[dict[str, int]] = {}
    calls: ClassVar[dict[str, int]] = {}
    lock: ClassVar = threading.Lock()

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        reader = sock.makefile("rb")
        head = []
        while (line := reader.readline()) not in (b"\r\n", b""):
            head.append(line.decode("latin-1"))
        if not head:
            return
        length = next(
            (int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")), 0
        )
        self.body = reader.read(length)
        mode = head[0].split(" ")[1].split("/")[1]
        with self.lock:
            self.calls[mode] = self.calls.get(mode, 0) + 1
        with contextlib.suppress(OSError):  # the submitter hung up: what it should do
            getattr(self, mode)(sock)

    def flaky(self, sock: socket.socket) -> None:
        """A 503 the first time, then an honest witness (that cosigns whatever it is sent)."""
        if self.calls["flaky"] == 1:
            sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            return
        note = self.body.decode().split("\n\n", 1)[1]
        text, _ = split_note(note)
        self._answer(sock, KEYS["flaky"].cosign(text, int(time.time())).encode())

    def once(self, sock: socket.socket) -> None:
        """An honest witness the first time, then away (a 503) for good."""
        if self.calls["once"] > 1:
            sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            return
        text, _ = split_note(self.body.decode().split("\n\n", 1)[1])
        self._answer(sock, ONCE.cosign(text, int(time.time())).encode())

    def _count(self, mode: str, n: int) -> None:
        with self.lock:
            self.sent[mode] = self.sent.get(mode, 0) + n

    def endless(self, sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        chunk = b"\xe2\x80\x94 endless.example/witness " + b"A" * 65_000 + b"\n"
        while self.sent.get("endless", 0) < ENDLESS_CAP:
            sock.sendall(chunk)
            self._count("endless", len(chunk))
        # still no end: it goes away, as if the server had been killed meanwhile

    def trickle(self, sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            time.sleep(TRICKLE_SECONDS)
            sock.sendall(b"A")
            self._count("trickle", 1)

    def liar(self, sock: socket.socket) -> None:
        """Its own name and key ID, and a signature over something else."""
        key = KEYS["liar"].verifier()
        forged = key.key_id + (1).to_bytes(8, "big") + bytes(64)
        line = f"\u2014 {key.name} {base64.b64encode(forged).decode()}\n".encode()
        self._answer(sock, line)

    def garbage(self, sock: socket.socket) -> None:
        self._answer(sock, b"\x00\xffnot a signature line at all")

    def _answer(self, sock: socket.socket, body: bytes) -> None:
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


@pytest.fixture
def witness() -> Iterator[str]:
    Witness.sent.clear()
    Witness.calls.clear()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Witness)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _policy(path: Path, url: str) -> Path:
    lines = [f"log {LOG_SIGNER.verifier().encode()}"]
    lines += [
        f"witness {name} {key.verifier().encode()} {url}/{name}" for name, key in KEYS.items()
    ]
    path.write_text("\n".join([*lines, "quorum liar", ""]))
    return path


def _states(database_url: str) -> dict[str, dict[str, Any]]:
    async def read() -> dict[str, dict[str, Any]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT witness, failures, last_error FROM tlog_witness_state"
                " WHERE collection = 'lab'"
            )
        finally:
            await conn.close()
        names = {key.verifier().encode(): name for name, key in KEYS.items()}
        # failing, or (the flaky one) cosigning again after it failed
        return {
            names[r["witness"]]: dict(r)
            for r in rows
            if (r["failures"] == 0) == (names[r["witness"]] == "flaky")
        }

    return asyncio.run(read())


def _failed(name: str) -> float:
    labels = {"witness": name, "outcome": "failed"}
    return REGISTRY.get_sample_value("tms_witness_submissions_total", labels) or 0.0


def test_dishonest_witnesses_cost_one_failure_each_and_the_server_serves_on(
    witness: str,
    tmp_path: Path,
    pg_server_url: str,
    template_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(submit, "DEADLINE", DEADLINE, raising=False)
    caplog.set_level(logging.WARNING, "tms.witness.submit")
    before = {name: _failed(name) for name in KEYS}
    config = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(_policy(tmp_path / "p", witness)))
    owner = SecretKey.generate()
    with fresh_database(pg_server_url, template_url) as url, live_server(url, config) as live:
        approve(url, owner)
        caller = Caller(live)
        try:
            caller.publish(terms_event(owner), claim(owner, "lab", "the first claim"))
            states = _wait_for_failures(live, caller, owner)
        finally:
            caller.close()
    assert "past 65,536 bytes" in states["endless"]["last_error"], states["endless"]
    assert f"no complete answer within {DEADLINE:g} s" in states["trickle"]["last_error"]
    assert "does not verify" in states["liar"]["last_error"], states["liar"]
    assert "without cosignature lines" in states["garbage"]["last_error"], states["garbage"]
    assert states["flaky"]["failures"] == 0  # it cosigned after its 503 (issue 34.8)
    back = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert back == ["witness flaky answers again on the log of 'lab', after 1 failure"], back
    # bounded: the endless witness was cut off after the cap and what the sockets buffer
    assert Witness.sent["endless"] < CUT_OFF, Witness.sent
    for name in KEYS:
        assert _failed(name) >= before[name] + 1, name
        assert any(
            r.getMessage().startswith(f"witness {name} on the log of 'lab': ")
            for r in caplog.records
        ), name


def _wait_for_failures(live: Live, caller: Caller, owner: SecretKey) -> dict[str, dict[str, Any]]:
    """Until each witness has failed once, publishing and reading the checkpoint meanwhile:
    every publish is answered, every read served."""
    deadline = time.monotonic() + 30
    published, last = 1, 0
    while True:
        states = _states(live.database_url)
        if set(states) == set(KEYS):
            return states
        assert time.monotonic() < deadline, (states, Witness.sent, Witness.calls)
        published += 1
        result = caller.publish(claim(owner, "lab", f"claim number {published} of the test"))
        size = result["checkpoints"][0]["size"]
        assert size > last, result  # stored, and the log grew
        served = caller.tool(owner, "get_checkpoint", collection="lab")
        assert 1 <= served["size"] <= size and served["quorum"] is False  # served
        last = size
        time.sleep(0.2)


def test_a_database_outage_is_the_outage_s_to_log_not_the_submitter_s(
    witness: str,
    tmp_path: Path,
    pg_server_url: str,
    template_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 34.3: the submitter looks every second and logged "witnessing paused" at each
    look that met the database away (9 lines in one outage, beside the outage's two). It now
    reports to the server's outage (tms.store.outage), which logs the start and the end once."""
    caplog.set_level(logging.DEBUG, "tms")
    config = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(_policy(tmp_path / "p", witness)))
    with fresh_database(pg_server_url, template_url) as url, live_server(url, config):
        time.sleep(1.5)  # the submitter has looked, and found nothing to submit
        start = len(caplog.records)
        asyncio.run(allow_connections(pg_server_url, url, False))
        try:
            time.sleep(3.5)  # three of its looks, or more
        finally:
            asyncio.run(allow_connections(pg_server_url, url, True))
        deadline = time.monotonic() + 15
        while not any("database answers again" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records[start:]]
            time.sleep(0.1)
        time.sleep(1.5)  # a look after the return
        during = caplog.records[start:]
    submitter = [r.getMessage() for r in during if r.name == "tms.witness.submit"]
    assert submitter == [], submitter
    met = [r.getMessage() for r in during if r.name == "tms.database" and r.levelno >= 30]
    assert met[0].startswith("database unavailable, first noticed by "), met
    assert met[-1].startswith("database answers again"), met
    assert any("the witness submitter" in r.getMessage() for r in during), "not reported"


def test_the_collection_page_says_how_many_entries_await_cosigning(
    witness: str, tmp_path: Path, pg_server_url: str, template_url: str
) -> None:
    """Issue 34.8: the page said "quorum met" of the checkpoint its witnesses cosigned, and
    nothing of the entries signed since, which no witness has vouched for."""
    policy = tmp_path / "p"
    policy.write_text(
        f"log {LOG_SIGNER.verifier().encode()}\n"
        f"witness once {ONCE.verifier().encode()} {witness}/once\nquorum once\n"
    )
    config = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(policy))
    owner = SecretKey.generate()
    with fresh_database(pg_server_url, template_url) as url, live_server(url, config) as live:
        approve(url, owner)
        caller = Caller(live)
        try:
            caller.publish(terms_event(owner), claim(owner, "lab", "the one claim cosigned"))
            deadline = time.monotonic() + 30
            while not caller.tool(owner, "get_checkpoint", collection="lab")["quorum"]:
                assert time.monotonic() < deadline, "never cosigned"
                time.sleep(0.2)
            caller.publish(claim(owner, "lab", "a second claim"), claim(owner, "lab", "a third"))
            with page_session(live, owner) as http:
                page = http.get("/c/lab")
        finally:
            caller.close()
    assert page.status_code == 200
    said = " ".join(page.text.split('id="witnessed"')[1].split(">", 1)[1].split("<")[0].split())
    assert said == (
        "Log of 1 entry witnessed by 1 of 1 (once): quorum met; 2 newer entries await cosigning"
    ), said


@contextlib.contextmanager
def page_session(live: Live, key: SecretKey) -> Iterator[httpx.Client]:
    """Logged in to the pages, as a browser is (NIP-98 login, the session cookie)."""
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        signed = key.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        answer = client.post(
            challenge["url"], headers={"Authorization": nip98_header(signed), "Origin": live.url}
        )
        assert answer.status_code == 200, answer.text
    with httpx.Client(base_url=live.url, cookies=answer.cookies) as client:
        yield client
