"""The reading pages: a claim with the links pointing at it (each quote in its stored context)
and the contradictions naming it; one page of an evidence text with every quote of it marked
where its stored anchor says; and the claims the claim page's "Contradicts…" picker offers.
Wherever a link is shown, so are the REBUTS links aimed at it (`tms.ledger.read.disputes`).

Quotes are located one way only: by the anchors stored when each link was published, with their
context (`tms.ledger.read.excerpts`). No page reads an evidence text whole or searches it, so a page
costs bounded time and memory whatever the collection holds.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Final, NamedTuple
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms.ledger import ReadableCollection, Reads, ShownLink, watermark
from tms.nostr.events import is_hex64
from tms.pages.door import door_of, ok, page, services_of
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    MAX_CONTENT_CHARS,
    MAX_QUERY_CHARS,
)

EVIDENCE_PAGE_CHARS: Final = 20_000  # evidence text shown per page
LINKS_SHOWN: Final = 200  # links read for a claim page, and quotes marked on an evidence page
CONTRADICTIONS_SHOWN: Final = 50  # on a claim page
CHOICES_SHOWN: Final = 20  # claims the "Contradicts…" picker offers at once
RELATIONS: Final = ("SUPPORTS", "REBUTS", "QUALIFIES")
LIVE_KINDS: Final = (KIND_LINK, KIND_CONTRADICTION)  # what the claim page follows (claim-live.js)


@page
async def claim(request: Request) -> Response:
    """A claim, the links pointing at it with each quote in its context (read from the
    stored anchors, never from the evidence texts) and the links disputing each, and the
    contradictions naming it."""
    door = door_of(request)
    session, readable = await door.collection(request)
    services = services_of(request)
    # first: whatever commits while the page is read is caught up by its live part
    after = await watermark.newest(services.ledger.pool, readable, LIVE_KINDS)
    event_id = request.path_params["event_id"]
    event = None
    if is_hex64(event_id):
        event = await services.reads.get_event(readable.reader(), event_id)
    if event is None or event["kind"] != KIND_CLAIM:
        return await door.not_found(request)
    links = await services.reads.shown_links(readable, to_id=event_id, limit=LINKS_SHOWN)
    link_ids = [found.id for found in links]
    contexts, disputes, contradictions, terms_signed = await asyncio.gather(
        services.reads.quote_contexts(readable, link_ids),
        services.reads.link_disputes(readable, link_ids),
        services.reads.shown_contradictions(readable, event_id, CONTRADICTIONS_SHOWN),
        services.keys.terms_signed(session.pubkey),
    )
    by_relation = {
        relation: [
            {
                "link": found,
                "context": contexts.get(found.id),
                "disputes": disputes.get(found.id),
            }
            for found in links
            if found.relation == relation
        ]
        for relation in RELATIONS
    }
    added = request.query_params.get("added")
    return await door.render(
        request,
        "claim.html",
        slug=readable.slug,
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
        live={"after": after, "kinds": LIVE_KINDS, "caught_up": LIVE_KINDS},
    )


async def claim_choices(request: Request) -> Response:
    """The claims the claim page's "Contradicts…" picker offers, as JSON: the newest, or
    those matching `q` (words, or a claim id or the start of one), never `besides`."""
    _, readable = await door_of(request).collection(request)
    words = (request.query_params.get("q") or "").strip()[:MAX_QUERY_CHARS]
    besides = request.query_params.get("besides") or ""
    choices = await services_of(request).reads.claim_choices(
        readable, words, besides if is_hex64(besides) else "", CHOICES_SHOWN
    )
    return ok({"claims": [{"id": c.id, "text": c.text.text, "more": c.text.more} for c in choices]})


@page
async def evidence(request: Request) -> Response:
    """One page of an evidence text (a window read in SQL), each quote of it marked where
    its stored anchor says, and what each link quoting it points at and what disputes it."""
    door = door_of(request)
    _, readable = await door.collection(request)
    services = services_of(request)
    event_id = request.path_params["event_id"]
    try:
        shown = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        shown = 1
    offset = (shown - 1) * EVIDENCE_PAGE_CHARS
    if not is_hex64(event_id) or offset > MAX_CONTENT_CHARS:
        return await door.not_found(request)
    window = await services.reads.evidence_window(readable, event_id, offset, EVIDENCE_PAGE_CHARS)
    if window is None:
        return await door.not_found(request)
    pages = max(1, -(-window.chars // EVIDENCE_PAGE_CHARS))
    if shown > pages:
        return await door.not_found(request)
    links = await services.reads.shown_links(readable, from_id=event_id, limit=LINKS_SHOWN)
    # Each link's anchor, stored when it was published; a link stored before anchors
    # existed is not marked until the start-up back-fill reaches it.
    spans = [
        (found.start, found.end, found.id)
        for found in links
        if found.start is not None and found.end is not None
    ]
    targets, disputes = await asyncio.gather(
        link_targets(readable, links, services.reads),
        services.reads.link_disputes(readable, [found.id for found in links]),
    )
    end = offset + len(window.text)
    return await door.render(
        request,
        "evidence.html",
        slug=readable.slug,
        evidence=window,
        segments=marked(window.text, offset, spans),
        links=[
            {
                "link": found,
                "target": targets.get(found.to_id),
                "page": page_of(found),
                "disputes": disputes.get(found.id),
            }
            for found in links
        ],
        # what this page marks: of a long text's quotes, those in its window only
        marked={link for start, stop, link in spans if stop > offset and start < end},
        page=shown,
        pages=pages,
    )


def page_of(found: ShownLink) -> int | None:
    """The page of the evidence page that marks a link's quote (where it starts); None for a
    link not anchored yet."""
    return None if found.start is None else found.start // EVIDENCE_PAGE_CHARS + 1


class Target(NamedTuple):
    """What a link on the evidence page points at: its kind, words to show (a link's are its
    quote, shown as a quote by the page, never wrapped in quotation marks of ours: a quote's
    own would show doubled), and the page that shows it (None when no page does)."""

    kind: str
    words: str
    href: str | None


async def link_targets(
    readable: ReadableCollection, links: list[ShownLink], reads: Reads
) -> dict[str, Target]:
    """What each link points at, and where a page shows it: a claim or an evidence has its
    own page, a link is shown on its claim's page, a contradiction on no page of its own
    (only its words are given). A target outside the collection is simply absent."""
    cited = await reads.cited(readable, {found.to_id for found in links})
    inner = {c.to for c in cited.values() if c.kind == KIND_LINK and c.to is not None}
    below = await reads.cited(readable, inner - cited.keys()) if inner else {}
    kinds = {i: c.kind for i, c in (below | cited).items()}
    base = f"/c/{quote(readable.slug)}"
    targets: dict[str, Target] = {}
    for target_id, c in cited.items():
        if c.kind == KIND_CLAIM:
            targets[target_id] = Target("claim", c.text or "", f"{base}/claims/{target_id}")
        elif c.kind == KIND_EVIDENCE:
            title = c.title or "Untitled document"
            targets[target_id] = Target("evidence", title, f"{base}/evidence/{target_id}")
        elif c.kind == KIND_LINK:
            shown = c.to is not None and kinds.get(c.to) == KIND_CLAIM
            href = f"{base}/claims/{c.to}#link-{target_id}" if shown else None
            targets[target_id] = Target("link", c.quote or "", href)
        else:
            targets[target_id] = Target("contradiction", c.reason or "", None)
    return targets


def marked(window: str, offset: int, spans: list[tuple[int, int, str]]) -> list[dict[str, Any]]:
    """The window cut into pieces, each either plain or inside one or more quoted spans (with
    the ids of the links quoting it), for the template to escape and mark."""
    end = offset + len(window)
    cuts = {offset, end}
    for start, stop, _ in spans:
        if stop > offset and start < end:
            cuts.update((max(start, offset), min(stop, end)))
    points = sorted(cuts)
    segments: list[dict[str, Any]] = []
    for left, right in itertools.pairwise(points):
        links = [link for start, stop, link in spans if start <= left and right <= stop]
        segments.append({"text": window[left - offset : right - offset], "links": links})
    return segments


GET: Final = ["GET"]

ROUTES: Final = [
    Route("/c/{slug}/claims.json", claim_choices, methods=GET, name="claim choices"),
    Route("/c/{slug}/claims/{event_id}", claim, methods=GET, name="claim"),
    Route("/c/{slug}/evidence/{event_id}", evidence, methods=GET, name="evidence"),
]
