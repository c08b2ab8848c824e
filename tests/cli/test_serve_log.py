"""`tms serve`'s own log as an operator reads it (issue 34 item 2, issue 33 item 12): every line
in one format, with time, level and logger, TMS's and uvicorn's alike (text, or one JSON object
a line); `--log-level` over `TMS_LOG_LEVEL`; a start-up summary of what is enabled, said once; no
access log unless `TMS_ACCESS_LOG=on`, and then with the client a trusted proxy forwarded; the
plugins loaded once (a factory that registers a Prometheus metric of its own used to kill the
server with a traceback, loaded a second time); a port another process holds stops start-up in
one line before the database is touched."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from factories import LOG_SIGNER, TMS, environment, free_port, fresh_database

PLUGIN: Final = """
from pathlib import Path

from prometheus_client import Counter

from tms.extension import Plugin


def counted(environ):
    # Each call leaves a line: the server must make its plugins once.
    with open(Path(__file__).with_name("calls"), "a") as calls:
        calls.write("made\\n")
    Counter("tms_test_counted_calls", "a plugin's own metric, registered as it is made")
    return Plugin("counted")
"""
TEXT_LINE: Final = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [a-z_.]+: \S"
)


@pytest.fixture(scope="module")
def db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    with fresh_database(pg_server_url, template_url, "tms_serve_log") as database:
        yield database


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    info = folder / "tms_test_counted-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tms-test-counted\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tms.plugins]\ncounted = counted:counted\n")
    (folder / "counted.py").write_text(textwrap.dedent(PLUGIN))
    return folder


def serve(
    db_url: str, tmp_path: Path, *args: str, requests: int = 0, **values: str
) -> tuple[list[str], str]:
    """Run `tms serve` until /healthz answers, send `requests` GETs of /healthz from a client a
    trusted proxy forwards (203.0.113.9), stop it; its stderr lines and stdout."""
    port = free_port()
    env = environment(
        TMS_DATABASE_URL=db_url,
        TMS_DATA_DIR=str(tmp_path / "data"),
        TMS_EMBED="off",
        TMS_LOG_KEY=LOG_SIGNER.encode(),
        TMS_SECRET="serve-log-" * 4,
        **values,
    )
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        server = subprocess.Popen(
            [TMS, "serve", "--port", str(port), *args], env=env, stdout=out, stderr=err
        )
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=5) as http:
            while True:
                assert server.poll() is None, (tmp_path / "err").read_text()
                assert time.monotonic() < deadline, "no answer from /healthz within 60 s"
                try:
                    http.get(f"http://127.0.0.1:{port}/healthz")
                except httpx.TransportError:
                    time.sleep(0.1)
                    continue
                break
            for _ in range(requests):
                forwarded = {"X-Forwarded-For": "203.0.113.9"}
                assert http.get(f"http://127.0.0.1:{port}/healthz", headers=forwarded).is_success
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    return (tmp_path / "err").read_text().splitlines(), (tmp_path / "out").read_text()


def test_one_text_format_a_summary_once_no_access_log_and_plugins_made_once(
    db_url: str, tmp_path: Path, site: Path
) -> None:
    said, out = serve(db_url, tmp_path, requests=1, PYTHONPATH=str(site), TMS_PLUGINS="counted")
    assert out == ""
    assert said, "nothing logged"
    for line in said:
        assert TEXT_LINE.match(line), line
    messages = [line.split(": ", 1)[1] for line in said]
    assert [m for m in messages if m.startswith("enabled: ")] == [
        "enabled: plugins counted; no vector search (TMS_EMBED=off); no access log "
        "(TMS_ACCESS_LOG=off)"
    ]
    assert sum(m.startswith("serving on http://127.0.0.1:") for m in messages) == 1
    assert any(" INFO uvicorn.error: Application startup complete." in line for line in said)
    assert not any("GET /healthz" in line for line in said)  # no access log
    assert not any("back-fill" in line for line in said)  # nothing to back-fill: nothing said
    assert (site / "calls").read_text() == "made\n"  # the plugin's factory, called once


def test_json_lines_and_the_access_log_with_the_forwarded_client(
    db_url: str, tmp_path: Path
) -> None:
    """--log-level info over TMS_LOG_LEVEL=error: the INFO lines show."""
    said, _ = serve(
        db_url,
        tmp_path,
        "--log-level",
        "info",
        requests=2,
        TMS_LOG_FORMAT="json",
        TMS_ACCESS_LOG="on",
        TMS_TRUSTED_PROXIES="127.0.0.1",
        TMS_LOG_LEVEL="error",
    )
    entries: list[dict[str, Any]] = [json.loads(line) for line in said]
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= entry.keys(), entry
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    summary = [e["message"] for e in entries if e["message"].startswith("enabled: ")]
    assert summary == ["enabled: no plugins; no vector search (TMS_EMBED=off); access log"]
    access = [e for e in entries if e["logger"] == "uvicorn.access"]
    forwarded = [e for e in access if e["client"] == "203.0.113.9"]
    assert len(forwarded) == 2, access
    assert {(e["level"], e["method"], e["path"], e["status"]) for e in forwarded} == {
        ("INFO", "GET", "/healthz", 200)
    }
    assert '203.0.113.9 - "GET /healthz HTTP/1.1" 200' in forwarded[0]["message"]


def test_the_level_flag_leaves_out_what_is_below_it(db_url: str, tmp_path: Path) -> None:
    """--log-level warning: the start-up's INFO lines are gone, its warning stays (no
    TMS_BASE_URL on an address beyond this machine)."""
    said, _ = serve(db_url, tmp_path, "--log-level", "warning", "--host", "0.0.0.0")
    assert said and all(" WARNING " in line or " ERROR " in line for line in said), said
    assert any("TMS_BASE_URL is not set" in line for line in said)


def test_a_taken_port_is_one_line_before_the_database(tmp_path: Path) -> None:
    """The listener is bound before anything else: a port another process holds stops
    `tms serve` in one line, and no database is made (nor migrated, nor back-filled)."""
    data = tmp_path / "never-made"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [TMS, "serve", "--port", str(port)],
            env=environment(TMS_DATA_DIR=str(data), TMS_EMBED="off"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"tms: TMS_PORT/--port: cannot listen on 127.0.0.1 port {port}: Address already in use"
    ]
    assert not data.exists()
