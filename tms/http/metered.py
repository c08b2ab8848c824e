"""Every answer counted by door and outcome (`tms_requests_total`, tms.metrics), as plain ASGI
middleware outside everything else, so that it sees the status the client gets: the rate
limiter's 429s, the 503s of a database that is down, the bare 500s.

A door is where on the site a request went: `mcp`, `export` (and `/c/<slug>/others`, where it
places profiles and terms), `log` (the transparency log's key, checkpoints, proofs and tiles),
`relay` (a WebSocket handshake), `ops` (`/healthz`, `/metrics`),
`static`, and `pages` for the rest. A request whose client leaves before any answer is `gone`.
Paths are sorted into doors by their shape only, so whatever a client sends costs one label.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tms import errors
from tms.metrics import REQUESTS, outcome_of

_LOG: Final = re.compile(r"/c/[^/]+(/[^/]+)*/(checkpoint|consistency|tile/.*)")
# `others`: where the export places profiles and terms (`tms mirror` reads it each sync)
_EXPORT: Final = re.compile(r"/c/.+/(export\.jsonl|others)")


def door_of(scope: Scope) -> str:
    if scope["type"] == "websocket":
        return "relay"
    path: str = scope["path"]
    if path == "/mcp":
        return "mcp"
    if path in ("/healthz", "/metrics"):
        return "ops"
    if path.startswith("/static/"):
        return "static"
    if path == "/log-key" or _LOG.fullmatch(path):
        return "log"
    if _EXPORT.fullmatch(path):
        return "export"
    return "pages"


class Metered:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        outcome = "gone"

        async def counted(message: Message) -> None:
            nonlocal outcome
            kind = message["type"]
            if kind == "http.response.start" or kind == "websocket.http.response.start":
                outcome = outcome_of(message["status"])
            elif kind == "websocket.accept":
                outcome = "ok"
            elif kind == "websocket.close" and outcome == "gone":
                outcome = "refused"  # closed before it was accepted: a handshake turned down
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception as exc:
            # Answered outside this middleware, by Starlette's outermost one and the app's
            # handler for anything unforeseen (tms.app): a 503 or a bare 500.
            if outcome == "gone":
                outcome = (
                    "unavailable"
                    if errors.outcome_of(exc) is errors.Outcome.UNAVAILABLE
                    else "error"
                )
            raise
        finally:
            REQUESTS.labels(door_of(scope), outcome).inc()
