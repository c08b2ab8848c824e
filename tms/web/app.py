"""The HTTP front door: a Starlette app over the ledger service.

Routes (the whole table is `ROUTES` below):

    GET /healthz                  {"ok": true, "database": "reachable"}, or 503 when it is not
    GET /metrics                  Prometheus' text format, with `Authorization: Bearer
                                  $TMS_METRICS_TOKEN` only (tms.metrics); a 404 without a token
    GET /terms                    {"version", "sha256", "text"}: the terms every key signs
    GET /c/<slug>/export.jsonl    the collection as JSON Lines, members only (NIP-98 or login);
                                  `?checkpoint=1` ends it with the log's checkpoint line
    GET /log-key                  the key checkpoints are signed with (C2SP verifier key)
    GET /c/<slug>/checkpoint      the latest checkpoint (C2SP signed note), members only
    GET /c/<slug>/consistency     ?old=M[&new=N]: an RFC 9162 consistency proof, members only
    GET /c/<slug>/tile/<path>     the log as C2SP tlog-tiles (hashes, entry bundles), members only
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
import hmac
import importlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Final

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from tms import metrics
from tms.config import Settings, load_secret
from tms.errors import DATABASE_UNAVAILABLE, AuthError, LogError, RateLimited, Refusal, sendable
from tms.http.gate import Gate, route_name
from tms.http.metered import Metered
from tms.ledger.export import Exporter
from tms.mcp.http import McpFront
from tms.nostr import nip98
from tms.rules.terms import current_terms
from tms.runtime import Runtime, open_runtime
from tms.store.database import is_database_down
from tms.tlog.tiles import parse_tile_path
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
# A tile never changes once the log holds it (tlog-tiles); it is still a member's to see.
IMMUTABLE: Final = {"Cache-Control": "private, max-age=31536000, immutable"}
NOTE_MEDIA_TYPE: Final = "text/plain; charset=utf-8"
MAX_SIZE_DIGITS: Final = 19  # a tree size in a query: bigint's range


# --- handlers ----------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    problem = await _runtime(request).health.problem()
    if problem is not None:
        log.warning("health check: database unreachable: %s", problem)
        body = {"ok": False, "database": f"unreachable: {problem}"}
        return JSONResponse(body, 503, headers=PRIVATE)
    vectors = _runtime(request).services.search.status
    return JSONResponse({"ok": True, "database": "reachable", "vectors": vectors}, headers=PRIVATE)


async def metrics_text(request: Request) -> Response:
    """This process's figures (tms.metrics), for a scraper holding `TMS_METRICS_TOKEN`. Without
    a token configured, the route is not there: the 404 of any unknown path."""
    settings: Settings = request.app.state.settings
    if settings.metrics_token is None:
        raise HTTPException(404)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), settings.metrics_token.encode()
    ):
        runtime = _runtime(request)
        runtime.services.refusals.record(Refusal.UNAUTHENTICATED, route_name(request.scope))
        return error(
            "metrics need Authorization: Bearer <TMS_METRICS_TOKEN>",
            401,
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    await metrics.refresh(_runtime(request).ledger.pool)
    # The format the scraper asks for (Prometheus' text, or OpenMetrics), as the library's own
    # listener chooses it.
    encode, media_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(REGISTRY), headers={**PRIVATE, "Content-Type": media_type})


async def terms(request: Request) -> Response:
    return JSONResponse(current_terms())


async def export(request: Request) -> Response:
    """Every event of the collection, oldest first, exactly as stored. Membership is checked
    before the first byte goes out; the body then streams from a database cursor. With
    `?checkpoint=1` the last line is the log's checkpoint line (`tms verify-export`)."""
    slug = await _readable(request)
    if slug is None:
        return no_such_collection()
    runtime = _runtime(request)
    flag = request.query_params.get("checkpoint", "0")
    if flag not in ("0", "1"):
        return error("checkpoint must be 0 or 1", 400)
    headers = {**PRIVATE, "Content-Disposition": f'attachment; filename="{slug}.jsonl"'}
    if request.method == "HEAD":
        return Response(media_type=EXPORT_MEDIA_TYPE, headers=headers)
    if flag == "1":
        await runtime.services.tlog.checkpoint(slug)  # builds a log not built yet
    return _ClosingStreamingResponse(
        _export_body(runtime.exporter, slug, flag == "1"),
        media_type=EXPORT_MEDIA_TYPE,
        headers=headers,
    )


async def log_key(request: Request) -> Response:
    """The verifier key of every checkpoint this server signs: public, one line."""
    return PlainTextResponse(_log_key(request) + "\n", media_type=NOTE_MEDIA_TYPE)


async def checkpoint(request: Request) -> Response:
    """The collection log's latest checkpoint, as tlog-tiles serves it: the signed note."""
    slug = await _readable(request)
    if slug is None:
        return no_such_collection()
    note = (await _runtime(request).services.tlog.checkpoint(slug))["note"]
    return PlainTextResponse(note, media_type=NOTE_MEDIA_TYPE, headers=PRIVATE)


async def consistency(request: Request) -> Response:
    """`?old=M[&new=N]`: the proof that the log at M entries is a prefix of it at N (default:
    the latest checkpoint's size), as `get_consistency` returns it."""
    slug = await _readable(request)
    if slug is None:
        return no_such_collection()
    sizes = [request.query_params.get(name) for name in ("old", "new")]
    if sizes[0] is None or not all(_size(text) for text in sizes if text is not None):
        return error("old (and new) must be tree sizes: ?old=M or ?old=M&new=N", 400)
    old, new = (None if text is None else int(text) for text in sizes)
    assert old is not None
    try:
        proof = await _runtime(request).services.tlog.consistency(slug, old, new)
    except LogError as exc:
        return error(str(exc), 400)
    return JSONResponse(proof, headers=PRIVATE)


async def tile(request: Request) -> Response:
    """One tile or entry bundle of the collection's log (C2SP tlog-tiles), or 404 while the
    log does not hold it; the same 404 for any path that names no tile."""
    slug = await _readable(request)
    if slug is None:
        return no_such_collection()
    wanted = parse_tile_path(request.path_params["tile"])
    data = None if wanted is None else await _runtime(request).services.tlog.tile(slug, wanted)
    if data is None:
        return error("no such tile", 404)
    return Response(data, media_type="application/octet-stream", headers=IMMUTABLE)


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
    settings = request.app.state.settings
    guide = docs.html(_base(request), settings, _log_key(request), _log_host(request))
    return await _pages(request).render(request, "docs.html", guide=guide)


async def docs_markdown(request: Request) -> Response:
    settings = request.app.state.settings
    guide = docs.markdown(_base(request), settings, _log_key(request), _log_host(request))
    return Response(guide, media_type="text/markdown; charset=utf-8")


def _log_key(request: Request) -> str:
    return _runtime(request).ledger.log.signer.key.verifier().encode()


def _log_host(request: Request) -> str:
    return _runtime(request).ledger.log.signer.host


GET: Final = ["GET"]
POST: Final = ["POST"]

ROUTES: Final = [
    Route("/healthz", healthz, methods=GET),
    Route("/metrics", metrics_text, methods=GET),
    Route("/mcp", _MCP()),
    Route("/terms", terms, methods=GET),
    # `path`, so that a slug with a slash in it gets the same 404 as any other bad slug
    Route("/c/{slug:path}/export.jsonl", export, methods=GET),
    # each collection's transparency log
    Route("/log-key", log_key, methods=GET),
    Route("/c/{slug:path}/checkpoint", checkpoint, methods=GET),
    Route("/c/{slug:path}/consistency", consistency, methods=GET),
    Route("/c/{slug:path}/tile/{tile:path}", tile, methods=GET),
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


async def caller(request: Request) -> PubKey:
    """Who asks: a bot signs NIP-98; a browser sends its login cookie (`AuthError` if
    neither holds up)."""
    session = None
    if "authorization" not in request.headers:
        session = await _pages(request).session(request)
    return session.pubkey if session is not None else authenticate(request)


async def _readable(request: Request) -> str | None:
    """The collection the path names, if the caller may read it; None for one that does not
    exist, is closed to the caller, or cannot be named so (the same 404, noted in the refusal
    log). The caller's key spends its rate limit first (`RateLimited`: a 429)."""
    pubkey = await caller(request)
    slug: str = request.path_params["slug"]
    services = _runtime(request).services
    await services.throttle.key(pubkey)
    if await services.access.can_read(pubkey, slug):
        return slug
    services.refusals.record(Refusal.NOT_MEMBER, route_name(request.scope), pubkey)
    return None


def _size(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= MAX_SIZE_DIGITS


# --- responses ---------------------------------------------------------------------------------


def error(message: str, status: int, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": sendable(message)}, status, headers={**PRIVATE, **(headers or {})}
    )


def no_such_collection() -> JSONResponse:
    """One answer for a collection that does not exist, is closed to the caller, or has a name
    no collection can have: the same bytes, so none of them can be told apart."""
    return error("no such collection", 404)


async def _export_body(
    exporter: Exporter, slug: Slug, checkpoint: bool
) -> AsyncGenerator[bytes, None]:
    chunk: list[bytes] = []
    size = 0
    lines = exporter.lines(slug, checkpoint=checkpoint)
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
        async with (
            open_runtime(settings, database_url) as runtime,
            _metrics_port(settings, runtime),
        ):
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
    app.add_middleware(SecurityHeaders, relays=settings.profile_relays)  # every answer
    app.add_middleware(Metered)  # outermost: counts what the client gets
    return app


@asynccontextmanager
async def _metrics_port(settings: Settings, runtime: Runtime) -> AsyncIterator[None]:
    """With `TMS_METRICS_PORT`, the metrics on a listener of their own (prometheus_client's,
    in a thread), without a token: for a scraper on a private network. A port that cannot be
    bound stops start-up. The embedding queue's depth is refreshed in the background meanwhile,
    since that thread cannot ask the database itself."""
    if settings.metrics_port is None:
        yield
        return
    server, thread = start_http_server(settings.metrics_port, settings.metrics_host)
    refresher = asyncio.create_task(metrics.refresh_forever(runtime.ledger.pool))
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    try:
        yield
    finally:
        refresher.cancel()
        await asyncio.gather(refresher, return_exceptions=True)
        server.shutdown()
        server.server_close()
        thread.join(5)
