"""The claim and evidence pages over HTTP: quotes shown from their stored anchors (the claim page
served over a database role that cannot read any evidence text, so it provably never loads
one), full ids to copy, the ways to dispute, the "Contradicts…" picker's claims, a quote's own
quotation marks shown once."""

from __future__ import annotations

import asyncio
import html
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import httpx
import pytest
from factories import (
    Live,
    claim,
    contradiction,
    evidence,
    fresh_database,
    key,
    link,
    live_server,
    members,
    nip98_header,
    settings,
    terms,
)
from text_blind import drop_role, make_text_blind_role

from tms.ledger.read.excerpts import QUOTE_CHARS
from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.pages.reading import EVIDENCE_PAGE_CHARS, LINKS_SHOWN
from tms.rules.admission import OPERATOR
from tms.rules.anchors import CONTEXT_WINDOW_CHARS
from tms.store.database import open_pool
from tms.tlog.receipt import Receipt

OWNER: Final = key(0xA1)
MEMBER: Final = key(0xA2)
OTHER: Final = key(0xA3)  # approved, owns `other`
SLUG: Final = "reading"


def prose(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    words = "serum plasma diamine oxidase activity mast cell histamine review cohort".split()
    return " ".join(rng.choice(words) for _ in range(chars // 5))[:chars]


DEEP: Final = "Serum DAO did not predict symptoms in this cohort."
LONG_TEXT: Final = prose(399_000, 1) + " " + DEEP + " " + prose(600, 2)
AT: Final = LONG_TEXT.index(DEEP)
MARKED_TEXT: Final = (
    "Low DAO activity was found in most of them, which the authors call “a consistent "
    "pattern” — though not in every case."
)
LONG_DOC = evidence(OWNER, SLUG, LONG_TEXT, title="A long review")
MARKED_DOC = evidence(OWNER, SLUG, MARKED_TEXT, title="Quotation marks")
CLAIM = claim(OWNER, SLUG, "DAO predicts symptoms.")
OTHER_CLAIM = claim(OWNER, SLUG, "DAO does not predict symptoms.")
DEEP_LINK = link(OWNER, SLUG, LONG_DOC["id"], CLAIM["id"], DEEP.lower(), relation="REBUTS")
QUOTED_FROM: Final = LONG_TEXT.index(" ", 5_000) + 1  # a quote of whole words
QUOTED_TO: Final = LONG_TEXT.index(" ", 7_500)
LONG_QUOTE = link(OWNER, SLUG, LONG_DOC["id"], CLAIM["id"], LONG_TEXT[QUOTED_FROM:QUOTED_TO])
MARKED_LINK = link(OWNER, SLUG, MARKED_DOC["id"], CLAIM["id"], "“a consistent pattern”")
ON_LINK = link(  # a link whose target is a link quoting with quotation marks
    OWNER, SLUG, MARKED_DOC["id"], MARKED_LINK["id"], "not in every case", relation="REBUTS"
)
FOUND = contradiction(OWNER, SLUG, [CLAIM["id"], OTHER_CLAIM["id"]], "Both cannot hold.")
ELSEWHERE = claim(OTHER, "other", "DAO predicts symptoms elsewhere.")
CROWDED = claim(OWNER, SLUG, "Most adults with symptoms have low DAO.")
CROWD = [  # more links than a claim page shows
    link(OWNER, SLUG, MARKED_DOC["id"], CROWDED["id"], "Low DAO activity", reason=f"Reason {n}.")
    for n in range(LINKS_SHOWN + 1)
]


@dataclass(frozen=True)
class Servers:
    live: Live  # a server over the tests' own role
    blind: Live  # a server over a role refused every evidence text


@pytest.fixture(scope="module")
def servers(pg_server_url: str, template_url: str) -> Iterator[Servers]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey, OTHER.pubkey])
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, SLUG, [MEMBER.pubkey]),
                    LONG_DOC,
                    MARKED_DOC,
                    CLAIM,
                    OTHER_CLAIM,
                    DEEP_LINK,
                    LONG_QUOTE,
                    MARKED_LINK,
                    ON_LINK,
                    FOUND,
                    terms(OTHER),
                    ELSEWHERE,
                    CROWDED,
                    *CROWD,
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_reading") as url:
        asyncio.run(seed(url))
        role, blind_url = asyncio.run(make_text_blind_role(url))
        try:
            config = settings(TMS_EMBED="off")
            with live_server(url, config) as live, live_server(blind_url, config) as blind:
                yield Servers(live, blind)
        finally:
            asyncio.run(drop_role(url, role))


@contextmanager
def login(live: Live, signer: SecretKey) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        tags = [["u", challenge["url"]], ["method", "POST"]]
        signed = signer.sign(27235, "", int(time.time()), tags)
        answer = client.post(
            challenge["url"],
            headers={"Authorization": nip98_header(signed), "Origin": live.url},
        )
        assert answer.status_code == 200, answer.text
        yield client


def between(page: str, start: str, end: str) -> str:
    return page.split(start, 1)[1].split(end, 1)[0]


def test_the_claim_page_shows_a_deep_quote_in_context_and_never_reads_a_text(
    servers: Servers,
) -> None:
    """Served over a role that cannot read an evidence text (any read of one fails), the
    page shows the quote 399,000 characters into its text, with the text either side; the
    page is small, whatever the texts' length."""
    with login(servers.blind, MEMBER) as client:
        answer = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}")
    assert answer.status_code == 200, answer.text
    page = answer.text
    shown = html.unescape(between(page, f'id="link-{DEEP_LINK["id"]}"', "</article>"))
    before = LONG_TEXT[AT - CONTEXT_WINDOW_CHARS : AT]
    after = LONG_TEXT[AT + len(DEEP) : AT + len(DEEP) + CONTEXT_WINDOW_CHARS]
    assert f'<blockquote class="context">…{before}<mark>{DEEP}</mark>{after}…</blockquote>' in shown
    page_of_quote = AT // EVIDENCE_PAGE_CHARS + 1
    assert f'href="/c/{SLUG}/evidence/{LONG_DOC["id"]}?page={page_of_quote}"' in shown
    assert ">A long review</a>" in shown
    assert len(answer.content) < 60_000  # four quotes, two of them in a 400,000-character text
    with login(servers.blind, MEMBER) as client:  # and the evidence page does read a text
        assert client.get(f"/c/{SLUG}/evidence/{LONG_DOC['id']}").status_code == 500


def test_a_long_quote_is_shortened_with_a_way_to_read_it_whole(servers: Servers) -> None:
    with login(servers.live, MEMBER) as client:
        page = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    shown = html.unescape(between(page, f'id="link-{LONG_QUOTE["id"]}"', "</article>"))
    head = LONG_TEXT[QUOTED_FROM : QUOTED_FROM + QUOTE_CHARS]
    assert f"<mark>{head}…</mark>{LONG_TEXT[QUOTED_TO : QUOTED_TO + 100]}" in shown
    assert "The quote is shortened here;" in shown
    assert f'href="/c/{SLUG}/evidence/{LONG_DOC["id"]}?page=1"' in shown


def test_the_claim_page_offers_full_ids_and_every_way_to_dispute(servers: Servers) -> None:
    with login(servers.live, MEMBER) as client:
        page = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    claim_panel = between(page, 'id="claim"', 'id="contradicts"')
    assert f'<code class="id full-id">{CLAIM["id"]}</code>' in claim_panel
    assert f'data-copy="{CLAIM["id"]}"' in claim_panel
    rebut = f'href="/submit?c={SLUG}&amp;to={CLAIM["id"]}&amp;relation=REBUTS">Rebut or qualify'
    assert rebut in claim_panel
    assert 'id="contradicts-open"' in claim_panel
    for shown in (DEEP_LINK, LONG_QUOTE, MARKED_LINK):
        item = between(page, f'id="link-{shown["id"]}"', "</article>")
        assert f'<code class="id full-id">{shown["id"]}</code>' in item
        assert f'data-copy="{shown["id"]}"' in item
        dispute = f'href="/submit?c={SLUG}&amp;to={shown["id"]}&amp;relation=REBUTS">Dispute'
        assert dispute in item
    found = between(page, f'id="contradiction-{FOUND["id"]}"', "</article>")
    assert f'<code class="id full-id">{FOUND["id"]}</code>' in found
    assert f'data-copy="{FOUND["id"]}"' in found
    assert f"to={FOUND['id']}&amp;relation=REBUTS" in found
    assert f'href="/c/{SLUG}/claims/{OTHER_CLAIM["id"]}">DAO does not predict' in found
    # After publishing, the page comes back naming the contradiction just stored.
    with login(servers.live, MEMBER) as client:
        added = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}?added={FOUND['id']}").text
        unknown = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}?added={'ab' * 32}").text
    assert 'id="contradiction-added"' in added and 'class="contradiction added"' in added
    assert 'id="contradiction-added"' not in unknown


def test_the_terms_come_before_a_contradiction(servers: Servers) -> None:
    """A member who has not agreed to the terms is told so before signing anything."""
    with login(servers.live, MEMBER) as client:
        page = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    assert "agree to the terms on the" in page
    assert re.search(r'id="contradicts-publish" disabled', page)
    with login(servers.live, OWNER) as client:
        page = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    assert "Publishing needs one signature from your Nostr extension" in page
    assert not re.search(r'id="contradicts-publish" disabled', page)


def test_the_picker_offers_the_collections_other_claims(servers: Servers) -> None:
    url = f"/c/{SLUG}/claims.json"
    with login(servers.live, MEMBER) as client:
        newest = client.get(url, params={"besides": CLAIM["id"]}).json()["claims"]
        assert [c["id"] for c in newest] == [CROWDED["id"], OTHER_CLAIM["id"]]
        assert newest[1] == {"id": OTHER_CLAIM["id"], "text": OTHER_CLAIM_TEXT, "more": False}
        every = client.get(url).json()["claims"]
        assert {c["id"] for c in every} == {CLAIM["id"], OTHER_CLAIM["id"], CROWDED["id"]}
        words = client.get(url, params={"q": "not predict", "besides": CLAIM["id"]}).json()
        assert [c["id"] for c in words["claims"]] == [OTHER_CLAIM["id"]]
        by_id = client.get(url, params={"q": OTHER_CLAIM["id"][:12] + "…"}).json()
        assert [c["id"] for c in by_id["claims"]] == [OTHER_CLAIM["id"]]
        nothing = client.get(url, params={"q": "elsewhere"}).json()
        assert nothing == {"claims": []}  # another collection's claims never come
        closed = client.get("/c/other/claims.json")
        missing = client.get("/c/nothing/claims.json")
        assert closed.status_code == missing.status_code == 404
        assert closed.json() == missing.json() == {"error": "no such collection"}
        odd = client.get(url, params={"q": "x" * 20_000, "besides": "not-an-id"})
        assert odd.status_code == 200 and odd.json() == {"claims": []}
    assert httpx.get(f"{servers.live.url}{url}").status_code == 404  # logged out


OTHER_CLAIM_TEXT: Final = "DAO does not predict symptoms."


def test_a_quote_s_own_quotation_marks_are_not_doubled(servers: Servers) -> None:
    """A quote that holds quotation marks shows them once: the pages add none around it."""
    with login(servers.live, MEMBER) as client:
        evidence_page = client.get(f"/c/{SLUG}/evidence/{MARKED_DOC['id']}").text
        claim_page = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    for page in (evidence_page, claim_page):
        assert "““" not in page and "””" not in page
        assert "“a consistent pattern”" in page
    listed = between(evidence_page, f'id="quote-{MARKED_LINK["id"]}"', "</li>")
    assert '<blockquote class="quoted">“a consistent pattern”</blockquote>' in listed
    target = between(evidence_page, f'id="quote-{ON_LINK["id"]}"', "</li>")
    assert "rebuts the link: " in target
    assert ">“a consistent pattern”</a></span>" in target


def test_the_evidence_page_reads_one_window_and_offers_its_id(servers: Servers) -> None:
    page_of_quote = AT // EVIDENCE_PAGE_CHARS + 1
    with login(servers.live, MEMBER) as client:
        answer = client.get(f"/c/{SLUG}/evidence/{LONG_DOC['id']}?page={page_of_quote}")
        last = -(-len(LONG_TEXT) // EVIDENCE_PAGE_CHARS)
        past = client.get(f"/c/{SLUG}/evidence/{LONG_DOC['id']}?page={last + 1}")
        huge = client.get(f"/c/{SLUG}/evidence/{LONG_DOC['id']}?page=99999999999")
    assert past.status_code == huge.status_code == 404
    page = answer.text
    document = html.unescape(between(page, '<div class="document" id="document">', "</div>"))
    start = (page_of_quote - 1) * EVIDENCE_PAGE_CHARS
    window = LONG_TEXT[start : start + EVIDENCE_PAGE_CHARS]
    marked = f'<mark data-links="{DEEP_LINK["id"]}">{DEEP}</mark>'
    assert document == window.replace(DEEP, marked)
    assert f'<code class="id full-id">{LONG_DOC["id"]}</code>' in page
    assert f'data-copy="{LONG_DOC["id"]}"' in page
    assert f"{len(LONG_TEXT):,} characters" in page
    assert len(answer.content) < 2 * EVIDENCE_PAGE_CHARS + 20_000


def test_a_claim_with_more_links_than_a_page_shows_says_so(servers: Servers) -> None:
    with login(servers.live, MEMBER) as client:
        page = client.get(f"/c/{SLUG}/claims/{CROWDED['id']}").text
        fewer = client.get(f"/c/{SLUG}/claims/{CLAIM['id']}").text
    assert page.count('<article class="link"') == LINKS_SHOWN
    assert f"here are the first {LINKS_SHOWN}, oldest first" in page
    assert f'id="link-{CROWD[0]["id"]}"' in page and f'id="link-{CROWD[-1]["id"]}"' not in page
    assert 'id="links-cut"' not in fewer


def test_the_claim_and_evidence_pages_offer_a_receipt(servers: Servers) -> None:
    """The "Receipt" link of each page downloads, with the login cookie, the C2SP tlog-proof
    carrying that record (`tms verify-receipt` checks it: tests/mcp/test_receipts.py)."""
    pages = [("claims", CLAIM, 'id="claim"'), ("evidence", MARKED_DOC, 'id="evidence"')]
    with login(servers.live, MEMBER) as client:
        for path, record, panel in pages:
            page = client.get(f"/c/{SLUG}/{path}/{record['id']}").text
            href = f"/c/{SLUG}/receipt/{record['id']}"
            link = f'<a id="receipt" href="{href}" download="{record["id"][:16]}.tlog-proof"'
            assert link in between(page, panel, "</article>")
            answer = client.get(href)
            assert answer.status_code == 200, answer.text
            receipt = Receipt.parse(answer.text)
            assert receipt.extra is not None
            assert Event.from_json(receipt.extra).to_dict() == record
    with httpx.Client(base_url=servers.live.url) as stranger:  # no cookie: as the export
        refused = stranger.get(f"/c/{SLUG}/receipt/{CLAIM['id']}")
        assert refused.status_code == stranger.get(f"/c/{SLUG}/export.jsonl").status_code == 401
