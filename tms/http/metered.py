"""Every answer counted by door and outcome (`tms_requests_total`, tms.metrics), as plain ASGI
middleware outside everything else, so that it sees the status the client gets: the rate
limiter's 429s, the 503s of a database that is down, the bare 500s.

A door is where on the site a request went: `mcp`, `export` (and `/c/<slug>/others`, where it
places profiles and terms), `log` (the transparency log's key, checkpoints, proofs and tiles),
`relay` (a WebSocket handshake), `ops` (`/healthz`, `/metrics`),
`static`, and `pages` for the rest. A request whose client leaves before any answer is `gone`.
The door is the route table's (`tms.http.routes`), for the route that answers the request, so
whatever a client sends costs one label.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tms.errors import Outcome, outcome_of
from tms.http.routes import routed
from tms.metrics import REQUESTS, answered


def door_of(scope: Scope) -> str:
    """The door a request is counted under: its route's in the route table
    (`tms.http.routes.routed`); `pages` for an HTTP path no route answers, `relay` for such a
    WebSocket."""
    return routed(scope).door


class Metered:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        outcome = Outcome.GONE

        async def counted(message: Message) -> None:
            nonlocal outcome
            kind = message["type"]
            if kind == "http.response.start" or kind == "websocket.http.response.start":
                outcome = answered(message["status"])
            elif kind == "websocket.accept":
                outcome = Outcome.OK
            elif kind == "websocket.close" and outcome is Outcome.GONE:
                outcome = Outcome.REFUSED  # closed before it was accepted: a handshake turned down
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception as exc:
            # Answered outside this middleware, by Starlette's outermost one and the app's
            # handler for anything unforeseen (tms.app): a 503 or a bare 500.
            if outcome is Outcome.GONE:
                unavailable = outcome_of(exc) is Outcome.UNAVAILABLE
                outcome = Outcome.UNAVAILABLE if unavailable else Outcome.INTERNAL
            raise
        finally:
            REQUESTS.labels(door_of(scope), outcome).inc()
