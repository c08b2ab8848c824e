"""Connect, log in and out, and the home page: a key's terms, profile and collections, and
whether a name is free for a new collection (the create form asks as the user types).

Login is a NIP-98 event signed by the browser's extension over a one-time challenge
(`tms.http.login`); it opens a 12-hour session held in an HttpOnly cookie.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Final
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from tms.errors import Refusal
from tms.http.bodies import small_body
from tms.http.login import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    NONCE_SECONDS,
    SESSION_SECONDS,
    request_url,
)
from tms.http.origin import signed_origin
from tms.http.statuses import Refused
from tms.nostr import nip98
from tms.nostr.nip19 import npub_encode
from tms.pages.door import (
    PRIVATE,
    SMALL_JSON,
    door_of,
    ok,
    page,
    services_of,
)
from tms.relay.endpoint import with_info
from tms.rules.content import SLUG_PATTERN
from tms.rules.terms import current_terms

NEXT_CHARS: Final = 2000  # the longest path the Connect page brings a visitor back to


@page
async def home(request: Request) -> Response:
    """Connect for a visitor; for a key, its terms, profile and collections."""
    door = door_of(request)
    session = await door.session(request)
    if session is None:
        return await door.render(
            request,
            "connect.html",
            next=_local_path(request.query_params.get("next")),
            relays=door.profile_relays,
        )
    services = services_of(request)
    pubkey = session.pubkey
    reader = await services.access.reader(pubkey)
    terms_signed, profile, collections, may_create, member_since = await asyncio.gather(
        services.keys.terms_signed(pubkey),
        services.keys.profile(pubkey),
        services.reads.list_collections(reader),
        services.access.may_create(pubkey),
        services.keys.member_since(pubkey, reader.slugs),
    )
    return await door.render(
        request,
        "home.html",
        terms=current_terms(),
        terms_signed=terms_signed,
        profile=profile,
        collections=collections,
        member_since=member_since,
        may_create=may_create,
        relays=door.profile_relays,
    )


async def login_challenge(request: Request) -> Response:
    door = door_of(request)
    nonce = door.keyring.mint_nonce(int(time.time()))
    url = f"{signed_origin(request, door.base_url)}/login?nonce={nonce}"  # as `login` checks it
    return ok({"nonce": nonce, "url": url, "method": "POST", "seconds": NONCE_SECONDS})


async def login(request: Request) -> Response:
    door = door_of(request)
    services = services_of(request)
    if not door.same_origin(request):
        raise Refused(403, "cross-site request refused: use this site's own pages")
    now = int(time.time())
    pubkey = nip98.check_authorization(  # AuthError: a 401
        request.headers.get("authorization"),
        url=request_url(request, door.base_url),
        method="POST",
        now=now,
    )
    nonce = door.keyring.check_nonce(request.query_params.get("nonce"), now)
    await services.throttle.login(pubkey)
    if not await services.sessions.use_nonce(nonce, NONCE_SECONDS):
        raise Refused(401, "this login was already used: connect again").refused_as(
            Refusal.REPLAY, pubkey
        )
    await services.access.require_user(pubkey)  # NotAUser: a 403, in SPEC's words
    cookie, id_sha256 = door.keyring.new_session()
    expires = datetime.now(UTC) + timedelta(seconds=SESSION_SECONDS)
    await services.sessions.open(id_sha256, pubkey, expires)
    response = ok({"pubkey": pubkey, "npub": npub_encode(pubkey)})
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="lax",
        secure=door.origin(request).startswith("https://"),
    )
    return response


@page
async def logout(request: Request) -> Response:
    door = door_of(request)
    form = parse_qs(
        (await small_body(request.scope, request.receive, SMALL_JSON)).decode("utf-8", "replace")
    )
    try:
        session = await door.writer(request, (form.get(CSRF_FIELD) or [""])[0])
    except Refused as refused:
        if refused.status != 401:
            raise
        return _logged_out(door.origin(request))  # already ended: logging out again is fine
    await services_of(request).sessions.close(session.id_sha256)
    return _logged_out(door.origin(request))


async def name_check(request: Request) -> Response:
    """Whether a slug is free: the create form asks as the user types, and again right
    before signing. Only approved keys are told (they may create collections, so could
    learn the same by publishing into the slug); only this site's pages ask (the session's
    CSRF token). The publish itself checks again, under the collection's lock."""
    door = door_of(request)
    services = services_of(request)
    session = await door.session(request)
    if session is None:
        raise Refused(401, "not logged in, or the session ended: connect again")
    if not door.keyring.csrf_ok(session, request.headers.get(CSRF_HEADER)):
        raise Refused(
            403, "this page is out of date (its CSRF token is wrong): reload it"
        ).refused_as(Refusal.UNAUTHENTICATED, session.pubkey)
    await services.throttle.key(session.pubkey)
    if not await services.access.may_create(session.pubkey):
        raise Refused(
            403, "only approved pubkeys create collections: ask the operator to approve your key"
        ).refused_as(Refusal.NOT_MEMBER, session.pubkey)
    slug = request.query_params.get("slug", "")
    if not SLUG_PATTERN.fullmatch(slug):
        raise Refused(400, "a collection's name is 1 to 64 lowercase letters, digits, - and _")
    owner = await services.keys.taken_by(slug)
    return ok({"slug": slug, "exists": owner is not None, "yours": owner == session.pubkey})


def _logged_out(origin: str) -> Response:
    response = RedirectResponse("/", 303, headers=PRIVATE)
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="lax", secure=origin.startswith("https://")
    )
    return response


def _local_path(target: str | None) -> str:
    """Where to go after login: a path on this site only, never another origin."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target[:NEXT_CHARS]


GET: Final = ["GET"]
POST: Final = ["POST"]

ROUTES: Final = [
    Route("/", with_info(home), methods=GET, name="home"),
    Route("/login/challenge", login_challenge, methods=GET, name="login challenge"),
    Route("/login", login, methods=POST, name="login"),
    Route("/logout", logout, methods=POST, name="logout"),
    Route("/collections/check", name_check, methods=GET, name="name check"),
]
