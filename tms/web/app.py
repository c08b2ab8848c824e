"""The HTTP front door: a Starlette app over the ledger service.

Routes (the whole table is `ROUTES` below):

    GET /healthz                  {"ok": true, "database": "reachable"}, or 503 when it is not
    GET /terms                    {"version", "sha256", "text"}: the terms every key signs
    GET /c/<slug>/export.jsonl    the collection as JSON Lines, members only (NIP-98 or login)
    POST /mcp                     the MCP endpoint: tools and prompts (tms.mcp.server)

and the people's pages (tms.web.pages), logged in with NIP-07 (tms.web.login):

    GET /                         Connect; once logged in, home: terms, profile, collections
    GET /login/challenge          a nonce and the URL to sign; POST /login, POST /logout
    GET /submit                   evidence, claims and links; POST /fetch, POST /publish
    GET /c/<slug>                 claims (sorts, search) and evidence
    GET /c/<slug>/claims/<id>     a claim with its links, quotes in context, contradictions
    GET /c/<slug>/evidence/<id>   an evidence text, paged, quotes marked
    GET /c/<slug>/members         the owner's member list editor (members.json: its head)
    GET /dashboard                activity, records by kind, contributors, sources
    GET /docs, /docs.md           the user guide, for this server
    GET /static/...               the one stylesheet and the pages' scripts

JSON handlers answer `{"error": "..."}` when something is wrong: 401 (with `WWW-Authenticate:
Nostr`) when the credentials do not hold up, one byte-identical 404 for a collection that does
not exist, is not the caller's, or cannot be named so, 503 when the database is down, and a bare
500 (logged here, never a traceback on the wire) for anything unforeseen. Pages answer with
pages: one 404 page for whatever is missing or closed to the key.

Every response carries the security headers of `tms.web.security` (a Content-Security-Policy
without inline script, whose only outside origins are the profile relays).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from tms.config import Settings, load_secret
from tms.errors import DATABASE_UNAVAILABLE, AuthError, RateLimited, Refusal, sendable
from tms.http.gate import Gate, route_name
from tms.ledger.export import Exporter
from tms.mcp.http import McpFront
from tms.nostr import nip98
from tms.rules.terms import current_terms
from tms.runtime import Runtime, open_runtime
from tms.store.database import is_database_down
from tms.types import PubKey, Slug
from tms.web import docs
from tms.web.login import Keyring, request_url
from tms.web.pages import Pages
from tms.web.render import STATIC_DIR, Renderer
from tms.web.security import SecurityHeaders

log = logging.getLogger("tms.web.app")

EXPORT_MEDIA_TYPE: Final = "application/jsonl"  # JSON Lines; one signed event per line
EXPORT_CHUNK_BYTES: Final = 64 * 1024  # lines are sent in chunks of about this size
PRIVATE: Final = {"Cache-Control": "no-store"}


# --- handlers ----------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    problem = await _runtime(request).health.problem()
    if problem is not None:
        log.warning("health check: database unreachable: %s", problem)
        body = {"ok": False, "database": f"unreachable: {problem}"}
        return JSONResponse(body, 503, headers=PRIVATE)
    vectors = _runtime(request).services.search.status
    return JSONResponse({"ok": True, "database": "reachable", "vectors": vectors}, headers=PRIVATE)


async def terms(request: Request) -> Response:
    return JSONResponse(current_terms())


async def export(request: Request) -> Response:
    """Every event of the collection, oldest first, exactly as stored. Membership is checked
    before the first byte goes out; the body then streams from a database cursor. A bot signs
    NIP-98; a browser sends its login cookie."""
    session = None
    if "authorization" not in request.headers:
        session = await _pages(request).session(request)
    pubkey = session.pubkey if session is not None else authenticate(request)
    slug = request.path_params["slug"]
    runtime = _runtime(request)
    await runtime.services.throttle.key(pubkey)
    if not await runtime.access.can_read(pubkey, slug):
        runtime.services.refusals.record(Refusal.NOT_MEMBER, "export", pubkey)
        return no_such_collection()
    headers = {**PRIVATE, "Content-Disposition": f'attachment; filename="{slug}.jsonl"'}
    if request.method == "HEAD":
        return Response(media_type=EXPORT_MEDIA_TYPE, headers=headers)
    return _ClosingStreamingResponse(
        _export_body(runtime.exporter, slug), media_type=EXPORT_MEDIA_TYPE, headers=headers
    )


class _MCP:
    """`/mcp`: the MCP endpoint (`tms.mcp.http`), built by the lifespan. An instance, so that
    the route passes it every method (it answers the ones it does not serve itself)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["app"].state.mcp(scope, receive, send)


def _page(name: str) -> Callable[[Request], Awaitable[Response]]:
    """The handler `name` of this app's `Pages` (built by the lifespan, with its secret)."""

    async def handler(request: Request) -> Response:
        method: Callable[[Request], Awaitable[Response]] = getattr(_pages(request), name)
        return await method(request)

    handler.__name__ = name
    return handler


async def docs_html(request: Request) -> Response:
    return await _pages(request).render(
        request, "docs.html", guide=docs.html(_base(request), request.app.state.settings)
    )


async def docs_markdown(request: Request) -> Response:
    guide = docs.markdown(_base(request), request.app.state.settings)
    return Response(guide, media_type="text/markdown; charset=utf-8")


GET: Final = ["GET"]
POST: Final = ["POST"]

ROUTES: Final = [
    Route("/healthz", healthz, methods=GET),
    Route("/mcp", _MCP()),
    Route("/terms", terms, methods=GET),
    # `path`, so that a slug with a slash in it gets the same 404 as any other bad slug
    Route("/c/{slug:path}/export.jsonl", export, methods=GET),
    # the people's pages
    Route("/", _page("home"), methods=GET),
    Route("/login/challenge", _page("login_challenge"), methods=GET),
    Route("/login", _page("login"), methods=POST),
    Route("/logout", _page("logout"), methods=POST),
    Route("/submit", _page("submit"), methods=GET),
    Route("/fetch", _page("fetch"), methods=POST),
    Route("/publish", _page("publish"), methods=POST),
    Route("/dashboard", _page("dashboard"), methods=GET),
    Route("/docs", docs_html, methods=GET),
    Route("/docs.md", docs_markdown, methods=GET),
    Route("/quotes/normalization.json", _page("normalization"), methods=GET),
    Route("/c/{slug}", _page("collection"), methods=GET),
    Route("/c/{slug}/members", _page("members"), methods=GET),
    Route("/c/{slug}/members.json", _page("members_head"), methods=GET),
    Route("/c/{slug}/claims/{event_id}", _page("claim"), methods=GET),
    Route("/c/{slug}/evidence/{event_id}", _page("evidence"), methods=GET),
    Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
]


# --- authentication ----------------------------------------------------------------------------


def authenticate(request: Request) -> PubKey:
    """The caller's pubkey from a NIP-98 header, or `AuthError` (answered with a 401)."""
    settings: Settings = request.app.state.settings
    return nip98.check_authorization(
        request.headers.get("authorization"),
        url=request_url(request, settings.base_url),
        method=request.method,
        now=int(time.time()),
    )


# --- responses ---------------------------------------------------------------------------------


def error(message: str, status: int, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": sendable(message)}, status, headers={**PRIVATE, **(headers or {})}
    )


def no_such_collection() -> JSONResponse:
    """One answer for a collection that does not exist, is closed to the caller, or has a name
    no collection can have: the same bytes, so none of them can be told apart."""
    return error("no such collection", 404)


async def _export_body(exporter: Exporter, slug: Slug) -> AsyncGenerator[bytes, None]:
    chunk: list[bytes] = []
    size = 0
    lines = exporter.lines(slug)
    async with aclosing(lines):
        async for line in lines:
            data = f"{line}\n".encode()
            chunk.append(data)
            size += len(data)
            if size >= EXPORT_CHUNK_BYTES:
                yield b"".join(chunk)
                chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


class _ClosingStreamingResponse(StreamingResponse):
    """Closes its body when the response ends for any reason (a client that hangs up mid-export
    included), so the export's cursor, transaction and pooled connection go back at once rather
    than whenever the garbage collector gets to the generator."""

    def __init__(
        self, body: AsyncGenerator[bytes, None], *, media_type: str, headers: Mapping[str, str]
    ) -> None:
        super().__init__(body, media_type=media_type, headers=headers)
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._body.aclose()


async def _auth_failed(request: Request, exc: Exception) -> Response:
    _runtime(request).services.refusals.refused(exc, route_name(request.scope))
    return error(str(exc), 401, headers={"WWW-Authenticate": "Nostr"})


async def _rate_limited(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RateLimited)
    _runtime(request).services.refusals.refused(exc, route_name(request.scope))
    return error(str(exc), 429, headers={"Retry-After": str(exc.retry_after)})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        if "text/html" in request.headers.get("accept", ""):
            return await _pages(request).not_found(request)
        return error("not found", 404)
    return error(exc.detail.lower(), exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    if is_database_down(exc):
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return error(DATABASE_UNAVAILABLE, 503)
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return error("internal error", 500)


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _pages(request: Request) -> Pages:
    pages: Pages = request.app.state.pages
    return pages


def _base(request: Request) -> str:
    """This server's public origin: `TMS_BASE_URL`, else the request's own."""
    settings: Settings = request.app.state.settings
    return settings.base_url or f"{request.url.scheme}://{request.url.netloc}"


# --- the application ---------------------------------------------------------------------------


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
    external = database_url is not None or settings.database_url is not None
    secret, chosen = load_secret(settings, external_database=external)
    if chosen is not None:
        log.warning("%s", chosen)
    pages = Pages(
        Renderer(),
        Keyring(secret),
        base_url=settings.base_url,
        profile_relays=settings.profile_relays,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_runtime(settings, database_url) as runtime:
            front = McpFront(runtime.services.refusals)
            app.state.runtime = runtime
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
                await pages.close()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        exception_handlers={
            AuthError: _auth_failed,
            RateLimited: _rate_limited,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
    )
    app.state.settings = settings
    app.state.pages = pages
    app.add_middleware(Gate, trusted_proxies=settings.trusted_proxies)
    app.add_middleware(SecurityHeaders, relays=settings.profile_relays)  # outermost: every answer
    return app
