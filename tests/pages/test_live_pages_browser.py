"""The collection and claim pages, live, in Chromium: records published while a page is open
(over MCP, by the official SDK client) appear on it without a reload, through the site's own
relay on a WebSocket that the login cookie authenticates; whatever a record holds is shown as
text. Without the relay (no JavaScript, a WebSocket refused) the pages are as they were rendered
and say nothing. Screenshots at desktop and phone width."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any, Final

import pytest
from browser import DESKTOP, PHONE, Person, connect, on_ledger, shot
from factories import (
    EventDict,
    Live,
    claim,
    contradiction,
    evidence,
    key,
    link,
    members,
    profile,
    terms,
)
from mcp import Client
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

OWNER: Final = key(0xC1)  # approved; terms and profile signed
MEMBER: Final = key(0xC2)  # a member; terms and profile signed
SLUG: Final = "live"
TEXT: Final = (
    "In 40 adults, low DAO activity went with symptoms in most cases, though not in all of them."
)
DOC = evidence(OWNER, SLUG, TEXT, title="DAO in 40 adults", source="Example journal")
CLAIM = claim(OWNER, SLUG, "Low DAO activity causes histamine intolerance.")
RIVAL = claim(OWNER, SLUG, "Histamine intolerance has nothing to do with DAO.")
SUPPORT = link(OWNER, SLUG, DOC["id"], CLAIM["id"], "went with symptoms in most cases")
HOSTILE: Final = "<img src=x id=injected> & <b>not bold</b>"


@pytest.fixture(scope="module", autouse=True)
def world(site: Live) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                profile(OWNER, "Olive Owner", about="human"),
                members(OWNER, SLUG, [MEMBER.pubkey]),
                terms(MEMBER),
                profile(MEMBER, "Mia Member", about="agent"),
                DOC,
                CLAIM,
                RIVAL,
                SUPPORT,
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, seed)


def over_mcp(site: Live, events: list[EventDict]) -> dict[str, Any]:
    """`publish` through the official MCP SDK client, from a thread of its own (Playwright's
    loop runs in this one)."""
    answers: list[Any] = []

    async def publish() -> None:
        async with Client(site.mcp) as client:
            answers.append(await client.call_tool("publish", {"events": events}))

    thread = threading.Thread(target=lambda: asyncio.run(publish()))
    thread.start()
    thread.join(60)
    [answer] = answers
    assert not answer.is_error, answer.content[0].text
    result: dict[str, Any] = answer.structured_content
    return result


def live_page(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("html[data-live='on']", state="attached")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads


def no_overflow(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the phone page is {width} px wide"


def test_a_claim_page_shows_a_link_and_a_contradiction_as_they_are_published(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MEMBER, people).page
    live_page(page, f"{site.url}/c/{SLUG}/claims/{CLAIM['id']}")
    expect(page.locator("#live")).to_be_visible()
    expect(page.locator("#rebuts .count")).to_have_text("0")
    study = evidence(
        MEMBER,
        SLUG,
        "Several patients had normal DAO activity and still had symptoms.",
        title="Normal DAO, symptoms anyway",
    )
    rebut = link(
        MEMBER,
        SLUG,
        study["id"],
        CLAIM["id"],
        "normal DAO activity",
        relation="REBUTS",
        reason=f"Symptoms without low DAO. {HOSTILE}",
    )
    elsewhere = link(MEMBER, SLUG, study["id"], RIVAL["id"], "still had symptoms")
    over_mcp(site, [study, rebut, elsewhere])
    shown = page.locator(f"#rebuts #link-{rebut['id']}")
    expect(shown).to_be_visible()
    expect(shown.locator(".context mark")).to_have_text("normal DAO activity")
    expect(shown.locator(".meta a")).to_have_text("Normal DAO, symptoms anyway")
    expect(shown.locator(".meta a")).to_have_attribute("href", f"/c/{SLUG}/evidence/{study['id']}")
    expect(shown.locator(".meta")).to_contain_text("Mia Member")
    expect(shown.locator(".badge.new")).to_be_visible()
    expect(shown.locator(".reason")).to_contain_text(HOSTILE)  # as text, never as HTML
    assert page.locator("#injected, .reason b").count() == 0
    expect(shown.locator(".full-id")).to_have_text(rebut["id"])
    expect(page.locator("#rebuts .count")).to_have_text("1")
    expect(page.locator("#rebuts .empty")).to_have_count(0)
    expect(page.locator(f"#link-{elsewhere['id']}")).to_have_count(0)  # it points elsewhere
    expect(page.locator("#supports .link")).to_have_count(1)

    clash = contradiction(
        MEMBER, SLUG, [RIVAL["id"], CLAIM["id"]], "One makes DAO the cause, one denies any role."
    )
    over_mcp(site, [clash])
    listed = page.locator(f"#contradictions #contradiction-{clash['id']}")
    expect(listed).to_contain_text("One makes DAO the cause")
    expect(listed.locator("li a")).to_have_text("Histamine intolerance has nothing to do with DAO.")
    expect(listed.locator("li strong")).to_have_text("this claim")
    expect(page.locator("#contradictions .count")).to_have_text("1")
    assert page.evaluate("window.__sameDocument") is True  # no reload
    shot(page, "live-claim-page")
    page.set_viewport_size(PHONE)
    shot(page, "live-claim-page-phone")
    no_overflow(page)
    page.set_viewport_size(DESKTOP)
    page.reload()  # what the server renders now is what the page had added
    expect(page.locator(f"#rebuts #link-{rebut['id']}")).to_be_visible()
    expect(page.locator(f"#contradiction-{clash['id']}")).to_be_visible()


def test_a_collection_page_tells_of_new_claims_and_shows_them(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    live_page(page, f"{site.url}/c/{SLUG}")
    counts = page.locator("#counts [data-count='claims']")
    before = int(counts.get_attribute("data-n") or "0")
    rival_rebuts = page.locator(f"#claims [data-id='{RIVAL['id']}'] .badge.rebuts")
    first = page.locator("#claims ol.claims > li").first
    first_before = first.get_attribute("data-id")
    new = claim(MEMBER, SLUG, f"DAO supplements help some people. {HOSTILE}")
    note = evidence(MEMBER, SLUG, "DAO supplements helped a third of them.", title="Open trial")
    rebut = link(MEMBER, SLUG, note["id"], RIVAL["id"], "helped a third of them", relation="REBUTS")
    over_mcp(site, [new, note, rebut])
    news = page.locator(".live-news")
    expect(news).to_contain_text("1 new claim since you opened this page")
    expect(counts).to_have_text(f"{before + 1} claims")
    expect(rival_rebuts).to_have_text("1 rebuttal")
    expect(page.locator(f"#evidence [data-id='{note['id']}']")).to_contain_text("Open trial")
    expect(page.locator(f"#evidence [data-id='{note['id']}'] .meta")).to_contain_text(
        "39 characters · quoted by 1 link · Mia Member"
    )
    assert first.get_attribute("data-id") == first_before  # nothing moved under the reader
    shot(page, "live-collection-news")
    page.set_viewport_size(PHONE)
    shot(page, "live-collection-news-phone")
    no_overflow(page)
    page.set_viewport_size(DESKTOP)
    page.click("#show-new")
    expect(news).to_be_hidden()
    shown = page.locator("#claims ol.claims > li").first
    expect(shown).to_have_attribute("data-id", new["id"])
    expect(shown).to_have_class(re.compile(r"\bfresh\b"))
    expect(shown.locator("a.text")).to_have_text(f"DAO supplements help some people. {HOSTILE}")
    expect(shown.locator("a.text")).to_be_focused()
    assert page.locator("#injected").count() == 0
    expect(shown.locator(".meta")).to_contain_text("0 supports")
    expect(shown.locator(".meta")).to_contain_text("Mia Member")
    assert page.evaluate("window.__sameDocument") is True
    shot(page, "live-collection-shown")
    page.set_viewport_size(PHONE)
    shot(page, "live-collection-shown-phone")
    no_overflow(page)


def test_another_sort_offers_recent_for_new_claims(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    live_page(page, f"{site.url}/c/{SLUG}?sort=contested")
    new = claim(MEMBER, SLUG, "DAO is measured badly in most labs.")
    over_mcp(site, [new])
    expect(page.locator("#show-new")).to_have_attribute("href", f"/c/{SLUG}?sort=recent#claims")
    page.click("#show-new")
    expect(page.locator("#claims ol.claims > li").first).to_have_attribute("data-id", new["id"])


class Held:
    """The page's WebSockets, connected to the server but holding what the page sends (its
    REQ) until `release`: records can then be committed after the page was rendered and before
    it subscribed."""

    def __init__(self) -> None:
        self.held: list[tuple[Any, str | bytes]] = []
        self.released = False
        self.opened = 0

    def route(self, socket: WebSocketRoute) -> None:
        server = socket.connect_to_server()
        self.opened += 1

        def from_page(message: str | bytes) -> None:
            if self.released:
                server.send(message)
            else:
                self.held.append((server, message))

        socket.on_message(from_page)

    def release(self) -> None:
        self.released = True
        for server, message in self.held:
            server.send(message)

    def hold(self) -> None:
        self.released = False
        self.held = []


def test_what_commits_while_a_page_loads_is_caught_up_once(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, MEMBER, people)
    page = person.page
    held = Held()
    person.context.route_web_socket(re.compile(r"/c/"), held.route)
    page.goto(f"{site.url}/c/{SLUG}/claims/{RIVAL['id']}")
    page.wait_for_function("document.documentElement.dataset.live === 'connecting'")
    supports = int(page.locator("#supports .count").inner_text())
    source = evidence(MEMBER, SLUG, "Some had DAO deficits without any symptoms.", title="Gap")
    meanwhile = link(
        MEMBER, SLUG, source["id"], RIVAL["id"], "without any symptoms", reason="In the gap."
    )
    over_mcp(site, [source, meanwhile])
    page.wait_for_timeout(300)
    assert page.evaluate("document.documentElement.dataset.live") == "connecting"  # held
    held.release()
    page.wait_for_selector("html[data-live='on']", state="attached")
    expect(page.locator(f"#supports #link-{meanwhile['id']}")).to_contain_text("In the gap.")
    expect(page.locator("#supports .count")).to_have_text(str(supports + 1))  # no other twice
    expect(page.locator("#supports .badge.new")).to_have_count(1)

    held.hold()
    page.goto(f"{site.url}/c/{SLUG}")
    page.wait_for_function("document.documentElement.dataset.live === 'connecting'")
    claims = page.locator("#counts [data-count='claims']")
    before = int(claims.get_attribute("data-n") or "0")
    unseen = claim(MEMBER, SLUG, "Committed while the collection page loaded.")
    over_mcp(site, [unseen])
    page.wait_for_timeout(300)
    assert page.evaluate("document.documentElement.dataset.live") == "connecting"  # held
    held.release()
    page.wait_for_selector("html[data-live='on']", state="attached")
    expect(page.locator(".live-news")).to_contain_text("1 new claim since")
    expect(claims).to_have_text(f"{before + 1} claims")
    assert held.opened == 2


def test_without_the_relay_the_pages_are_as_rendered_and_say_nothing(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, MEMBER, people)
    page = person.page
    refused: list[str] = []

    def refuse(socket: WebSocketRoute) -> None:
        refused.append(socket.url)
        socket.close(code=1011, reason="down")

    person.context.route_web_socket(re.compile(r"/c/"), refuse)
    for url in (f"{site.url}/c/{SLUG}/claims/{CLAIM['id']}", f"{site.url}/c/{SLUG}"):
        page.goto(url)
        page.wait_for_selector("html[data-live='off']", state="attached")
        rendered = page.locator("main").inner_text()
        over_mcp(site, [claim(MEMBER, SLUG, f"Said while the relay is away ({url[-6:]}).")])
        page.wait_for_timeout(1500)  # a retry or two, refused too
        expect(page.locator("#live")).to_be_hidden()
        assert page.locator("main").inner_text() == rendered
        assert page.locator(".live-news:not([hidden]), .notice.error, .status.error").count() == 0
    assert refused, "the page never tried its WebSocket"

    quiet = browser.new_context(java_script_enabled=False)
    try:
        for cookie in person.context.cookies():
            quiet.add_cookies([cookie])  # type: ignore[list-item]
        plain = quiet.new_page()
        plain.goto(f"{site.url}/c/{SLUG}/claims/{CLAIM['id']}")
        expect(plain.locator("#supports .link")).to_have_count(1)
        expect(plain.locator("#live")).to_be_hidden()
    finally:
        quiet.close()
