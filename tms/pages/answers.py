"""Every failure an HTTP route meets, answered in one place and noted once in the refusal log.

Handlers raise; this module answers. Each failure is classified once (`tms.errors.outcome_of`)
and gets its status, headers and words from the HTTP doors' one table (`tms.http.statuses`): a
refusal (`TMSError`, a body that cannot be read included) is filed under its route's name and
becomes a page for a page (the one 404 page for a collection or event that is missing or closed
to the key, the error page otherwise) or `{"error": "..."}` for everything a script or a bot
reads; a database that is down is told once to the outage log and answered 503; anything else is
logged with its traceback and answered a bare 500. A visitor who must log in first, a client that
hung up mid-body and Starlette's own HTTP errors have their handlers here too. `tms.app`
lists them.
"""

from __future__ import annotations

import logging
from typing import Final
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tms.errors import NotAReader, Outcome, TMSError
from tms.http.gate import route_name
from tms.http.statuses import answer
from tms.pages.door import PRIVATE, door_of, json_error, services_of, wants_page

log = logging.getLogger("tms.pages")

NO_SUCH_COLLECTION: Final = "no such collection"  # the same bytes, whatever the reason


def route_of(request: Request) -> str:
    """What the refusal log calls the route: its name in the route table (never its path,
    which may hold a slug), or the gate's name for it when no route matched."""
    return route_name(request.scope)


async def failed(request: Request, exc: Exception) -> Response:
    """Any failure of a route, by its outcome: refused, unavailable or internal."""
    said = answer(exc)
    if said.outcome is Outcome.UNAVAILABLE:
        services_of(request).outage.failed(f"{request.method} {request.url.path}", exc)
        return json_error(said.message, said.status)
    if said.outcome is Outcome.INTERNAL:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return json_error(said.message, said.status)
    assert isinstance(exc, TMSError)
    services_of(request).refusals.refused(exc, route_of(request))
    if wants_page(request):
        door = door_of(request)
        if said.status == 404:
            return await door.not_found(request)
        return await door.render(request, "error.html", said.status, message=said.message)
    message = NO_SUCH_COLLECTION if isinstance(exc, NotAReader) else said.message
    return json_error(message, said.status, said.headers)


async def hung_up(request: Request, exc: Exception) -> Response:
    """A client that hung up before sending its whole body: one line in the log."""
    log.info(
        "%s %s: the client hung up before sending its whole body", request.method, route_of(request)
    )
    return Response(status_code=400)


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
