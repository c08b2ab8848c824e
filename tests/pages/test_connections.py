"""Connections that crawl are closed, and a flood of them cannot lock anyone out: the limits of
`tms.http.protocol`, on a real uvicorn over the real app, with short limits for the test."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from factories import fresh_database, live_server

from tms.http.protocol import MAX_HEAD_BYTES, ConnectionLimits

LIMITS = ConnectionLimits(head_seconds=1.0, body_seconds=1.5, max_connections=20)


@pytest.fixture(scope="module")
def port(pg_server_url: str, template_url: str) -> Iterator[int]:
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, limits=LIMITS) as live,
    ):
        yield int(live.url.rsplit(":", 1)[1])


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes `sock` (reading and discarding what it sends)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    while True:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except ConnectionResetError:
            return time.monotonic() - start


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port))


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with connect(port) as s:
        # Closed by the server, at its deadline (not sooner); waited for generously, so that a
        # busy machine cannot fail the test.
        assert closed_within(s, 30) >= LIMITS.head_seconds - 0.1


def test_a_head_sent_a_byte_at_a_time_is_cut_off(port: int) -> None:
    with connect(port) as s:
        start = time.monotonic()
        with pytest.raises(OSError):  # cut off before the head (6 s at this pace) is whole
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                s.sendall(bytes([byte]))
                time.sleep(0.05)
        assert time.monotonic() - start >= LIMITS.head_seconds - 0.1


def test_a_body_sent_too_slowly_is_cut_off(port: int) -> None:
    with connect(port) as s:
        s.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Accept: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        assert closed_within(s, 30) >= LIMITS.body_seconds - 0.1


def test_a_head_too_large_is_cut_off(port: int) -> None:
    with connect(port) as s:
        with contextlib.suppress(OSError):  # the server may close before the last byte
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for _ in range(MAX_HEAD_BYTES // 1000 + 10):
                s.sendall(b"X-Padding: " + b"a" * 1000 + b"\r\n")
        assert closed_within(s, 5) < 1


def test_a_keep_alive_connection_is_served_then_closed_when_idle(port: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/healthz").status_code == 200  # the same connection, again


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One response from `sock`: its status line and its body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return head.split(b"\r\n", 1)[0], body


def test_a_request_answered_before_its_body_ends_leaves_the_connection_usable(port: int) -> None:
    """/logout reads 64 KiB and answers 413; the rest of a 4 MB body arrives after that answer.
    It is still that request's body, not the next request's head (which has a limit of its own),
    so the same connection then serves the next request."""
    body = b"x" * (4 * 1024 * 1024)
    with connect(port) as s:
        s.settimeout(30)
        s.sendall(
            b"POST /logout HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status, _ = read_response(s)
        assert status.startswith(b"HTTP/1.1 413"), status
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, answer = read_response(s)
        assert status.startswith(b"HTTP/1.1 200"), (status, answer)


def test_a_flood_of_slow_connections_cannot_lock_out_health_checks(port: int) -> None:
    """Twice the cap in half-sent heads: each new connection evicts the oldest idle one, so
    /healthz still answers at once, and the server holds no more than the cap."""
    flood = []
    try:
        for _ in range(LIMITS.max_connections * 2):
            s = connect(port)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            flood.append(s)
        start = time.monotonic()
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status_code == 200
        assert time.monotonic() - start < 1
        open_ones = 0
        for s in flood:
            s.setblocking(False)
            try:
                open_ones += (s.recv(1) == b"" and 0) or 0
            except BlockingIOError:
                open_ones += 1  # nothing to read, not closed: still held
            except OSError:
                pass
        assert open_ones <= LIMITS.max_connections
    finally:
        for s in flood:
            s.close()


def test_two_hundred_slowloris_clients_leave_health_checks_answering(
    pg_server_url: str, template_url: str
) -> None:
    """A hundred heads and a hundred bodies, each dribbled a byte at a time: /healthz answers
    throughout, and every one of them is cut off at its deadline (the caps are not reached, so
    nothing here is evicted: the deadlines alone do it)."""
    limits = ConnectionLimits(
        head_seconds=2.0, body_seconds=2.0, max_connections=1000, per_address=1000
    )
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, limits=limits) as live,
    ):
        port = int(live.url.rsplit(":", 1)[1])
        slow = []
        for n in range(200):
            s = connect(port)
            if n % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            else:
                s.sendall(
                    b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Accept: application/json\r\nContent-Length: 100000\r\n\r\n{"
                )
            slow.append(s)
        stop = threading.Event()

        def dribble() -> None:
            while not stop.is_set():
                for s in slow:
                    with contextlib.suppress(OSError):
                        s.send(b"a")
                time.sleep(0.2)

        dribbler = threading.Thread(target=dribble, daemon=True)
        dribbler.start()
        try:
            with httpx.Client(timeout=10) as http:
                for _ in range(10):
                    assert http.get(f"{live.url}/healthz").status_code == 200
                    time.sleep(0.1)
            deadline = time.monotonic() + 15
            for s in slow:  # each is closed by the server, whatever it keeps sending
                assert closed_within(s, max(deadline - time.monotonic(), 0.1)) is not None
        finally:
            stop.set()
            dribbler.join(5)
            for s in slow:
                s.close()
