"""The people's door: server-rendered pages over the same services as the MCP tools.

Every handler here is thin: it finds the session (`tms.web.login`), asks `tms.ledger.access`,
calls `reads`, `search`, `keys`, `stats` or the ledger, and renders a template. No SQL and no
rule lives here; a page shows what the services answer, and a publish from a page goes through
`Ledger.publish` like every other.

A collection the key cannot read, one that does not exist, and an event outside the key's
collections all get the same 404 page. A visitor without a session who asks for a page is
sent to the Connect page, which brings them back after login.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from tms.errors import (
    AuthError,
    FetchError,
    NotAReader,
    NotAUser,
    RateLimited,
    Refusal,
    TMSError,
    sendable,
)
from tms.fetch.client import fetch_url
from tms.http.bodies import BodyError, BodyReader, Busy, Disconnected, MiB, TooLarge
from tms.ledger.access import ReadableCollection
from tms.ledger.reads import CLAIM_SORTS
from tms.nostr import nip98
from tms.nostr.events import is_hex64, loads_bounded
from tms.nostr.nip19 import npub_encode
from tms.rules.content import SLUG_PATTERN
from tms.rules.expected import NO_LIST
from tms.rules.quotes import CHARACTER_MAP, WHITESPACE
from tms.rules.spans import casefold_table
from tms.rules.terms import current_terms
from tms.search.search import Method
from tms.services import Services
from tms.types import KIND_CLAIM, MAX_CONTENT_CHARS, MAX_QUERY_CHARS
from tms.web import charts
from tms.web.login import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    NONCE_SECONDS,
    SESSION_SECONDS,
    Keyring,
    Session,
    request_url,
)
from tms.web.reading import link_targets, marked
from tms.web.render import Renderer
from tms.web.submit_checks import (
    BadLookup,
    Texts,
    answer_lookup,
    id_shaped_claim,
    parse_hint,
    parse_lookup,
)

log = logging.getLogger(__name__)

EVIDENCE_PAGE_CHARS: Final = 20_000  # evidence text shown per page
CLAIMS_SHOWN: Final = 100
EVIDENCE_SHOWN: Final = 100
LINKS_SHOWN: Final = 200  # links read for a claim page, and quotes marked on an evidence page
CONTRADICTIONS_SHOWN: Final = 50  # on a claim page
CHOICES_SHOWN: Final = 20  # claims the "Contradicts…" picker offers at once
SMALL_JSON: Final = 64 * 1024  # /fetch and /logout bodies
RELATIONS: Final = ("SUPPORTS", "REBUTS", "QUALIFIES")
MAX_NOTE_CHARS: Final = 80  # of a profile name, shown as a note on the members page
MAX_EXPECTED: Final = 16  # collections a page's batch may state its expectations of
# A nearest-passage request carries at most one evidence text: 2,000,000 characters, which
# JSON may escape to six each (control characters), and the quote.
HINT_BODY: Final = 16 * MiB
HINT_FREE_CHARS: Final = 100_000  # a text sent for a hint costs a fetch only when longer
PRIVATE: Final = {"Cache-Control": "no-store"}


class Pages:
    """The handlers, bound to what they share: the renderer, the keyring and the body reader."""

    def __init__(
        self,
        renderer: Renderer,
        keyring: Keyring,
        *,
        base_url: str | None,
        profile_relays: tuple[str, ...],
    ) -> None:
        self.render_template = renderer
        self.keyring = keyring
        self.base_url = base_url
        self.profile_relays = profile_relays
        self.bodies = BodyReader()
        self.hint_bodies = BodyReader(HINT_BODY)
        self.texts = Texts()  # evidence texts kept for the submit page's quote hints

    async def close(self) -> None:
        await self.bodies.close()
        await self.hint_bodies.close()

    # --- sessions --------------------------------------------------------------------------

    async def session(self, request: Request) -> Session | None:
        """The request's live session, if its cookie names one whose key may still use the
        service; a session whose key was revoked (and is in no collection) ends here."""
        cached: Session | bool | None = request.scope.get("tms.session", False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        found: Session | None = None
        id_sha256 = self.keyring.session_hash(request.cookies.get(COOKIE))
        if id_sha256 is not None:
            services = _services(request)
            pubkey = await services.sessions.pubkey(id_sha256)
            if pubkey is not None:
                if await services.access.may_use(pubkey):
                    found = Session(pubkey, id_sha256, self.keyring.csrf(id_sha256))
                else:
                    await services.sessions.close(id_sha256)
        request.scope["tms.session"] = found
        return found

    def origin(self, request: Request) -> str:
        return self.base_url or f"{request.url.scheme}://{request.url.netloc}"

    def same_origin(self, request: Request) -> bool:
        """A state-changing request must come from our own pages: browsers send `Origin` on
        every POST, and a cross-site form or fetch names another one."""
        return request.headers.get("origin") == self.origin(request)

    async def _writer(self, request: Request, form_token: str | None = None) -> Session:
        """The session of a state-changing request: same origin, logged in, CSRF token."""
        if not self.same_origin(request):
            raise _Refused(403, "cross-site request refused: use this site's own pages")
        session = await self.session(request)
        if session is None:
            raise _Refused(401, "not logged in, or the session ended: connect again")
        token = form_token if form_token is not None else request.headers.get(CSRF_HEADER)
        if not self.keyring.csrf_ok(session, token):
            raise _Refused(403, "this page is out of date (its CSRF token is wrong): reload it")
        return session

    # --- rendering -------------------------------------------------------------------------

    async def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        session = await self.session(request)
        user: dict[str, Any] | None = None
        if session is not None:
            names = await _services(request).keys.names([session.pubkey])
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

    async def _reader(self, request: Request) -> Session | Response:
        """The session of a page that needs one, or the Connect page's redirect back here."""
        session = await self.session(request)
        if session is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/?next={quote(target, safe='/?=&')}", 303, headers=PRIVATE)
        return session

    async def _collection_reader(
        self, request: Request
    ) -> tuple[Session, ReadableCollection, Services] | Response:
        """The session of a page of collection `slug` that it may read; else the redirect to
        Connect, or the 404 a missing collection gets."""
        reader = await self._reader(request)
        if isinstance(reader, Response):
            return reader
        services = _services(request)
        try:
            readable = await services.access.collection(reader.pubkey, request.path_params["slug"])
        except NotAReader:
            return await self.not_found(request)
        return reader, readable, services

    # --- connect, login and logout ---------------------------------------------------------

    async def home(self, request: Request) -> Response:
        session = await self.session(request)
        if session is None:
            return await self.render(
                request,
                "connect.html",
                next=_local_path(request.query_params.get("next")),
                relays=self.profile_relays,
            )
        services = _services(request)
        pubkey = session.pubkey
        reader = await services.access.reader(pubkey)
        terms_signed, profile, collections, may_create = await asyncio.gather(
            services.keys.terms_signed(pubkey),
            services.keys.profile(pubkey),
            services.reads.list_collections(reader),
            services.access.may_create(pubkey),
        )
        return await self.render(
            request,
            "home.html",
            terms=current_terms(),
            terms_signed=terms_signed,
            profile=profile,
            collections=collections,
            may_create=may_create,
            relays=self.profile_relays,
        )

    async def login_challenge(self, request: Request) -> Response:
        nonce = self.keyring.mint_nonce(int(time.time()))
        url = f"{self.origin(request)}/login?nonce={nonce}"
        return JSONResponse(
            {"nonce": nonce, "url": url, "method": "POST", "seconds": NONCE_SECONDS},
            headers=PRIVATE,
        )

    async def login(self, request: Request) -> Response:
        services = _services(request)
        if not self.same_origin(request):
            services.refusals.record(Refusal.UNAUTHENTICATED, "login")
            return _json_error("cross-site request refused: use this site's own pages", 403)
        now = int(time.time())
        try:
            pubkey = nip98.check_authorization(
                request.headers.get("authorization"),
                url=request_url(request, self.base_url),
                method="POST",
                now=now,
            )
            nonce = self.keyring.check_nonce(request.query_params.get("nonce"), now)
        except AuthError as exc:
            services.refusals.refused(exc, "login")
            return _json_error(str(exc), 401)
        try:
            await services.throttle.login(pubkey)
        except RateLimited as exc:
            return _too_many(services, exc, "login")
        if not await services.sessions.use_nonce(nonce, NONCE_SECONDS):
            services.refusals.record(Refusal.REPLAY, "login", pubkey)
            return _json_error("this login was already used: connect again", 401)
        try:
            await services.access.require_user(pubkey)
        except NotAUser as exc:
            services.refusals.record(Refusal.NOT_MEMBER, "login", pubkey)
            return _json_error(str(exc), 403)
        cookie, id_sha256 = self.keyring.new_session()
        expires = datetime.now(UTC) + timedelta(seconds=SESSION_SECONDS)
        await services.sessions.open(id_sha256, pubkey, expires)
        response = JSONResponse({"pubkey": pubkey, "npub": npub_encode(pubkey)}, headers=PRIVATE)
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="lax",
            secure=self.origin(request).startswith("https://"),
        )
        return response

    async def logout(self, request: Request) -> Response:
        try:
            form = parse_qs((await _small_body(request)).decode("utf-8", "replace"))
            session = await self._writer(request, (form.get(CSRF_FIELD) or [""])[0])
        except _Refused as refused:
            if refused.status == 401:  # already ended: logging out again is no error
                return _logged_out(self.origin(request))
            return await self.render(request, "error.html", refused.status, message=str(refused))
        await _services(request).sessions.close(session.id_sha256)
        return _logged_out(self.origin(request))

    # --- writing: publish and fetch --------------------------------------------------------

    async def publish(self, request: Request) -> Response:
        """A batch signed in the browser, stored by the ledger as any other batch. Every event
        must be the session's key's: the page publishes what its user signed."""
        services = _services(request)
        try:
            session = await self._writer(request)
            read = await self._read_events(request)
        except _Refused as refused:
            return refused.noted(services, "page publish")
        if isinstance(read, Response):
            return read
        events, expected = read
        for position, event in enumerate(events):
            signer = event.get("pubkey") if isinstance(event, dict) else None
            if signer != session.pubkey:
                services.refusals.record(Refusal.INVALID, "page publish", session.pubkey)
                return _json_error(
                    f"events[{position}] is not signed by the key you are logged in with; "
                    "sign with the same extension account",
                    400,
                )
        id_shaped = id_shaped_claim(events)  # a pasted id never becomes a claim's text
        if id_shaped is not None:
            services.refusals.record(Refusal.INVALID, "page publish", session.pubkey)
            return _json_error(id_shaped, 400)
        try:
            result = await services.ledger.publish(events, expected=expected or None)
        except RateLimited as exc:
            return _too_many(services, exc, "page publish")
        except TMSError as exc:
            services.refusals.refused(exc, "page publish")
            return _json_error(str(exc), 400)
        return JSONResponse(result, headers=PRIVATE)

    async def _read_events(
        self, request: Request
    ) -> tuple[list[Any], dict[str, str | None]] | Response:
        async with AsyncExitStack() as stack:
            try:
                body = await self.bodies.read(request.scope, request.receive, stack)
                if isinstance(body, Path):  # a big batch: its shape is checked in a worker
                    await self.bodies.inspect(_check_batch_file, body)
                    data = await asyncio.to_thread(body.read_bytes)
                else:
                    data = body
                parsed = await asyncio.to_thread(_parse_batch, data)
            except (TooLarge, Busy) as exc:
                status = 413 if isinstance(exc, TooLarge) else 503
                headers = {"Retry-After": "5"} if isinstance(exc, Busy) else None
                raise _Refused(status, str(exc), headers) from None
            except (BodyError, _BadBody) as exc:
                raise _Refused(400, str(exc)) from None
            except Disconnected:
                log.info("a page's publish hung up before sending its whole body")
                return Response(status_code=400)
        return parsed

    async def fetch(self, request: Request) -> Response:
        """The Fetch button: `fetch_url` for logged-in keys, as the MCP tool."""
        services = _services(request)
        try:
            session = await self._writer(request)
            body = loads_bounded(await _small_body(request), max_containers=10, max_values=10)
        except _Refused as refused:
            return refused.noted(services, "page fetch")
        except (ValueError, RecursionError) as exc:
            services.refusals.record(Refusal.INVALID, "page fetch")
            return _json_error(f'send {{"url": "..."}} as JSON ({exc})', 400)
        url = body.get("url") if isinstance(body, dict) else None
        if not isinstance(url, str) or not url.strip():
            services.refusals.record(Refusal.INVALID, "page fetch", session.pubkey)
            return _json_error("paste an http(s) URL to fetch", 400)
        try:
            await services.access.require_user(session.pubkey)
            await services.throttle.fetch(session.pubkey)
            result = await fetch_url(url, allow=services.fetch_allow)
        except RateLimited as exc:
            return _too_many(services, exc, "page fetch")
        except (FetchError, NotAUser) as exc:
            services.refusals.refused(exc.refused_as(exc.refusal, session.pubkey), "page fetch")
            return _json_error(str(exc), 400)
        # Kept for the quote hints: the page quotes from what it fetched, and then need not
        # send the text back for a hint.
        await self.texts.remember(session.pubkey, result["text"])
        return JSONResponse(result, headers=PRIVATE)

    # --- the submit page's checks (tms.web.submit_checks) ----------------------------------

    async def lookup(self, request: Request) -> Response:
        """What the submit page checks before signing, in a collection the key may read: the
        evidence already stored, claims already there, the records pasted ids name. A
        collection it may not read gets the same 404 as one that does not exist."""
        services = _services(request)
        try:
            session = await self._writer(request)
            body = loads_bounded(await _small_body(request), max_containers=64, max_values=256)
            asked = parse_lookup(body)
        except _Refused as refused:
            return refused.noted(services, "page lookup")
        except (ValueError, RecursionError) as exc:
            services.refusals.record(Refusal.INVALID, "page lookup")
            return _json_error(f"not a look-up the submit page sends: {exc}", 400)
        try:
            readable = await services.access.collection(session.pubkey, request.path_params["slug"])
        except NotAReader:
            return _json_error("no such collection", 404)
        try:
            await services.throttle.key(session.pubkey)
        except RateLimited as exc:
            return _too_many(services, exc, "page lookup")
        answer = await answer_lookup(services.lookups, readable, asked)
        return JSONResponse(answer, headers=PRIVATE)

    async def nearest(self, request: Request) -> Response:
        """The passage of an evidence text nearest a quote that is not in it, as a bot's
        refused publish says. Rate-limited by the key's budget, and, when a long text itself is
        sent (at most once per text: see `Texts`), by its fetch budget too: hashing and
        normalizing two million characters costs as much as extracting a page."""
        services = _services(request)
        try:
            session = await self._writer(request)
            body = await self._read_hint(request)
            sha256, quote, text = parse_hint(body)
        except _Refused as refused:
            return refused.noted(services, "page nearest")
        except (ValueError, RecursionError) as exc:
            services.refusals.record(Refusal.INVALID, "page nearest")
            return _json_error(f"not a hint request the submit page sends: {exc}", 400)
        try:
            await services.throttle.key(session.pubkey)
            if (
                text is not None
                and len(text) > HINT_FREE_CHARS
                and not self.texts.has(session.pubkey, sha256)
            ):
                await services.throttle.fetch(session.pubkey)
            answer = await self.texts.nearest(session.pubkey, sha256, quote, text)
        except RateLimited as exc:
            return _too_many(services, exc, "page nearest")
        except BadLookup as exc:
            services.refusals.record(Refusal.INVALID, "page nearest", session.pubkey)
            return _json_error(str(exc), 400)
        return JSONResponse(answer, headers=PRIVATE)

    async def _read_hint(self, request: Request) -> Any:
        async with AsyncExitStack() as stack:
            try:
                body = await self.hint_bodies.read(request.scope, request.receive, stack)
                data = await asyncio.to_thread(body.read_bytes) if isinstance(body, Path) else body
                # Two or three strings: parsed in a thread, as a text may be megabytes long.
                return await asyncio.to_thread(loads_bounded, data, max_containers=4, max_values=16)
            except (TooLarge, Busy) as exc:
                status = 413 if isinstance(exc, TooLarge) else 503
                headers = {"Retry-After": "5"} if isinstance(exc, Busy) else None
                raise _Refused(status, str(exc), headers) from None
            except BodyError as exc:
                raise _Refused(400, str(exc)) from None
            except Disconnected:
                raise _Refused(400, "the request ended before its body did") from None

    # --- reading ---------------------------------------------------------------------------

    async def collection(self, request: Request) -> Response:
        found = await self._collection_reader(request)
        if isinstance(found, Response):
            return found
        reader, readable, services = found
        slug = readable.slug
        sort = request.query_params.get("sort") or "recent"
        if sort not in CLAIM_SORTS:
            sort = "recent"
        text = (request.query_params.get("q") or "").strip()[:MAX_QUERY_CHARS]
        method: Method = "keyword" if request.query_params.get("method") == "keyword" else "vector"
        search = None
        claims: list[Any] = []
        if text:
            search = await services.search.claims(readable, text, method, CLAIMS_SHOWN)
        else:
            claims = list(await services.reads.list_claims(readable, sort, CLAIMS_SHOWN))
        evidence = await services.reads.list_evidence(readable, False, None, EVIDENCE_SHOWN)
        mine = await services.reads.list_collections(await services.access.reader(reader.pubkey))
        info = next((c for c in mine if c["slug"] == slug), None)
        return await self.render(
            request,
            "collection.html",
            slug=slug,
            info=info,
            sort=sort,
            sorts=CLAIM_SORTS,
            query=text,
            method=method,
            search=search,
            claims=claims,
            evidence=evidence,
            owner=info is not None and info["owner"] == reader.pubkey,
        )

    async def claim(self, request: Request) -> Response:
        """A claim, the links pointing at it with each quote in its context (read from the
        stored anchors, never from the evidence texts), and the contradictions naming it."""
        opened = await self._collection_reader(request)
        if isinstance(opened, Response):
            return opened
        reader, readable, services = opened
        slug, event_id = readable.slug, request.path_params["event_id"]
        event = await self._event(services, readable, event_id, KIND_CLAIM)
        if event is None:
            return await self.not_found(request)
        links = await services.reads.shown_links(readable, to_id=event_id, limit=LINKS_SHOWN)
        contexts, contradictions, terms_signed = await asyncio.gather(
            services.reads.quote_contexts(readable, [found.id for found in links]),
            services.reads.shown_contradictions(readable, event_id, CONTRADICTIONS_SHOWN),
            services.keys.terms_signed(reader.pubkey),
        )
        by_relation = {
            relation: [
                {"link": found, "context": contexts.get(found.id)}
                for found in links
                if found.relation == relation
            ]
            for relation in RELATIONS
        }
        added = request.query_params.get("added")
        return await self.render(
            request,
            "claim.html",
            slug=slug,
            event=event,
            by_relation=by_relation,
            contradictions=contradictions,
            added=added if any(c.id == added for c in contradictions) else None,
            terms_signed=terms_signed,
            page_chars=EVIDENCE_PAGE_CHARS,
            links_cut=LINKS_SHOWN if len(links) == LINKS_SHOWN else None,
            contradictions_cut=(
                CONTRADICTIONS_SHOWN if len(contradictions) == CONTRADICTIONS_SHOWN else None
            ),
        )

    async def claim_choices(self, request: Request) -> Response:
        """The claims the claim page's "Contradicts…" picker offers, as JSON: the newest, or
        those matching `q` (words, or a claim id or the start of one), never `besides`."""
        session = await self.session(request)
        services = _services(request)
        if session is None:
            return _json_error("no such collection", 404)
        try:
            readable = await services.access.collection(session.pubkey, request.path_params["slug"])
        except NotAReader:
            return _json_error("no such collection", 404)
        words = (request.query_params.get("q") or "").strip()[:MAX_QUERY_CHARS]
        besides = request.query_params.get("besides") or ""
        choices = await services.reads.claim_choices(
            readable, words, besides if is_hex64(besides) else "", CHOICES_SHOWN
        )
        body = {"claims": [{"id": c.id, "text": c.text.text, "more": c.text.more} for c in choices]}
        return JSONResponse(body, headers=PRIVATE)

    async def evidence(self, request: Request) -> Response:
        """One page of an evidence text (a window read in SQL), each quote of it marked where
        its stored anchor says, and what each link quoting it points at."""
        opened = await self._collection_reader(request)
        if isinstance(opened, Response):
            return opened
        _, readable, services = opened
        slug, event_id = readable.slug, request.path_params["event_id"]
        try:
            page = max(1, int(request.query_params.get("page", "1")))
        except ValueError:
            page = 1
        offset = (page - 1) * EVIDENCE_PAGE_CHARS
        if not is_hex64(event_id) or offset > MAX_CONTENT_CHARS:
            return await self.not_found(request)
        window = await services.reads.evidence_window(
            readable, event_id, offset, EVIDENCE_PAGE_CHARS
        )
        if window is None:
            return await self.not_found(request)
        pages = max(1, -(-window.chars // EVIDENCE_PAGE_CHARS))
        if page > pages:
            return await self.not_found(request)
        links = await services.reads.shown_links(readable, from_id=event_id, limit=LINKS_SHOWN)
        # Each link's anchor, stored when it was published; a link stored before anchors
        # existed is not marked until the start-up back-fill reaches it.
        spans = [
            (found.start, found.end, found.id)
            for found in links
            if found.start is not None and found.end is not None
        ]
        targets = await link_targets(readable, links, services.reads)
        return await self.render(
            request,
            "evidence.html",
            slug=slug,
            evidence=window,
            segments=marked(window.text, offset, spans),
            links=[{"link": found, "target": targets.get(found.to_id)} for found in links],
            marked={s[2] for s in spans},
            page=page,
            pages=pages,
        )

    async def _event(
        self,
        services: Services,
        readable: ReadableCollection,
        event_id: str,
        kind: int,
    ) -> dict[str, Any] | None:
        """The event if it is of `kind` and in the collection; else None (the same 404 for
        each). Not for evidence, whose page reads a window of its text."""
        if not is_hex64(event_id):
            return None
        event = await services.reads.get_event(readable.reader(), event_id)
        if event is None or event["kind"] != kind:
            return None
        return dict(event)

    # --- members ---------------------------------------------------------------------------

    async def members(self, request: Request) -> Response:
        found = await self._collection_reader(request)
        if isinstance(found, Response):
            return found
        reader, readable, services = found
        slug = readable.slug
        if not await services.access.owns(reader.pubkey, slug):
            return await self.render(
                request,
                "error.html",
                403,
                message=f"Only the owner of {slug} changes its members.",
            )
        current = await services.keys.member_list(slug)
        if current is None:
            return await self.not_found(request)
        names = await services.keys.names([*current["members"], current["owner"]])
        members = [
            {"pubkey": m, "npub": npub_encode(m), "name": names.get(m)} for m in current["members"]
        ]
        return await self.render(
            request,
            "members.html",
            slug=slug,
            current=current,
            members=members,
            member_lines=member_lines(members),
            owner_name=names.get(current["owner"]),
        )

    async def members_head(self, request: Request) -> Response:
        """The current list's head, which the members page compares with the one it loaded
        before signing: a list saved meanwhile elsewhere is shown, not overwritten unseen."""
        session = await self.session(request)
        slug = request.path_params["slug"]
        services = _services(request)
        if session is None or not await services.access.owns(session.pubkey, slug):
            return _json_error("no such collection", 404)
        current = await services.keys.member_list(slug)
        if current is None:
            return _json_error("no such collection", 404)
        return JSONResponse(current, headers=PRIVATE)

    # --- creating a collection ------------------------------------------------------------

    async def name_check(self, request: Request) -> Response:
        """Whether a slug is free: the create form asks as the user types, and again right
        before signing. Only approved keys are told (they may create collections, so could
        learn the same by publishing into the slug); only this site's pages ask (the session's
        CSRF token). The publish itself checks again, under the collection's lock."""
        services = _services(request)
        session = await self.session(request)
        if session is None:
            services.refusals.record(Refusal.UNAUTHENTICATED, "name check")
            return _json_error("not logged in, or the session ended: connect again", 401)
        if not self.keyring.csrf_ok(session, request.headers.get(CSRF_HEADER)):
            services.refusals.record(Refusal.UNAUTHENTICATED, "name check", session.pubkey)
            return _json_error("this page is out of date (its CSRF token is wrong): reload it", 403)
        try:
            await services.throttle.key(session.pubkey)
        except RateLimited as exc:
            return _too_many(services, exc, "name check")
        if not await services.access.may_create(session.pubkey):
            services.refusals.record(Refusal.NOT_MEMBER, "name check", session.pubkey)
            return _json_error(
                "only approved pubkeys create collections: ask the operator to approve your key",
                403,
            )
        slug = request.query_params.get("slug", "")
        if not SLUG_PATTERN.fullmatch(slug):
            return _json_error(
                "a collection's name is 1 to 64 lowercase letters, digits, - and _", 400
            )
        current = await services.keys.member_list(slug)
        body = {
            "slug": slug,
            "exists": current is not None,
            "yours": current is not None and current["owner"] == session.pubkey,
        }
        return JSONResponse(body, headers=PRIVATE)

    # --- submit, dashboard -----------------------------------------------------------------

    async def submit(self, request: Request) -> Response:
        reader = await self._reader(request)
        if isinstance(reader, Response):
            return reader
        services = _services(request)
        readable, terms_signed = await asyncio.gather(
            services.access.reader(reader.pubkey), services.keys.terms_signed(reader.pubkey)
        )
        collections = list(readable.slugs)
        chosen = request.query_params.get("c")
        return await self.render(
            request,
            "submit.html",
            collections=collections,
            chosen=chosen if chosen in collections else None,
            terms_signed=terms_signed,
            relations=RELATIONS,
            max_content_chars=MAX_CONTENT_CHARS,
        )

    async def dashboard(self, request: Request) -> Response:
        reader = await self._reader(request)
        if isinstance(reader, Response):
            return reader
        services = _services(request)
        readable = await services.access.reader(reader.pubkey)
        chosen = request.query_params.get("c")
        stats = await services.stats.dashboard(readable, chosen)
        return await self.render(
            request,
            "dashboard.html",
            collections=readable.slugs,
            chosen=chosen if chosen in readable.slugs else None,
            stats=stats,
            charts=[
                ("wide", charts.activity(stats["activity"])),
                ("narrow", charts.activity(stats["activity"], charts.NARROW_WIDTH)),
            ],
            kinds_chart=charts.bars([(k["kind_name"], k["events"]) for k in stats["kinds"]]),
        )

    # --- what the pages' scripts read ------------------------------------------------------

    async def normalization(self, request: Request) -> Response:
        """The server's quote normalization as data, for the submit page's script: this
        Python's case folding, character by character, and the character map."""
        table = await asyncio.to_thread(casefold_table)
        body = {"casefold": table, "map": dict(CHARACTER_MAP), "whitespace": WHITESPACE}
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=3600"})


# --- helpers -----------------------------------------------------------------------------------


def member_lines(members: list[dict[str, Any]]) -> str:
    """The members page's textarea: one npub per line, its profile name as a `# note`, so that
    saving it unchanged signs the same list. A name is kept to one line and to what a note is."""
    lines = []
    for member in members:
        name = " ".join(str(member["name"] or "").split())[:MAX_NOTE_CHARS]
        lines.append(f"{member['npub']}  # {name}" if name else member["npub"])
    return "".join(f"{line}\n" for line in lines)


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers

    def noted(self, services: Services, tool: str) -> JSONResponse:
        """The refusal as an answer, noted in the refusal log (a busy server refuses no one)."""
        kind = _KIND_OF_STATUS.get(self.status)
        if kind is not None:
            services.refusals.record(kind, tool)
        return _json_error(str(self), self.status, self.headers)


_KIND_OF_STATUS: Final = {
    400: Refusal.INVALID,
    401: Refusal.UNAUTHENTICATED,
    403: Refusal.UNAUTHENTICATED,
    413: Refusal.TOO_LARGE,
}


class _BadBody(ValueError):
    pass


def _services(request: Request) -> Services:
    services: Services = request.app.state.runtime.services
    return services


def _json_error(message: str, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": sendable(message)}, status, headers={**PRIVATE, **(headers or {})}
    )


def _too_many(services: Services, exc: RateLimited, tool: str) -> JSONResponse:
    services.refusals.refused(exc, tool)
    return _json_error(str(exc), 429, {"Retry-After": str(exc.retry_after)})


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
    return target[:2000]


async def _small_body(request: Request) -> bytes:
    """A body that must be small (a form, a URL): refused past `SMALL_JSON` bytes."""
    size = 0
    chunks = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > SMALL_JSON:
            raise _Refused(413, f"request body too large: more than {SMALL_JSON // 1024} KiB")
        chunks.append(chunk)
    return b"".join(chunks)


# A batch is at most 1,000 events of a few fields each: far below these.
_BATCH_CONTAINERS: Final = 50_000
_BATCH_VALUES: Final = 500_000


def _parse_batch(data: bytes) -> tuple[list[Any], dict[str, str | None]]:
    """The body's events, and what the page expected of their collections (`expected`,
    optional: see `tms.rules.expected`)."""
    try:
        body = loads_bounded(data, max_containers=_BATCH_CONTAINERS, max_values=_BATCH_VALUES)
    except UnicodeDecodeError:
        raise _BadBody("the body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise _BadBody(f"the body is not JSON: {sendable(str(exc))[:200]}") from None
    if (
        not isinstance(body, dict)
        or "events" not in body
        or not set(body) <= {"events", "expected"}
        or not isinstance(body["events"], list)
    ):
        raise _BadBody('send {"events": [...]}: a list of signed events')
    events: list[Any] = body["events"]
    return events, _expected(body.get("expected", {}))


def _expected(value: object) -> dict[str, str | None]:
    """`{"<slug>": null | "" | "<list id>"}`: a collection not created yet, one without a
    member list, or the list the page showed."""
    if (
        not isinstance(value, dict)
        or len(value) > MAX_EXPECTED
        or not all(
            isinstance(slug, str)
            and SLUG_PATTERN.fullmatch(slug)
            and (head is None or head == NO_LIST or (isinstance(head, str) and is_hex64(head)))
            for slug, head in value.items()
        )
    ):
        raise _BadBody(
            'expected must map collection slugs to null (not created yet), "" (no member list '
            f"yet) or a member list's id; at most {MAX_EXPECTED}"
        )
    return value


def _check_batch_file(path: Path) -> None:
    """In a worker process: a big batch parses within its bounds (or the error says why)."""
    _parse_batch(path.read_bytes())
