"""A collection's pages: its claims (by each of `list_claims`' sorts, or searched) and evidence,
and its members: for its owner, the member list editor with the head it compares before
signing; for a member, the same list to read (who else is in)."""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms.errors import LogError, NotAReader
from tms.ledger import CLAIM_SORTS, LogReads, ReadableCollection, watermark
from tms.nostr.nip19 import npub_encode
from tms.pages.door import door_of, ok, page, services_of
from tms.relay.endpoint import with_info
from tms.search.search import Method
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, KIND_EVIDENCE, KIND_LINK, MAX_QUERY_CHARS

CLAIMS_SHOWN: Final = 100  # a page of claims
SEARCH_PAGES: Final = 10  # a search shows its best 1,000: the rest is better found by refining it
EVIDENCE_SHOWN: Final = 100
MAX_NOTE_CHARS: Final = 80  # of a profile name, shown as a note on the members page
# What the page follows live (static/collection.js); what committed between its rendering and
# its subscription is caught up for the small kinds only (never a page-load of evidence texts).
LIVE_KINDS: Final = (KIND_EVIDENCE, KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION)
CAUGHT_UP_KINDS: Final = (KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION)


@page
async def collection(request: Request) -> Response:
    door = door_of(request)
    _, readable = await door.collection(request)
    services = services_of(request)
    # first: whatever commits while the page is read is caught up by its live part
    after = await watermark.newest(services.ledger.pool, readable, CAUGHT_UP_KINDS)
    sort = request.query_params.get("sort") or "recent"
    if sort not in CLAIM_SORTS:
        sort = "recent"
    text = (request.query_params.get("q") or "").strip()[:MAX_QUERY_CHARS]
    method: Method = "keyword" if request.query_params.get("method") == "keyword" else "vector"
    asked = _page_number(request.query_params.get("page"))
    search = None
    claims: list[Any] = []
    [info] = await services.reads.list_collections(readable.reader())
    if text:
        # a search ranks from the best down: a later page is the top of a longer ranking
        shown = min(asked, SEARCH_PAGES)
        search = await services.search.claims(readable, text, method, shown * CLAIMS_SHOWN)
        total = await services.search.claims_total(readable, text, search["method"], info["claims"])
        pages = min(SEARCH_PAGES, _pages(total))
        page_number = min(shown, pages)
        search["items"] = search["items"][(page_number - 1) * CLAIMS_SHOWN :][:CLAIMS_SHOWN]
        pager = {"sort": None, "q": text, "method": method}
    else:
        # the count kept as records are stored (sql/009), never a count of the claims
        total = info["claims"]
        pages = _pages(total)
        page_number = min(asked, pages)
        offset = (page_number - 1) * CLAIMS_SHOWN
        claims = list(await services.reads.list_claims(readable, sort, CLAIMS_SHOWN, offset))
        pager = {"sort": sort, "q": None, "method": None}
    first = (page_number - 1) * CLAIMS_SHOWN + 1
    listed = len(search["items"]) if search is not None else len(claims)
    evidence = await services.reads.list_evidence(readable, False, None, EVIDENCE_SHOWN)
    witnessed = await _witnessed(services.tlog, readable)
    return await door.render(
        request,
        "collection.html",
        slug=readable.slug,
        info=info,
        sort=sort,
        sorts=CLAIM_SORTS,
        query=text,
        method=method,
        search=search,
        claims=claims,
        page=page_number,
        pages=pages,
        shown={
            "first": first,
            "last": first + listed - 1,
            "of": total,
            "more": total > pages * CLAIMS_SHOWN,
            "cap": pages * CLAIMS_SHOWN,
        },
        pager_base="?" + urlencode({k: v for k, v in pager.items() if v}) + "&page=",
        pager_label="Pages of claims",
        evidence=evidence,
        evidence_cut=len(evidence) == EVIDENCE_SHOWN,
        live={"after": after, "kinds": LIVE_KINDS, "caught_up": CAUGHT_UP_KINDS},
        witnessed=witnessed,
    )


def _page_number(value: str | None) -> int:
    """`?page=N` as a page number: 1 when absent or not a plain positive number."""
    if value is None or not value.isdigit() or not value.isascii():
        return 1
    return max(1, min(int(value[:9]), 10**8))


def _pages(total: int) -> int:
    """Pages of CLAIMS_SHOWN for `total` claims; one, empty, for none."""
    return max(1, -(-total // CLAIMS_SHOWN))


async def _witnessed(tlog: LogReads, readable: ReadableCollection) -> dict[str, Any] | None:
    """What the witnesses vouch for (`tms.witness`): None when the server names none, or the
    collection has no log yet. `waiting`: the entries signed since the checkpoint shown, which
    no witness has cosigned yet (a quorum met says nothing of them)."""
    policy = tlog.cosigned.policy
    if policy is None:
        return None
    try:
        info = await tlog.witnessed(readable)
        latest = await tlog.checkpoint(readable)
    except LogError:
        return None
    return {
        "size": info["size"],
        "waiting": max(0, latest["size"] - info["size"]),
        "by": info.get("witnessed_by", []),
        "of": len(policy.witnesses),
        "quorum": info.get("quorum"),
        "needed": policy.describe(),
    }


@page
async def members(request: Request) -> Response:
    door = door_of(request)
    session, readable = await door.collection(request)
    services = services_of(request)
    slug = readable.slug
    current = await services.keys.member_list(readable)
    if current is None:
        raise NotAReader("no such collection")
    names = await services.keys.names([*current["members"], current["owner"]])
    listed = [
        {"pubkey": m, "npub": npub_encode(m), "name": names.get(m), "note": note_of(names.get(m))}
        for m in current["members"]
    ]
    return await door.render(
        request,
        "members.html",
        slug=slug,
        current=current,
        members=listed,
        member_lines=member_lines(listed),
        owner_name=names.get(current["owner"]),
        # a member reads the list (a reader of the collection sees its members' records
        # anyway); only the owner gets the editor
        editor=current["owner"] == session.pubkey,
    )


async def members_head(request: Request) -> Response:
    """The current list's head, which the members page compares with the one it loaded
    before signing: a list saved meanwhile elsewhere is shown, not overwritten unseen."""
    session = await door_of(request).session(request)
    if session is None:
        raise NotAReader("no such collection")
    services = services_of(request)
    owned = await services.access.owned(session.pubkey, request.path_params["slug"])
    current = await services.keys.member_list(owned)
    if current is None:
        raise NotAReader("no such collection")
    return ok(current)


def note_of(name: str | None) -> str:
    """A profile name as a line's `# note`: on one line, and no longer than a note is."""
    return " ".join(str(name or "").split())[:MAX_NOTE_CHARS]


def member_lines(listed: list[dict[str, Any]]) -> str:
    """The members page's textarea: one npub per line, its profile name as a `# note`, so that
    saving it unchanged signs the same list (the page's script puts back the notes the owner
    typed, in place of these)."""
    lines = [
        f"{member['npub']}  # {member['note']}" if member["note"] else member["npub"]
        for member in listed
    ]
    return "".join(f"{line}\n" for line in lines)


GET: Final = ["GET"]

ROUTES: Final = [
    Route("/c/{slug}", with_info(collection), methods=GET, name="collection"),
    Route("/c/{slug}/members", members, methods=GET, name="members"),
    Route("/c/{slug}/members.json", members_head, methods=GET, name="members head"),
]
