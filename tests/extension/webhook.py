"""A webhook for the notify plugin's tests: an HTTP server on 127.0.0.1, in a thread of its
own, that records the JSON bodies POSTed to it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """An HTTP server on 127.0.0.1 that records the JSON bodies POSTed to it, answering with
    `status` after `delay` seconds."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.status = 204
        self.delay = 0.0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                time.sleep(hook.delay)
                hook.bodies.append(
                    {"path": self.path, "type": self.headers["Content-Type"], **body}
                )
                self.send_response(hook.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    async def received(self, count: int) -> list[Any]:
        deadline = time.monotonic() + 10
        while len(self.bodies) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.bodies


@contextmanager
def running() -> Iterator[Webhook]:
    hook = Webhook()
    thread = threading.Thread(target=hook.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.server.shutdown()
        hook.server.server_close()
        thread.join(5)
