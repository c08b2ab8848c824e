"""The submit page and what it calls: evidence, claims and links signed in the browser and
published as one batch through the ledger's one path (`Ledger.submit`) like any other; Fetch
(`fetch_url` for logged-in keys); the checks it makes before anything is signed (duplicates,
pasted ids, a wrong quote's nearest passage: `tms.pages.submit_checks`); and the server's quote
normalization as data, so that the page checks quotes as the server will.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tms.errors import FetchError, Refusal, sendable
from tms.fetch.client import fetch_url
from tms.guard import clients
from tms.http.bodies import small_body
from tms.http.statuses import Refused
from tms.nostr.events import is_hex64, loads_bounded
from tms.pages.door import SMALL_JSON, door_of, ok, page, services_of
from tms.pages.reading import RELATIONS
from tms.pages.submit_checks import (
    BadLookup,
    answer_lookup,
    id_shaped_claim,
    parse_hint,
    parse_lookup,
)
from tms.rules.admission import Door, Origin
from tms.rules.content import SLUG_PATTERN
from tms.rules.expected import NO_LIST
from tms.rules.quotes import CHARACTER_MAP, WHITESPACE
from tms.rules.spans import casefold_table
from tms.types import MAX_CONTENT_CHARS

MAX_EXPECTED: Final = 16  # collections a page's batch may state its expectations of
HINT_FREE_CHARS: Final = 100_000  # a text sent for a hint costs a fetch only when longer
# A batch is at most 1,000 events of a few fields each: far below these.
_BATCH_CONTAINERS: Final = 50_000
_BATCH_VALUES: Final = 500_000


@page
async def submit(request: Request) -> Response:
    door = door_of(request)
    session, reader = await door.reader(request)
    terms_signed = await services_of(request).keys.terms_signed(session.pubkey)
    chosen = request.query_params.get("c")
    return await door.render(
        request,
        "submit.html",
        collections=list(reader.slugs),
        chosen=chosen if chosen is not None and reader.may_read(chosen) else None,
        terms_signed=terms_signed,
        relations=RELATIONS,
        max_content_chars=MAX_CONTENT_CHARS,
    )


async def publish(request: Request) -> Response:
    """A batch signed in the browser, stored by the ledger as any other batch. Every event
    must be the session's key's: the page publishes what its user signed. A big body holds
    its slot of the process's (`tms.http.bodies.BigBodies`) until it is stored."""
    door = door_of(request)
    services = services_of(request)
    session = await door.writer(request)
    async with AsyncExitStack() as held:  # a big body's slot: until the batch is stored
        events, expected = await door.bodies.parsed(
            request.scope, request.receive, _parse_batch, _check_batch_file, held=held
        )
        for position, event in enumerate(events):
            signer = event.get("pubkey") if isinstance(event, dict) else None
            if signer != session.pubkey:
                raise Refused(
                    400,
                    f"events[{position}] is not signed by the key you are logged in with; "
                    "sign with the same extension account",
                ).refused_as(Refusal.INVALID, session.pubkey)
        id_shaped = id_shaped_claim(events)  # a pasted id never becomes a claim's text
        if id_shaped is not None:
            raise Refused(400, id_shaped).refused_as(Refusal.INVALID, session.pubkey)
        origin = Origin(Door.WEB, session.pubkey, clients.CURRENT.get())
        return ok(
            await services.ledger.submit(
                events, origin=origin, expected=expected or None, route="page publish"
            )
        )


async def fetch(request: Request) -> Response:
    """The Fetch button: `fetch_url` for logged-in keys, as the MCP tool."""
    door = door_of(request)
    services = services_of(request)
    session = await door.writer(request)
    body = _json(await small_body(request.scope, request.receive, SMALL_JSON), _FETCH_BODY, 10, 10)
    url = body.get("url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url.strip():
        raise Refused(400, "paste an http(s) URL to fetch").refused_as(
            Refusal.INVALID, session.pubkey
        )
    await services.access.require_user(session.pubkey)
    await services.throttle.fetch(session.pubkey)
    try:
        result = await fetch_url(url, allow=services.fetch_allow)
    except FetchError as exc:
        raise exc.refused_as(exc.refusal, session.pubkey) from None
    # Kept for the quote hints: the page quotes from what it fetched, and then need not
    # send the text back for a hint.
    await door.texts.remember(session.pubkey, result["text"])
    return ok(result)


async def lookup(request: Request) -> Response:
    """What the submit page checks before signing, in a collection the key may read: the
    evidence already stored, claims already there, the records pasted ids name. A
    collection it may not read gets the same 404 as one that does not exist."""
    door = door_of(request)
    services = services_of(request)
    session = await door.writer(request)
    body = _json(
        await small_body(request.scope, request.receive, SMALL_JSON), _LOOKUP_BODY, 64, 256
    )
    try:
        asked = parse_lookup(body)
    except BadLookup as exc:
        raise Refused(400, _LOOKUP_BODY.format(exc)) from None
    readable = await services.access.collection(session.pubkey, request.path_params["slug"])
    await services.throttle.key(session.pubkey)
    return ok(await answer_lookup(services.lookups, readable, asked))


async def nearest(request: Request) -> Response:
    """The passage of an evidence text nearest a quote that is not in it, as a bot's
    refused publish says. Rate-limited by the key's budget, and, when a long text itself is
    sent (at most once per text: see `Texts`), by its fetch budget too: hashing and
    normalizing two million characters costs as much as extracting a page."""
    door = door_of(request)
    services = services_of(request)
    session = await door.writer(request)
    body = await door.hint_bodies.parsed(request.scope, request.receive, _parse_hint_body)
    try:
        sha256, quote, text = parse_hint(body)
    except BadLookup as exc:
        raise Refused(400, _HINT_BODY.format(exc)) from None
    await services.throttle.key(session.pubkey)
    if (
        text is not None
        and len(text) > HINT_FREE_CHARS
        and not door.texts.has(session.pubkey, sha256)
    ):
        await services.throttle.fetch(session.pubkey)
    try:
        return ok(await door.texts.nearest(session.pubkey, sha256, quote, text))
    except BadLookup as exc:
        raise Refused(400, str(exc)).refused_as(Refusal.INVALID, session.pubkey) from None


async def normalization(request: Request) -> Response:
    """The server's quote normalization as data, for the submit page's script: this
    Python's case folding, character by character, and the character map."""
    table = await asyncio.to_thread(casefold_table)
    body = {"casefold": table, "map": dict(CHARACTER_MAP), "whitespace": WHITESPACE}
    return JSONResponse(body, headers={"Cache-Control": "public, max-age=3600"})


# --- reading the bodies ------------------------------------------------------------------------


_FETCH_BODY: Final = 'send {{"url": "..."}} as JSON ({})'
_LOOKUP_BODY: Final = "not a look-up the submit page sends: {}"
_HINT_BODY: Final = "not a hint request the submit page sends: {}"


def _json(data: bytes, refusal: str, containers: int, values: int) -> Any:
    """A small JSON body within its shape's bounds, or `refusal` saying why it is not."""
    try:
        return loads_bounded(data, max_containers=containers, max_values=values)
    except (ValueError, RecursionError) as exc:
        raise Refused(400, refusal.format(exc)) from None


def _parse_hint_body(data: bytes) -> Any:
    """Two or three strings (a text may be megabytes long): parsed off the event loop."""
    return _json(data, _HINT_BODY, 4, 16)


def _parse_batch(data: bytes) -> tuple[list[Any], dict[str, str | None]]:
    """The body's events, and what the page expected of their collections (`expected`,
    optional: see `tms.rules.expected`)."""
    try:
        body = loads_bounded(data, max_containers=_BATCH_CONTAINERS, max_values=_BATCH_VALUES)
    except UnicodeDecodeError:
        raise Refused(400, "the body is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise Refused(400, f"the body is not JSON: {sendable(str(exc))[:200]}") from None
    if (
        not isinstance(body, dict)
        or "events" not in body
        or not set(body) <= {"events", "expected"}
        or not isinstance(body["events"], list)
    ):
        raise Refused(400, 'send {"events": [...]}: a list of signed events')
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
        raise Refused(
            400,
            'expected must map collection slugs to null (not created yet), "" (no member list '
            f"yet) or a member list's id; at most {MAX_EXPECTED}",
        )
    return value


def _check_batch_file(path: Path) -> None:
    """In a worker process: a big batch parses within its bounds (or the error says why)."""
    _parse_batch(path.read_bytes())


GET: Final = ["GET"]
POST: Final = ["POST"]

ROUTES: Final = [
    Route("/submit", submit, methods=GET, name="submit"),
    Route("/publish", publish, methods=POST, name="page publish"),
    Route("/fetch", fetch, methods=POST, name="page fetch"),
    Route("/c/{slug}/lookup", lookup, methods=POST, name="page lookup"),
    Route("/quotes/nearest", nearest, methods=POST, name="page nearest"),
    Route("/quotes/normalization.json", normalization, methods=GET, name="quote normalization"),
]
