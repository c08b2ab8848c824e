"""A real HTTP(S) server on 127.0.0.1 for the fetch tests: routes, and a record of each reply.

Each route is a function of the request handler that writes a complete response. Routes that
stream record how many body bytes they managed to send and whether the client hung up first,
so tests can prove the fetcher stopped reading early. `close()` stops every handler thread
(trickling ones included) and closes every socket: nothing leaks into other tests.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[["Handler"], None]


@dataclass
class Sent:
    """What a streaming route managed to send before it finished or the client hung up."""

    body_bytes: int = 0
    hung_up: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        route = self.server.site.routes.get(self.path.split("?", 1)[0])
        self.server.site.requests.append(self.path)
        if route is None:
            self.reply(404, b"not here", "text/plain")
        else:
            route(self)
        self.close_connection = True

    def reply(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        headers: Iterable[tuple[str, str]] = (),
        *,
        length: bool = True,
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def stream(
        self,
        chunks: Iterable[bytes],
        content_type: str,
        headers: Iterable[tuple[str, str]] = (),
        *,
        pause: float = 0.0,
    ) -> None:
        """Send the chunks one by one (connection-delimited unless headers say otherwise).

        What was sent is recorded in `site.sent[path]`; a small send buffer keeps the bytes
        the kernel holds for a client that stopped reading to a few hundred kilobytes.
        """
        sent = self.server.site.sent[self.path] = Sent()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in chunks:
                if self.server.site.stopping.is_set():
                    break
                self.wfile.write(chunk)
                sent.body_bytes += len(chunk)
                if pause:
                    time.sleep(pause)
        except OSError:  # BrokenPipeError, ConnectionResetError: the fetcher hung up
            sent.hung_up = True
        finally:
            sent.done.set()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    site: Site

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-reply is what several tests do on purpose


class Site:
    """Start with `with Site(routes) as site:`; `site.url(path)`, `site.allow` for the fetcher."""

    def __init__(self, routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> None:
        self.routes = routes
        self.requests: list[str] = []
        self.sent: dict[str, Sent] = {}
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.site = self
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}
        )

    def __enter__(self) -> Site:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()

    @property
    def allow(self) -> str:
        """The TMS_FETCH_ALLOW value that exempts this server."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"
