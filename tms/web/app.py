"""The HTTP front door: a Starlette app over the ledger service, assembled here from its
route groups, with the one table that turns whatever a handler raises into its answer.

Routes (each group's table is its module's `ROUTES`):

    tms.web.scrape      GET /metrics: Prometheus' text format, with `Authorization: Bearer
                        $TMS_METRICS_TOKEN` only (tms.metrics); a 404 without a token
    tms.web.api         GET /healthz, /terms, /log-key; GET /c/<slug>/export.jsonl (members:
                        NIP-98 or the login cookie; `?checkpoint=1` ends with the log's
                        checkpoint line), /c/<slug>/checkpoint, /c/<slug>/consistency,
                        /c/<slug>/tile/<path>; POST /mcp (tms.mcp)
    tms.web.home        GET / (Connect; once logged in, home), GET /login/challenge,
                        POST /login, POST /logout, GET /collections/check (is a slug free?)
    tms.web.collection  GET /c/<slug> (claims, search, evidence), /c/<slug>/members and
                        /c/<slug>/members.json (the owner's member list editor and its head)
    tms.web.reading     GET /c/<slug>/claims/<id>, /c/<slug>/evidence/<id>,
                        /c/<slug>/claims.json (the "Contradicts…" picker)
    tms.web.submit      GET /submit; POST /publish, /fetch, /c/<slug>/lookup, /quotes/nearest;
                        GET /quotes/normalization.json
    tms.web.dashboard   GET /dashboard
    tms.web.docs        GET /docs, /docs.md: the user guide, for this server
    tms.relay           WS / and /c/<slug> (NIP-01, 42, 45, 50); a GET of either with
                        `Accept: application/nostr+json` is its NIP-11 document
                        GET /static/...: the stylesheet and the pages' scripts

Handlers raise; `tms.web.answers` answers (see `create_app`'s table): a page for a page (one
404 page for whatever is missing or closed to the key), `{"error": "..."}` for everything else,
401 with `WWW-Authenticate: Nostr` when credentials do not hold up, 503 when the database is
down, and a bare 500 (logged, never a traceback on the wire) for anything unforeseen.

Every answer is counted by door and outcome (`tms.http.metered`, outermost). Every response
carries the security headers of `tms.web.security` (a Content-Security-Policy
without inline script, whose only outside origins are the profile relays).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Mount, WebSocketRoute
from starlette.staticfiles import StaticFiles

from tms.config import Settings, load_secret
from tms.errors import TMSError
from tms.http.bodies import BodyError, Disconnected, MiB
from tms.http.gate import Gate
from tms.http.login import Keyring
from tms.http.metered import Metered
from tms.mcp.http import McpFront
from tms.relay.endpoint import relay_socket
from tms.relay.shared import open_relay
from tms.runtime import Runtime, open_runtime
from tms.store.database import DATABASE_DOWN
from tms.web import answers, api, collection, dashboard, docs, home, reading, scrape, submit
from tms.web.door import Door, NeedsLogin
from tms.web.render import STATIC_DIR, Renderer
from tms.web.security import SecurityHeaders
from tms.witness import routes as witness_routes

log = logging.getLogger("tms.web.app")

ROUTES: Final[list[BaseRoute]] = [
    *api.ROUTES,
    *scrape.ROUTES,
    *home.ROUTES,
    *submit.ROUTES,
    *dashboard.ROUTES,
    *docs.ROUTES,
    *collection.ROUTES,
    *reading.ROUTES,
    *witness_routes.ROUTES,
    Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    # the relay: a WebSocket upgrade on the root or a collection's page (tms.relay)
    WebSocketRoute("/", relay_socket),
    WebSocketRoute("/c/{slug}", relay_socket),
    # ... and with a trailing slash, as some clients name every relay (NDK's URL normalizer
    # adds one): the same relay, and its NIP-42 URL the same once normalized
    WebSocketRoute("/c/{slug}/", relay_socket),
]

# What a handler raises, and who answers it (the nearest class in an exception's ancestry).
EXCEPTION_HANDLERS: Final = {
    TMSError: answers.refused,  # every refusal: its status by its class, noted in the log
    BodyError: answers.unreadable_body,
    Disconnected: answers.unreadable_body,
    NeedsLogin: answers.to_connect,
    HTTPException: answers.http_error,
    **dict.fromkeys(DATABASE_DOWN, answers.database_down),
    Exception: answers.internal_error,
}


async def _serve_mcp(runtime: Runtime, front: McpFront, stop: asyncio.Event) -> None:
    """Build the MCP server and run its session manager until `stop`."""
    server = await asyncio.to_thread(importlib.import_module, "tms.mcp.server")
    endpoint, manager = server.http_endpoint(server.build_server(runtime.tools()))
    async with manager.run():
        front.serve(endpoint)
        await stop.wait()


def create_app(settings: Settings | None = None, *, database_url: str | None = None) -> Starlette:
    """The app. The database is `database_url` when given, else the one `settings` name (the
    embedded server in `TMS_DATA_DIR` unless `TMS_DATABASE_URL` is set); the pools, the model
    and the MCP session manager live as long as the app's lifespan."""
    settings = Settings.from_env() if settings is None else settings
    secret, chosen = load_secret(settings)
    if chosen is not None:
        log.warning("%s", chosen)
    door = Door(
        Renderer(),
        Keyring(secret),
        base_url=settings.base_url,
        profile_relays=settings.profile_relays,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with (
            open_runtime(settings, database_url) as runtime,
            open_relay(
                runtime.services,
                runtime.database_url,
                settings.relay_memory_mb * MiB,
                settings.relay_behind_seconds,
                connections=settings.relay_connections,
                statement_seconds=settings.relay_statement_seconds,
            ) as relay,
            scrape.metrics_port(settings, runtime),
        ):
            front = McpFront(runtime.services.refusals)
            app.state.runtime = runtime
            app.state.relay = relay
            app.state.mcp = front
            # The MCP SDK loads after the server is up (it takes a good part of a second): /mcp
            # requests that come sooner wait for it, /healthz and the rest answer at once.
            stop = asyncio.Event()
            mcp = asyncio.create_task(_serve_mcp(runtime, front, stop), name="tms-mcp")
            try:
                yield
            finally:
                stop.set()
                await asyncio.gather(mcp, return_exceptions=True)
                await front.close()
                await door.close()

    app = Starlette(routes=ROUTES, lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    app.state.settings = settings
    app.state.door = door
    app.add_middleware(Gate, trusted_proxies=settings.trusted_proxies)
    app.add_middleware(  # every answer
        SecurityHeaders, relays=settings.profile_relays, base_url=settings.base_url
    )
    app.add_middleware(Metered)  # outermost: counts what the client gets
    return app
