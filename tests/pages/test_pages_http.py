"""The pages' HTTP side without a browser: login (one use per nonce, SPEC's refusal for an
unknown key), same-origin and CSRF checks on every state-changing request, the publish body's
bounds, one 404 page for missing and closed, export with the login cookie."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import httpx
import pytest
from factories import (
    Live,
    claim,
    contradiction,
    evidence,
    fresh_database,
    link,
    live_server,
    members,
    nip98_header,
    settings,
    terms,
)

from tms.ledger.service import Ledger
from tms.ledger.write.anchors import backfill
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

OWNER = SecretKey(bytes([0x91]) * 32)
MEMBER = SecretKey(bytes([0x92]) * 32)
OTHER = SecretKey(bytes([0x93]) * 32)  # approved, owns `other`
STRANGER = SecretKey(bytes([0x94]) * 32)
DOC = evidence(OWNER, "mcas", "Die Straße ist lang. Die STRASSE ist breit.")
ROAD = claim(OWNER, "mcas", "The road is long.")
QUOTED = link(OWNER, "mcas", DOC["id"], ROAD["id"], "strasse ist")


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey, OTHER.pubkey])
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, "mcas", [MEMBER.pubkey]),
                    claim(OWNER, "mcas", "A claim."),
                    DOC,
                    ROAD,
                    QUOTED,
                    terms(OTHER),
                    claim(OTHER, "other", "Elsewhere."),
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_pages") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


def login(live: Live, key: SecretKey, *, origin: str | None = None) -> httpx.Response:
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        signed = key.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        return client.post(
            challenge["url"],
            headers={"Authorization": nip98_header(signed), "Origin": origin or live.url},
        )


@contextmanager
def session(live: Live, key: SecretKey) -> Iterator[httpx.Client]:
    answer = login(live, key)
    assert answer.status_code == 200, answer.text
    # A timeout above the server's own deadlines: what is checked is the answer, not how soon
    # a loaded machine gives it (a 1.2 MB body parsed in a worker process took over httpx's 5 s).
    with httpx.Client(base_url=live.url, cookies=answer.cookies, timeout=30) as client:
        home = client.get("/").text
        csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
        client.headers.update({"Origin": live.url, "X-CSRF-Token": csrf})
        yield client


def test_login_sets_a_strict_cookie_and_each_nonce_works_once(live: Live) -> None:
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        assert challenge["url"].startswith(f"{live.url}/login?nonce=")
        tags = [["u", challenge["url"]], ["method", "POST"]]
        event = OWNER.sign(27235, "", int(time.time()), tags)
        headers = {"Authorization": nip98_header(event), "Origin": live.url}
        first = client.post(challenge["url"], headers=headers)
        assert first.status_code == 200 and first.json()["pubkey"] == OWNER.pubkey
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Max-Age=43200" in cookie
        assert "Secure" not in cookie  # http here; https sets it
        again = client.post(challenge["url"], headers=headers)
    assert again.status_code == 401
    assert again.json() == {"error": "this login was already used: connect again"}


def test_logins_that_do_not_hold_up_are_refused(live: Live) -> None:
    stranger = login(live, STRANGER)
    assert stranger.status_code == 403
    assert stranger.json()["error"] == (
        f"pubkey {STRANGER.pubkey} is not approved and is not a member of any collection"
    )
    assert login(live, OWNER, origin="https://evil.example").status_code == 403
    forged = httpx.post(f"{live.url}/login?nonce=1.2.3", headers={"Origin": live.url})
    assert forged.status_code == 401
    assert "missing Authorization header" in forged.json()["error"]


def test_state_changing_requests_need_the_origin_and_the_csrf_token(live: Live) -> None:
    with session(live, OWNER) as client:
        batch = {"events": [claim(OWNER, "mcas", f"Claim {time.time()}")]}
        assert client.post("/publish", json=batch).status_code == 200
        cross = client.post("/publish", json=batch, headers={"Origin": "https://evil.example"})
        assert cross.status_code == 403 and "cross-site" in cross.json()["error"]
        stale = client.post("/publish", json=batch, headers={"X-CSRF-Token": "0" * 64})
        assert stale.status_code == 403 and "CSRF" in stale.json()["error"]
        anonymous = httpx.post(f"{live.url}/publish", json=batch, headers={"Origin": live.url})
        assert anonymous.status_code == 401
        logout = httpx.post(
            f"{live.url}/logout", cookies=client.cookies, headers={"Origin": live.url}
        )
        assert logout.status_code == 403  # no CSRF token in the form: the session stays
        assert "Log out" in client.get("/").text


def test_the_publish_body_is_bounded_and_checked(live: Live) -> None:
    with session(live, OWNER) as client:
        other = client.post("/publish", json={"events": [claim(MEMBER, "mcas", "Not mine.")]})
        assert (
            other.status_code == 400
            and "not signed by the key you are logged in with" in (other.json()["error"])
        )
        for body, words in [
            (b"nonsense", "not JSON"),
            (b'{"events": 1}', 'send {"events": [...]}'),
            (b'{"events": [], "events": []}', "duplicate key"),
            (b"[]," * 400_000, "more than 50,000 arrays"),
        ]:
            answer = client.post("/publish", content=body)
            assert answer.status_code == 400, body[:40]
            assert words in answer.json()["error"]
        refused = client.post("/publish", json={"events": [claim(OWNER, "other", "Intruding.")]})
        assert refused.status_code == 400
        assert refused.json()["error"].startswith("events[0] (")


def test_a_closed_collection_reads_exactly_as_a_missing_one(live: Live) -> None:
    with session(live, MEMBER) as client:
        closed = client.get("/c/other", headers={"Accept": "text/html"})
        missing = client.get("/c/nothing", headers={"Accept": "text/html"})
        assert closed.status_code == missing.status_code == 404
        assert closed.text == missing.text
        event = client.get("/c/mcas/claims/" + "ab" * 32)
        assert event.status_code == 404 and event.text == closed.text
        assert client.get("/c/mcas/members").status_code == 200  # a member reads the list
        assert "members-form" not in client.get("/c/mcas/members").text  # and cannot edit it
        assert client.get("/c/mcas/members.json").status_code == 404
        unknown = client.get("/no/such/page", headers={"Accept": "text/html"})
        assert unknown.status_code == 404 and "Not found" in unknown.text


def test_the_evidence_page_marks_a_quote_where_its_anchor_says(live: Live) -> None:
    """The page marks the span stored with the link (its first whole occurrence, `Straße ist`).
    A link without an anchor yet (stored before anchors existed) is listed but not marked, and
    its claim page shows its quote without context: neither page looks for it in the text.
    The start-up back-fill then anchors it, with its context."""
    with session(live, MEMBER) as client:
        page = client.get(f"/c/mcas/evidence/{DOC['id']}").text
        assert f'<mark data-links="{QUOTED["id"]}">Straße ist</mark>' in page

        async def on_database(sql: str, *args: object) -> None:
            conn = await asyncpg.connect(live.database_url)
            try:
                await conn.execute(sql, *args)
            finally:
                await conn.close()

        # the second occurrence, as a stored anchor may say
        move = "UPDATE link_anchors SET start_offset = $1, end_offset = $1 + 11 WHERE link_id = $2"
        asyncio.run(on_database(move, 25, QUOTED["id"]))
        page = client.get(f"/c/mcas/evidence/{DOC['id']}").text
        assert f'<mark data-links="{QUOTED["id"]}">STRASSE ist</mark>' in page

        forget = "DELETE FROM link_anchors WHERE link_id = $1"
        asyncio.run(on_database(forget, QUOTED["id"]))
        page = client.get(f"/c/mcas/evidence/{DOC['id']}").text
        assert "<mark" not in page.split('id="document"')[1].split("</div>")[0]
        assert "0 of 1 quote marked." in page and f'id="quote-{QUOTED["id"]}"' in page
        claim_page = client.get(f"/c/mcas/claims/{ROAD['id']}").text
        shown = claim_page.split(f'id="link-{QUOTED["id"]}"')[1].split("</blockquote>")[0]
        assert shown.endswith('<blockquote class="context"><mark>strasse ist</mark>')

        async def back_fill() -> int:
            pool = await open_pool(live.database_url, min_size=1, max_size=1)
            try:
                return await backfill(pool)
            finally:
                await pool.close()

        assert asyncio.run(back_fill()) == 1
        page = client.get(f"/c/mcas/evidence/{DOC['id']}").text
        assert f'<mark data-links="{QUOTED["id"]}">Straße ist</mark>' in page
        claim_page = client.get(f"/c/mcas/claims/{ROAD['id']}").text
        assert "Die <mark>Straße ist</mark> lang. Die STRASSE ist breit.</blockquote>" in claim_page


def test_export_with_the_login_cookie(live: Live) -> None:
    with session(live, MEMBER) as client:
        export = client.get("/c/mcas/export.jsonl")
        assert export.status_code == 200
        kinds = [json.loads(line)["kind"] for line in export.text.splitlines()]
        assert 4705 in kinds and 4702 in kinds
        assert client.get("/c/other/export.jsonl").status_code == 404
        # The collection page also offers the export that ends with the signed checkpoint.
        page = client.get("/c/mcas").text
        assert 'href="/c/mcas/export.jsonl?checkpoint=1"' in page
        lines = client.get("/c/mcas/export.jsonl?checkpoint=1").text.splitlines()
        assert len(lines) == len(kinds) + 1
        assert "kind" not in json.loads(lines[-1]) and "entries" in json.loads(lines[-1])


def test_logged_out_visitors_are_sent_to_connect_and_back(live: Live) -> None:
    answer = httpx.get(f"{live.url}/c/mcas?sort=links")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/?next=/c/mcas?sort=links"
    page = httpx.get(f"{live.url}/?next=//evil.example").text
    assert 'data-next="/"' in page


def test_each_quote_on_the_evidence_page_says_what_it_points_at_and_links_only_to_pages(
    live: Live,
) -> None:
    """A link may target a claim, a link, a contradiction or an evidence; only claims and
    evidence have pages, and a link is shown on its claim's page. Every href resolves."""
    other_claim = claim(OWNER, "mcas", "The road is wide.")
    disputed = contradiction(OWNER, "mcas", [ROAD["id"], other_claim["id"]], "long or wide")
    second_doc = evidence(OWNER, "mcas", "Another text.", title="The second text")
    on_link = link(OWNER, "mcas", DOC["id"], QUOTED["id"], "Die Straße", relation="REBUTS")
    on_contradiction = link(OWNER, "mcas", DOC["id"], disputed["id"], "ist breit")
    on_evidence = link(OWNER, "mcas", DOC["id"], second_doc["id"], "ist lang")

    async def publish() -> None:
        pool = await open_pool(live.database_url, min_size=1, max_size=2)
        try:
            batch = [other_claim, disputed, second_doc, on_link, on_contradiction, on_evidence]
            await Ledger(pool).submit(batch, origin=OPERATOR)
        finally:
            await pool.close()

    asyncio.run(publish())
    with session(live, MEMBER) as client:
        page = client.get(f"/c/mcas/evidence/{DOC['id']}").text
        quotes = page.split('<section class="section" id="quotes">')[1]
        item = {
            found["id"]: quotes.split(f'id="quote-{found["id"]}"')[1].split("</li>")[0]
            for found in (QUOTED, on_link, on_contradiction, on_evidence)
        }
        assert f'href="/c/mcas/claims/{ROAD["id"]}#link-{QUOTED["id"]}"' in item[QUOTED["id"]]
        assert "supports the claim: " in item[QUOTED["id"]]
        assert "rebuts the link: " in item[on_link["id"]]
        assert f'href="/c/mcas/claims/{ROAD["id"]}#link-{QUOTED["id"]}"' in item[on_link["id"]]
        assert "supports the contradiction: long or wide" in item[on_contradiction["id"]]
        assert 'href="/c/' not in item[on_contradiction["id"]]  # no page of its own to open
        assert "supports the evidence: " in item[on_evidence["id"]]
        assert "The second text" in item[on_evidence["id"]]
        # The quoted link is disputed by `on_link`: its mark links to where that link is shown.
        dispute = f"/c/mcas/evidence/{DOC['id']}#quote-{on_link['id']}"
        assert f'href="{dispute}"' in item[QUOTED["id"]].split('class="disputes"')[1]
        every = {part.split('"')[0] for part in quotes.split('href="')[1:]}
        hrefs = {href for href in every if not href.startswith("/submit?")}  # not Dispute
        assert len(hrefs) == 4 and dispute in hrefs
        for href in hrefs:
            answer = client.get(href.split("#")[0])
            assert answer.status_code == 200, href
            if "#link-" in href:
                assert f'id="link-{href.split("#link-")[1]}"' in answer.text
