"""`tms serve`'s own settings as an operator meets them: `--host` is `TMS_HOST` for everything
(the log's origin too), the metrics port is named in the start log, and a metrics port that is
taken, or is the public port, is one line and exit 1 rather than a traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from factories import LOG_SIGNER, TMS, environment, free_port, fresh_database


@pytest.fixture(scope="module")
def db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    with fresh_database(pg_server_url, template_url, "tms_serve") as database:
        yield database


def _env(database: str, **values: str) -> dict[str, str]:
    return environment(
        TMS_DATABASE_URL=database,
        TMS_EMBED="off",
        TMS_LOG_KEY=LOG_SIGNER.encode(),
        TMS_SECRET="serve-" * 8,
        **values,
    )


def test_host_flag_and_tms_host_are_one_setting_and_the_metrics_port_is_named(
    db_url: str, tmp_path: Path
) -> None:
    """TMS_HOST says one host, --host another: the server listens on --host, and the log's
    origin (shown in /docs) names it too, not TMS_HOST. The start log names the metrics port."""
    port, metrics = free_port(), free_port()
    env = _env(db_url, TMS_HOST="localhost", TMS_METRICS_PORT=str(metrics))
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        server = subprocess.Popen(
            [TMS, "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=err,
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
            guide = http.get(f"http://127.0.0.1:{port}/docs.md").text
            assert "127.0.0.1/c/mcas" in guide and "localhost/c/mcas" not in guide
            assert http.get(f"http://127.0.0.1:{metrics}/metrics").status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    said = (tmp_path / "err").read_text()
    assert f" INFO tms.serve: serving on http://127.0.0.1:{port}\n" in said
    assert f"; metrics on http://127.0.0.1:{metrics}/metrics;" in said


def _serve(database: str, *args: str, **values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TMS, "serve", *args],
        env=_env(database, **values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_taken_metrics_port_is_one_line(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = taken.getsockname()[1]
        result = _serve(db_url, "--port", str(free_port()), TMS_METRICS_PORT=str(metrics))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"tms: TMS_METRICS_PORT: cannot listen on 127.0.0.1 port {metrics}: Address already in use"
    ]


def test_a_metrics_port_equal_to_the_public_port_is_one_line(db_url: str) -> None:
    """TMS_PORT is checked against it when the settings are read; --port too."""
    port = free_port()
    for args, values in (
        (["--port", str(port)], {"TMS_METRICS_PORT": str(port)}),
        ([], {"TMS_PORT": str(port), "TMS_METRICS_PORT": str(port)}),
    ):
        result = _serve(db_url, *args, **values)
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("tms: TMS_METRICS_PORT must not be ")
        assert f"({port}): metrics are private" in line
