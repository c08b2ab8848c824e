"""The application, assembled beside the doors rather than inside any of them: the running
service (`tms.runtime`), the relay's shared state (`tms.relay.shared`), the MCP server over
`/mcp` (`tms.mcp`), the pages (`tms.pages`), the HTTP API (`tms.api`), the witness
(`tms.witness`), and the one HTTP route table every door serves, with the handlers that
answer whatever a route raises.

The core's registries are values here or beside their door: the route table (`ROUTES`,
`tms.http.routes.RouteTable`), the MCP tools (`tms.mcp.tools.TOOLS`) and the MCP prompts
(`tms.mcp.prompts.PROMPTS`). `create_app` serves copies of them to which the enabled plugins'
routes, tools and prompts are added (`tms.plugins.loading.Extensions`), each failing start-up
loudly on a name or route taken twice (`tms.registry.Collision`, naming both sides). The plugins'
routes come last, under `/plugins/<name>/`; their hooks' workers and strfry command run for the
app's lifespan.

The route table (`ROUTES`) is docs/architecture.md's, in the order Starlette tries it: every
route by its own name, which the gate, the metrics and the refusal log use, and the door it is
counted under (`tms.http.routes`); a test holds the two equal. Each group is its module's.

Handlers raise; `tms.pages.answers` answers (`EXCEPTION_HANDLERS`), each failure classified once
(`tms.errors.outcome_of`) and given its status by the HTTP doors' one table
(`tms.http.statuses`): a page for a page (one 404 page for whatever is missing or closed to the
key), `{"error": "..."}` for everything else, 401 with `WWW-Authenticate: Nostr` when
credentials do not hold up, 503 when the database is down, and a bare 500 (logged, never a
traceback on the wire) for anything unforeseen.

Every answer is counted by door and outcome (`tms.http.metered`, outermost). Every response
carries the security headers of `tms.pages.security` (a Content-Security-Policy without inline
script, whose only outside origins are the profile relays).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from tms.api import annotations as api_annotations
from tms.api import routes as api
from tms.api import scrape
from tms.config import Settings, load_relay_key, load_secret
from tms.errors import DatabaseUnavailable, TMSError, is_database_down, one_line
from tms.guard.blocked import Blocklist
from tms.guard.rates import ADD_CHECKPOINT_UNITS
from tms.http.bodies import BigBodies, Disconnected, MiB
from tms.http.gate import Gate
from tms.http.login import Keyring
from tms.http.metered import Metered
from tms.http.routes import RouteTable
from tms.ledger import REFRESH_SECONDS, Operated
from tms.mcp import http as mcp_http
from tms.mcp.http import McpFront
from tms.pages import answers, collection, dashboard, docs, home, reading, submit
from tms.pages.door import Door, NeedsLogin
from tms.pages.render import STATIC_DIR, Renderer
from tms.pages.security import SecurityHeaders
from tms.plugins.loading import Extensions, load_extensions
from tms.relay import endpoint as relay_endpoint
from tms.relay.shared import open_relay
from tms.runtime import Runtime, open_runtime
from tms.witness import routes as witness_routes

log = logging.getLogger("tms.app")

# What a request spends of its address's budget before it is read, where it is not one unit:
# a monitor and the pages' files always get through; a witness's add-checkpoint, which anyone
# may post, costs more (`tms.http.gate`).
UNITS: Final = {"health": 0, "static": 0, witness_routes.ADD_CHECKPOINT: ADD_CHECKPOINT_UNITS}

ROUTES: Final = RouteTable()
for _door, _group in (
    ("ops", api.HEALTH),
    ("pages", api.TERMS),
    ("export", api.EXPORT),
    ("export", api_annotations.ROUTES),
    ("log", api.LOG),
    ("mcp", mcp_http.ROUTES),
    ("ops", scrape.ROUTES),
    ("pages", home.ROUTES),
    ("pages", submit.ROUTES),
    ("pages", dashboard.ROUTES),
    ("pages", docs.ROUTES),
    ("pages", collection.ROUTES),
    ("pages", reading.ROUTES),
    ("pages", witness_routes.ROUTES),
    ("static", [Mount("/static", StaticFiles(directory=STATIC_DIR), name="static")]),
    ("relay", relay_endpoint.ROUTES),
):
    ROUTES.extend(_group, door=_door, units=UNITS, answers_before=api.ANSWERS_BEFORE)

# Every failure goes to `answers.failed`, which classifies it once (`tms.errors.outcome_of`);
# a database that cannot be used (the store's typed error) is named so that it is answered
# where it is caught (a handler for `Exception` runs outermost, and Starlette re-raises after
# it: a traceback in the log for every request an outage met).
EXCEPTION_HANDLERS: Final = {
    TMSError: answers.failed,  # every refusal, a body that cannot be read included
    Disconnected: answers.hung_up,
    NeedsLogin: answers.to_connect,
    HTTPException: answers.http_error,
    DatabaseUnavailable: answers.failed,
    Exception: answers.failed,
}


async def _serve_mcp(
    runtime: Runtime, extensions: Extensions, front: McpFront, stop: asyncio.Event
) -> None:
    """Build the MCP server and run its session manager until `stop`. Should it fail to be
    built, `/mcp` answers 503 saying so in one line, and the log holds the traceback."""
    try:
        server = await asyncio.to_thread(importlib.import_module, "tms.mcp.server")
        built = server.build_server(runtime.tools(), extensions.prompts_served)
    except Exception as exc:
        log.exception("the MCP server could not be built")
        front.failed(one_line(exc, 200))
        raise
    endpoint, manager = server.http_endpoint(built)
    async with manager.run():
        front.serve(endpoint)
        await stop.wait()


def create_app(
    settings: Settings | None = None,
    *,
    database_url: str | None = None,
    extensions: Extensions | None = None,
) -> Starlette:
    """The app. The database is `database_url` when given, else the one `settings` name (the
    embedded server in `TMS_DATA_DIR` unless `TMS_DATABASE_URL` is set); the pools, the model,
    the MCP session manager and the plugins' workers live as long as the app's lifespan.
    `extensions`: the enabled plugins, loaded (else those `settings` names, loaded here with the
    process's environment); a route of theirs taken twice raises `Collision` here."""
    settings = Settings.from_env() if settings is None else settings
    extensions = load_extensions(settings) if extensions is None else extensions
    routes = extensions.route_table(ROUTES)
    secret, chosen = load_secret(settings)
    if chosen is not None:
        log.warning("%s", chosen)
    relay_key, chosen = load_relay_key(settings)
    if chosen is not None:
        log.warning("%s", chosen)
    big_bodies = BigBodies()  # one budget for the big bodies of every door (`tms.http.bodies`)
    door = Door(
        Renderer(),
        Keyring(secret),
        base_url=settings.base_url,
        profile_relays=settings.profile_relays,
        big_bodies=big_bodies,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with (
            extensions.running(),
            open_runtime(settings, database_url, extensions=extensions) as runtime,
            open_relay(
                runtime.services,
                runtime.database_url,
                settings.relay_memory_mb * MiB,
                settings.relay_behind_seconds,
                connections=settings.relay_connections,
                statement_seconds=settings.relay_statement_seconds,
                neg_warm=settings.neg_warm,
                key=relay_key,
            ) as relay,
            scrape.metrics_port(settings, runtime),
        ):
            front = McpFront(runtime.services.refusals, big_bodies)
            app.state.operated = Operated(runtime.ledger.pool)
            await _refresh_operated(app)
            app.state.runtime = runtime
            app.state.relay = relay
            app.state.mcp = front
            # The MCP SDK loads after the server is up (it takes a good part of a second): /mcp
            # requests that come sooner wait for it, /healthz and the rest answer at once.
            stop = asyncio.Event()
            mcp = asyncio.create_task(_serve_mcp(runtime, extensions, front, stop), name="tms-mcp")
            operated = asyncio.create_task(_keep_operated(app, stop), name="tms-operated")
            try:
                yield
            finally:
                stop.set()
                await asyncio.gather(mcp, operated, return_exceptions=True)
                await front.close()
                await door.close()

    app = Starlette(routes=list(routes), lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    app.state.routes = routes  # what the gate, the metrics and the refusal log know of each
    app.state.settings = settings
    app.state.door = door
    app.state.big_bodies = big_bodies
    app.state.blocklist = Blocklist()  # NIP-86 `blockip` (`tms.relay.operator`), at the gate
    app.add_middleware(Gate, trusted_proxies=settings.trusted_proxies)
    app.add_middleware(  # every answer
        SecurityHeaders, relays=settings.profile_relays, base_url=settings.base_url
    )
    app.add_middleware(Metered)  # outermost: counts what the client gets
    return app


async def _refresh_operated(app: Starlette) -> None:
    """Read again what the operator set over NIP-86 (blocked addresses, the root relay's name
    and description), which another process may have changed."""
    operated: Operated = app.state.operated
    blocklist: Blocklist = app.state.blocklist
    blocklist.replace(address for address, _ in await operated.blocked())
    blocklist.details = await operated.details()


async def _keep_operated(app: Starlette, stop: asyncio.Event) -> None:
    """`_refresh_operated` every `REFRESH_SECONDS` until the app stops; a read that fails is
    tried again next time (the copy in memory stays as it was). The database away is the
    outage's to log (`tms.store.outage`: one line for all it meets); any other failure is logged
    when it first comes, not every few seconds while it lasts."""
    failing = False
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), REFRESH_SECONDS)
        if stop.is_set():
            return
        try:
            await _refresh_operated(app)
        except Exception as exc:
            if is_database_down(exc):
                app.state.runtime.services.outage.failed("the operator's settings, read again", exc)
            elif not failing:
                log.warning("could not read the operator's blocked addresses", exc_info=True)
            failing = True
        else:
            failing = False
