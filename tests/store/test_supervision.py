"""The embedded PostgreSQL is watched by `tms serve`: killed, it comes back by itself within
seconds (503 and "database unavailable" meanwhile), and nothing is left running after a clean
shutdown, even when an operator command started it again first, or when an earlier server was
killed with SIGKILL."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tms.nostr.events import SecretKey

TMS = str(Path(sys.executable).parent / "tms")
HEADERS = {"Accept": "application/json, text/event-stream"}


def environment(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    # The outage is polled faster than the key's rate limit allows.
    return {**env, "TMS_EMBED": "off", "TMS_RATE_KEY": "off", "TMS_WORKERS": "1", **values}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def postmaster(data_dir: Path) -> psutil.Process | None:
    pid_file = data_dir / "postgres" / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, psutil.NoSuchProcess):
        process = psutil.Process(int(pid_file.read_text().split()[0]))
        if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
            return process
    return None


def start_serving(data_dir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`tms serve` on `data_dir`, once it answers `/healthz`."""
    port = free_port()
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [TMS, "serve", "--port", str(port)],
            env=environment(TMS_DATA_DIR=str(data_dir)),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            raise AssertionError(log_path.read_text())
        if time.monotonic() > deadline:
            server.kill()
            raise AssertionError("tms serve did not answer within 60 s")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return server, base
        time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path, data_root: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    data_dir = data_root / "data"  # not under tmp_path: conftest's data_root says why
    server, base = start_serving(data_dir, tmp_path / "err")
    try:
        yield server, base, data_dir
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        process = postmaster(data_dir)
        if process is not None:
            process.kill()


def list_collections(base: str, key: SecretKey) -> dict[str, object]:
    content = json.dumps({"tool": "list_collections", "args": {}})
    request = key.sign(4707, content, int(time.time())).to_dict()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_collections", "arguments": {"request": request}},
    }
    result: dict[str, object] = httpx.post(f"{base}/mcp", json=body, headers=HEADERS).json()
    return result["result"]  # type: ignore[return-value]


def exported(base: str, key: SecretKey) -> httpx.Response:
    """A NIP-98 export of a collection the key is not in: a 404 while the database is up."""
    url = f"{base}/c/lab/export.jsonl"
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    header = "Nostr " + base64.b64encode(event.to_json().encode()).decode()
    return httpx.get(url, headers={"Authorization": header}, timeout=5)


def test_a_killed_database_comes_back_by_itself(
    served: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    server, base, data_dir = served
    first = postmaster(data_dir)
    assert first is not None
    key = SecretKey.generate()
    first.kill()
    killed = time.monotonic()
    first.wait(10)
    answers = []
    exports = []  # the HTTP door meanwhile: 503 and the same words, as JSON
    while True:
        health = httpx.get(f"{base}/healthz", timeout=5)
        answers.append(health.status_code)
        if health.status_code == 503:
            assert health.json()["ok"] is False
            outage = list_collections(base, key)
            if outage.get("isError"):
                assert outage["content"] == [
                    {"type": "text", "text": "database unavailable, try again shortly"}
                ]
            export = exported(base, key)
            exports.append(export.status_code)
            if export.status_code == 503:
                assert export.json() == {"error": "database unavailable, try again shortly"}
        if health.status_code == 200:
            break
        # About 3 s on a quiet machine; crash recovery on a loaded one (load 6) took over 10.
        assert time.monotonic() - killed < 30, f"not back within 30 s: {answers}"
        time.sleep(0.05)
    assert 503 in answers
    # Each export was asked between two health checks: with the database down at both, it
    # answered 503; otherwise 503 or, the database back, the non-member's 404.
    assert set(exports) <= {503, 404}, exports
    for i, status in enumerate(exports):
        if answers[i + 1] == 503:
            assert status == 503, (answers, exports)
    second = postmaster(data_dir)
    assert second is not None and second.pid != first.pid
    # The pools reconnected: a tool answers again.
    assert list_collections(base, key)["structuredContent"] == {"result": []}
    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0
    deadline = time.monotonic() + 10
    while postmaster(data_dir) is not None:
        assert time.monotonic() < deadline, "the restarted PostgreSQL is still running"
        time.sleep(0.1)


def test_a_database_an_operator_restarted_still_stops_with_the_server(
    served: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    server, base, data_dir = served
    first = postmaster(data_dir)
    assert first is not None
    first.kill()
    first.wait(10)
    # The operator's command gets there first: it starts the server again for itself.
    approved = subprocess.run(
        [TMS, "approved"], env=environment(TMS_DATA_DIR=str(data_dir)), capture_output=True
    )
    assert approved.returncode == 0, approved.stderr
    deadline = time.monotonic() + 10
    while httpx.get(f"{base}/healthz", timeout=5).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert postmaster(data_dir) is not None
    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 0
    deadline = time.monotonic() + 10
    while postmaster(data_dir) is not None:
        assert time.monotonic() < deadline, "PostgreSQL was left running after a clean shutdown"
        time.sleep(0.1)


def test_an_outage_is_one_line_in_the_log_and_its_end_another(
    served: tuple[subprocess.Popen[bytes], str, Path], tmp_path: Path
) -> None:
    """Killed and restarted, with the health check, a tool and an export meeting the outage
    (and the pools reconnecting, and the refusal log's writer): it used to write a line for
    each, many with a traceback (19 in one outage); now one line when it starts, one when the
    database answers again, and no traceback."""
    _, base, data_dir = served
    time.sleep(1.5)  # the refusal log's writer and the pools have settled
    err = tmp_path / "err"
    start = len(err.read_bytes())
    first = postmaster(data_dir)
    assert first is not None
    key = SecretKey.generate()
    first.kill()
    first.wait(10)
    met = 0
    deadline = time.monotonic() + 15
    while True:
        health = httpx.get(f"{base}/healthz", timeout=5)
        if health.status_code == 200:
            break
        met += 1
        list_collections(base, key)
        exported(base, key)
        assert time.monotonic() < deadline, "not back within 15 s"
        time.sleep(0.05)
    assert met > 0
    deadline = time.monotonic() + 10  # the recovery line follows the first answer
    while "database answers again" not in err.read_bytes()[start:].decode():
        assert time.monotonic() < deadline, err.read_bytes()[start:].decode()
        time.sleep(0.1)
    time.sleep(1.5)  # anything late (the refusal log's next write) would show by now
    lines = err.read_bytes()[start:].decode().splitlines()
    assert "Traceback" not in "\n".join(lines), "\n".join(lines)
    # Each line is `time level logger: message` (tms.cli.logs); the outage is two warnings,
    # beside which the INFO lines say what came back (the embedded server, the commit feed).
    said = [line.split(" ", 2) for line in lines]
    logged = [words[2].split(": ", 1)[1] for words in said if words[1] != "INFO"]
    told = [words[2].split(": ", 1)[1] for words in said if words[1] == "INFO"]
    assert any(line.startswith("the embedded PostgreSQL in ") for line in told), told
    assert len(logged) == 2, lines
    assert logged[0].startswith("database unavailable, first noticed by ")
    assert logged[0].endswith("nothing more is logged about it until it answers again")
    assert re.fullmatch(
        r"database answers again, after \d+\.\d s unavailable \(\d+ failures met meanwhile\)",
        logged[1],
    ), logged[1]
    assert list_collections(base, key)["structuredContent"] == {"result": []}


def test_a_server_killed_with_sigkill_leaves_the_next_one_to_stop_postgres(
    served: tuple[subprocess.Popen[bytes], str, Path], tmp_path: Path
) -> None:
    """The killed server's id stayed in the wheel's list of PostgreSQL's users, so no later
    server saw itself as the last one out and PostgreSQL ran on for good. Its body-inspecting
    worker (started by a body over 1 MiB) and multiprocessing's resource tracker ran on too."""
    killed, base, data_dir = served
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[' + b"1," * 700_000 + b"1]}"
    answer = httpx.post(f"{base}/mcp", content=body, headers=HEADERS, timeout=60)
    assert answer.status_code == 400  # read by the worker, and refused
    helpers = psutil.Process(killed.pid).children()
    assert helpers, "no worker was started"
    killed.kill()
    killed.wait()
    _, alive = psutil.wait_procs(helpers, timeout=10)
    assert not alive, [p.cmdline() for p in alive]  # the worker and the resource tracker left
    first = postmaster(data_dir)
    assert first is not None  # PostgreSQL outlives a killed server, as it should
    second, _ = start_serving(data_dir, tmp_path / "err2")
    try:
        assert postmaster(data_dir) == first  # taken up, not started again
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    deadline = time.monotonic() + 10
    while postmaster(data_dir) is not None:
        assert time.monotonic() < deadline, "PostgreSQL was left running after the last server"
        time.sleep(0.1)
