"""What every people's page shares: the session its cookie names, the same-origin and CSRF checks
of a state-changing request, rendering, and the one way a page meets a refusal.

A page handler says what it needs and raises when it cannot have it: `NeedsLogin` (a visitor
without a session, sent to Connect and back), `Refused` (an HTTP route's own refusals,
`tms.http.statuses`: a cross-site request, a stale CSRF token, a body it cannot read), or any
`TMSError` the services raise (`NotAReader` for a collection closed to the key or missing: the
same 404). `tms.pages.answers` turns each into the answer (its status from the HTTP doors' one
table, `tms.http.statuses`), a page for a page and JSON for what the pages' scripts call, and
notes it in the refusal log. No handler catches them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from tms.errors import sendable
from tms.http.bodies import BigBodies, BodyReader, MiB
from tms.http.login import COOKIE, CSRF_HEADER, Keyring, Session
from tms.http.statuses import Refused
from tms.ledger import ReadableCollection, Reader
from tms.nostr.nip19 import npub_encode
from tms.pages.render import Renderer
from tms.pages.submit_checks import Texts
from tms.services import Services

PRIVATE: Final = {"Cache-Control": "no-store"}
SMALL_JSON: Final = 64 * 1024  # bodies of forms, URLs and look-ups
# A nearest-passage request carries at most one evidence text: 2,000,000 characters, which
# JSON may escape to six each (control characters), and the quote.
HINT_BODY: Final = 16 * MiB

Handler = Callable[[Request], Awaitable[Any]]


class NeedsLogin(Exception):
    """A page asked for by a visitor without a session: Connect, then back here."""


def page(handler: Handler) -> Handler:
    """Marks a handler that answers with a page, so that a refusal it meets is a page too
    (the 404 page, the error page) rather than the JSON the pages' scripts read."""
    handler.html = True  # type: ignore[attr-defined]
    return handler


def wants_page(request: Request) -> bool:
    return bool(getattr(request.scope.get("endpoint"), "html", False))


class Door:
    """The pages' shared state: the renderer, the login keyring, and the bodies they read."""

    def __init__(
        self,
        renderer: Renderer,
        keyring: Keyring,
        *,
        base_url: str | None,
        profile_relays: tuple[str, ...],
        big_bodies: BigBodies | None = None,
    ) -> None:
        """`big_bodies`: the process's slots for big bodies, shared with `/mcp`."""
        self.render_template = renderer
        self.keyring = keyring
        self.base_url = base_url
        self.profile_relays = profile_relays
        self.bodies = BodyReader(big=big_bodies)
        self.hint_bodies = BodyReader(HINT_BODY)
        self.texts = Texts()  # evidence texts kept for the submit page's quote hints

    async def close(self) -> None:
        await self.bodies.close()
        await self.hint_bodies.close()

    # --- who asks ----------------------------------------------------------------------------

    async def session(self, request: Request) -> Session | None:
        """The request's live session, if its cookie names one whose key may still use the
        service; a session whose key was revoked (and is in no collection) ends here."""
        cached: Session | bool | None = request.scope.get("tms.session", False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        found: Session | None = None
        id_sha256 = self.keyring.session_hash(request.cookies.get(COOKIE))
        if id_sha256 is not None:
            services = services_of(request)
            pubkey = await services.sessions.pubkey(id_sha256)
            if pubkey is not None:
                if await services.access.may_use(pubkey):
                    found = Session(pubkey, id_sha256, self.keyring.csrf(id_sha256))
                else:
                    await services.sessions.close(id_sha256)
        request.scope["tms.session"] = found
        return found

    async def signed_in(self, request: Request) -> Session:
        """The session of a page that needs one (`NeedsLogin` without)."""
        session = await self.session(request)
        if session is None:
            raise NeedsLogin
        return session

    async def reader(self, request: Request) -> tuple[Session, Reader]:
        """The session, and what its key may read (one query)."""
        session = await self.signed_in(request)
        return session, await services_of(request).access.reader(session.pubkey)

    async def collection(self, request: Request) -> tuple[Session, ReadableCollection]:
        """The session, and the collection the path names if its key may read it
        (`NotAReader`, the 404 of a missing collection, otherwise)."""
        session = await self.signed_in(request)
        access = services_of(request).access
        return session, await access.collection(session.pubkey, request.path_params["slug"])

    def origin(self, request: Request) -> str:
        return self.base_url or f"{request.url.scheme}://{request.url.netloc}"

    def same_origin(self, request: Request) -> bool:
        """A state-changing request must come from our own pages: browsers send `Origin` on
        every POST, and a cross-site form or fetch names another one."""
        return request.headers.get("origin") == self.origin(request)

    async def writer(self, request: Request, form_token: str | None = None) -> Session:
        """The session of a state-changing request: same origin, logged in, CSRF token."""
        if not self.same_origin(request):
            raise Refused(403, "cross-site request refused: use this site's own pages")
        session = await self.session(request)
        if session is None:
            raise Refused(401, "not logged in, or the session ended: connect again")
        token = form_token if form_token is not None else request.headers.get(CSRF_HEADER)
        if not self.keyring.csrf_ok(session, token):
            raise Refused(403, "this page is out of date (its CSRF token is wrong): reload it")
        return session

    # --- answering ---------------------------------------------------------------------------

    async def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        session = await self.session(request)
        user: dict[str, Any] | None = None
        if session is not None:
            names = await services_of(request).keys.names([session.pubkey])
            user = {
                "pubkey": session.pubkey,
                "npub": npub_encode(session.pubkey),
                "name": names.get(session.pubkey),
                "csrf": session.csrf,
            }
        html = self.render_template(
            template, {"user": user, "path": request.url.path, "status": status, **context}
        )
        return HTMLResponse(html, status, headers=PRIVATE)

    async def not_found(self, request: Request) -> HTMLResponse:
        """The one 404 page: a missing collection or event and one the key cannot read."""
        return await self.render(request, "404.html", 404)


def door_of(request: Request) -> Door:
    door: Door = request.app.state.door
    return door


def services_of(request: Request) -> Services:
    services: Services = request.app.state.runtime.services
    return services


def json_error(message: str, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": sendable(message)}, status, headers={**PRIVATE, **(headers or {})}
    )


def ok(body: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON answer the pages' scripts read, never cached."""
    return JSONResponse(body, headers={**PRIVATE, **(headers or {})})
