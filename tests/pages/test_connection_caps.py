"""Slow uploads cannot lock anyone out (`tms.http.protocol`), on a real uvicorn over the real app:
one address holds at most its share of connections, a body must keep up a minimum rate after
its first seconds, and at the connection limit the slowest upload, then the address holding the
most, give way to a new client. `/healthz` answers throughout.

Clients at 127.0.0.2, 127.0.0.3... are distinct addresses on Linux's loopback (the whole of
127.0.0.0/8 is local); the server listens on 127.0.0.1, and a prober there asks `/healthz`
every 50 ms for as long as an attack lasts."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from factories import fresh_database, live_server

from tms.http.protocol import ConnectionLimits

UPLOAD_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Accept: application/json\r\nContent-Length: 10000000\r\n\r\n{"
)


@pytest.fixture(scope="module")
def database(pg_server_url: str, template_url: str) -> Iterator[str]:
    with fresh_database(pg_server_url, template_url) as url:
        yield url


@contextlib.contextmanager
def serving(database: str, limits: ConnectionLimits) -> Iterator[int]:
    with live_server(database, limits=limits) as live:
        yield int(live.url.rsplit(":", 1)[1])


def upload(port: int, source: str) -> socket.socket | None:
    """A connection from `source` that sent an upload's head and the first byte of its body;
    None if the server closed it at once (refused)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    try:
        s.sendall(UPLOAD_HEAD)
    except OSError:
        s.close()
        return None
    return s


def is_open(s: socket.socket) -> bool:
    """Whether the server still holds `s` (nothing to read and not closed)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def still_open(sockets: list[socket.socket], settle: float = 0.3) -> list[socket.socket]:
    time.sleep(settle)  # a close the server just made reaches the socket
    return [s for s in sockets if is_open(s)]


def open_once_settled(sockets: list[socket.socket], expected: int) -> list[socket.socket]:
    """The sockets still open once `expected` are (or after 10 s): the server accepts a burst
    of connections, and refuses the extra ones, as fast as a busy machine lets it."""
    deadline = time.monotonic() + 10
    while len(held := [s for s in sockets if is_open(s)]) > expected:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return still_open(held)


@dataclass
class Prober:
    """`/healthz` from 127.0.0.1 every 50 ms, in a thread, while the block runs."""

    port: int
    answers: list[int | str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:  # a fresh connection each time, as a monitor opens one
                status: int | str = httpx.get(
                    f"http://127.0.0.1:{self.port}/healthz", timeout=5
                ).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            self.answers.append(status)
            time.sleep(0.05)

    @contextlib.contextmanager
    def running(self) -> Iterator[Prober]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(10)


def closing(sockets: list[socket.socket | None]) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for s in sockets:
        if s is not None:
            stack.callback(s.close)
    return stack


def test_many_slow_uploads_from_one_address_cannot_stop_another_from_being_served(
    database: str,
) -> None:
    """Sixty uploads from one address, more than the server's whole connection limit: before,
    each counted as busy and was never evicted, so every other client was refused until the
    body deadline. Now the address gets its ten; the rest are refused, and everyone else is
    served."""
    limits = ConnectionLimits(max_connections=40, per_address=10, body_min_rate=0)
    with serving(database, limits) as port, Prober(port).running() as prober:
        flood = [upload(port, "127.0.0.2") for _ in range(60)]
        with closing(flood):
            held = open_once_settled([s for s in flood if s is not None], 10)
            assert len(held) == 10
            for source in ("127.0.0.3", "127.0.0.4"):
                with httpx.Client(
                    transport=httpx.HTTPTransport(local_address=source), timeout=5
                ) as http:
                    assert http.get(f"http://127.0.0.1:{port}/terms").status_code == 200
                    assert http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            time.sleep(0.3)
    assert prober.answers and set(prober.answers) == {200}, prober.answers


def test_at_the_connection_limit_the_slowest_upload_gives_way(database: str) -> None:
    """Thirty uploads from three addresses fill the server; all but one keep sending. A new
    client closes the one that stalled, the slowest, and is served; the others carry on."""
    limits = ConnectionLimits(max_connections=30, per_address=10, body_min_rate=0, rate_seconds=0.5)
    with serving(database, limits) as port:
        uploads = [upload(port, f"127.0.0.{2 + n // 10}") for n in range(30)]
        with closing(list(uploads)):
            assert all(s is not None for s in uploads)
            # Neither the oldest nor at the first address: the slowest is who gives way.
            stalled = uploads.pop(15)
            assert stalled is not None
            steady = [s for s in uploads if s is not None]
            stop = threading.Event()

            def keep_sending() -> None:  # 1,000 bytes a second each
                while not stop.is_set():
                    for s in steady:
                        with contextlib.suppress(OSError):
                            s.send(b" " * 100)
                    time.sleep(0.1)

            sender = threading.Thread(target=keep_sending, daemon=True)
            sender.start()
            try:
                time.sleep(1.0)  # past their first window: every upload is judged by its rate
                source = httpx.HTTPTransport(local_address="127.0.0.9")
                with httpx.Client(transport=source, timeout=5) as http:
                    assert http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
                assert not is_open(stalled)
                assert len(still_open(steady)) == len(steady)
            finally:
                stop.set()
                sender.join(5)


def test_at_the_connection_limit_the_address_holding_the_most_gives_way(
    database: str,
) -> None:
    """Uploads too young to be judged by their rate fill the server, twenty from one address and
    ten from another: a new client closes the oldest of the twenty."""
    limits = ConnectionLimits(max_connections=30, per_address=25, body_min_rate=0, rate_seconds=60)
    with serving(database, limits) as port:
        crowd = [upload(port, "127.0.0.2") for _ in range(20)]
        few = [upload(port, "127.0.0.3") for _ in range(10)]
        with closing(crowd + few):
            assert all(s is not None for s in crowd + few)
            source = httpx.HTTPTransport(local_address="127.0.0.4")
            with httpx.Client(transport=source, timeout=5) as http:
                assert http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            assert [is_open(s) for s in crowd if s is not None] == [False] + [True] * 19
            assert len(still_open([s for s in few if s is not None])) == 10


def test_a_body_slower_than_the_minimum_rate_is_cut_off_and_a_steady_one_is_not(
    database: str,
) -> None:
    limits = ConnectionLimits(body_min_rate=1000, rate_seconds=0.5, body_seconds=30)
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"' + b"a" * 2900 + b'"}'
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    with serving(database, limits) as port:
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        steady = socket.create_connection(("127.0.0.1", port), timeout=10)
        with slow, steady:
            slow.sendall(head)
            steady.sendall(head)
            started = time.monotonic()
            sent = 0
            while sent < len(body):  # 300 bytes every 0.1 s: 3,000 a second, for a second
                piece = body[sent : sent + 300]
                steady.sendall(piece)
                if is_open(slow):
                    slow.sendall(b"a" * 10)  # 100 bytes a second
                sent += len(piece)
                time.sleep(0.1)
            answer = steady.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            deadline = started + 5
            while is_open(slow):
                assert time.monotonic() < deadline, "the slow body was not cut off"
                time.sleep(0.05)
            assert time.monotonic() - started >= limits.rate_seconds - 0.1


def health_on(s: socket.socket) -> bytes:
    """`GET /healthz` on an open connection, kept alive: the status line."""
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(65536)
        assert chunk, f"closed after {answer!r}"
        answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(65536)
    return head.split(b"\r\n", 1)[0]


def test_a_crowd_at_the_limit_churns_its_own_connections_not_anothers_idle_one(
    database: str,
) -> None:
    """A client between two requests on a kept-alive connection is idle, the first to go when
    any idle connection went first. At the limit, the crowd's next connection is refused (it
    has nothing of its own to give up), and the client's connection carries its next request."""
    limits = ConnectionLimits(max_connections=30, per_address=30, body_min_rate=0, rate_seconds=60)
    with serving(database, limits) as port:
        client = socket.create_connection(
            ("127.0.0.1", port), timeout=10, source_address=("127.0.0.5", 0)
        )
        with client:
            assert health_on(client) == b"HTTP/1.1 200 OK"
            crowd = [upload(port, "127.0.0.2") for _ in range(29)]
            with closing(crowd):
                assert all(s is not None for s in crowd)
                extra = upload(port, "127.0.0.2")  # one more: the limit is reached
                with closing([extra]):
                    assert extra is None or not open_once_settled([extra], 0)
                assert len(still_open([s for s in crowd if s is not None])) == 29
                assert health_on(client) == b"HTTP/1.1 200 OK"
