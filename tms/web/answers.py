"""Every refusal an HTTP route meets, answered in one place and noted once in the refusal log.

Handlers raise; this module answers. A refusal (`TMSError`) gets its status from `STATUS` (the
nearest class in its ancestry; a page's own `Refused` carries its own), is filed under its
route's name, and becomes a page for a page (the one 404 page for a collection or event that is
missing or closed to the key, the error page otherwise) or `{"error": "..."}` for everything a
script or a bot reads. A body that cannot be read, a visitor who must log in first, a database
that is down and anything unforeseen have their handlers here too. `tms.web.app` lists them.
"""

from __future__ import annotations

import logging
from typing import Final
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tms.errors import (
    DATABASE_UNAVAILABLE,
    AccessDenied,
    AuthError,
    NotAReader,
    RateLimited,
    TMSError,
)
from tms.http.bodies import BodyError, Busy, Disconnected, TooLarge
from tms.http.gate import route_name
from tms.store.database import is_database_down
from tms.web.door import PRIVATE, Refused, door_of, json_error, services_of, wants_page

log = logging.getLogger("tms.web")

NO_SUCH_COLLECTION: Final = "no such collection"  # the same bytes, whatever the reason

# Each refusal's status, by the nearest class in its ancestry.
STATUS: Final[dict[type[TMSError], int]] = {
    TMSError: 400,
    AuthError: 401,
    AccessDenied: 403,
    NotAReader: 404,
    RateLimited: 429,
}


def route_of(request: Request) -> str:
    """What the refusal log calls the route: its name in the route table (never its path,
    which may hold a slug), or the gate's name for it when no route matched."""
    route = request.scope.get("route")
    name = getattr(route, "name", None)
    return name if isinstance(name, str) and name else route_name(request.scope)


def status_of(exc: TMSError) -> tuple[int, dict[str, str]]:
    if isinstance(exc, Refused):
        return exc.status, exc.headers
    status = next(STATUS[kind] for kind in type(exc).__mro__ if kind in STATUS)
    if isinstance(exc, RateLimited):
        return status, {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, AuthError):
        return status, {"WWW-Authenticate": "Nostr"}
    return status, {}


async def refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TMSError)
    services_of(request).refusals.refused(exc, route_of(request))
    status, headers = status_of(exc)
    if wants_page(request):
        door = door_of(request)
        if status == 404:
            return await door.not_found(request)
        return await door.render(request, "error.html", status, message=str(exc))
    message = NO_SUCH_COLLECTION if isinstance(exc, NotAReader) else str(exc)
    return json_error(message, status, headers)


async def unreadable_body(request: Request, exc: Exception) -> Response:
    """A body refused as it was read (tms.http.bodies), filed like the page's own refusals."""
    if isinstance(exc, Disconnected):
        log.info(
            "%s %s: the client hung up before sending its whole body",
            request.method,
            route_of(request),
        )
        return Response(status_code=400)
    assert isinstance(exc, BodyError)
    if isinstance(exc, TooLarge):
        answer = Refused(413, str(exc))
    elif isinstance(exc, Busy):
        answer = Refused(503, str(exc), {"Retry-After": "5"})
    else:
        answer = Refused(400, str(exc))
    return await refused(request, answer)


async def to_connect(request: Request, exc: Exception) -> Response:
    """A page that needs a session: the Connect page, which brings the visitor back here. What
    a page's script reads answers a visitor as it answers a key that may not read it."""
    if not wants_page(request):
        return json_error(NO_SUCH_COLLECTION, 404)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/?next={quote(target, safe='/?=&')}", 303, headers=PRIVATE)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        if "text/html" in request.headers.get("accept", ""):
            return await door_of(request).not_found(request)
        return json_error("not found", 404)
    return json_error(exc.detail.lower(), exc.status_code, dict(exc.headers or {}))


async def database_down(request: Request, exc: Exception) -> Response:
    """The exceptions that may mean the database is down, answered where they are caught (a
    handler for `Exception` runs outermost, and Starlette re-raises after it: a traceback in
    the log for every request an outage met). Any other of these classes is a bug: re-raised,
    to `internal_error`."""
    if not is_database_down(exc):
        raise exc
    services_of(request).outage.failed(f"{request.method} {request.url.path}", exc)
    return json_error(DATABASE_UNAVAILABLE, 503)


async def internal_error(request: Request, exc: Exception) -> Response:
    if is_database_down(exc):  # raised where the handlers above do not reach (a middleware)
        services_of(request).outage.failed(f"{request.method} {request.url.path}", exc)
        return json_error(DATABASE_UNAVAILABLE, 503)
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return json_error("internal error", 500)
