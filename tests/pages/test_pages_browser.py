"""Every flow of SPEC's "For people", in headless Chromium with the test NIP-07 provider: a
real key signing with real BIP-340, a real server, a real database, a test relay on 127.0.0.1.

The tests of this module share one server and run in order, as a new user would go: a stranger
is turned away; the owner agrees to the terms, creates a collection, adds a member who then logs
in; evidence goes in through Fetch; the pages read it back; export, dashboard and logout.
Each page is saved as a screenshot in tests/artifacts/, at desktop and at phone width.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest
from browser import PHONE, Person, Relay, connect, on_ledger, open_person, ready, shot, visit
from factories import Live, members, profile, terms
from fetch_site import Handler, Site
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.nostr.nip19 import npub_encode
from tms.rules.admission import OPERATOR
from tms.rules.kinds import validate_content

OWNER: Final = SecretKey(bytes([0x71]) * 32)  # approved; signs the terms in the browser
MEMBER: Final = SecretKey(bytes([0x72]) * 32)  # not approved; the owner adds it
PROFILED: Final = SecretKey(bytes([0x73]) * 32)  # approved, terms signed, a profile on the relay
STRANGER: Final = SecretKey(bytes([0x74]) * 32)  # neither approved nor a member
SLUG: Final = "field-notes"

PAGE_TEXT: Final = (
    "Serum DAO activity was measured in 60 adults with suspected histamine intolerance.\n\n"
    "Low DAO activity was found in most of them, which the authors call “a consistent "
    "pattern” — though not in every case."
)


@pytest.fixture(scope="module", autouse=True)
def approvals(site: Live) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey, PROFILED.pubkey])
        await ledger.submit([terms(PROFILED)], origin=OPERATOR)

    on_ledger(site.database_url, seed)


@pytest.fixture(scope="module")
def page_site() -> Iterator[Site]:
    def page(handler: Handler) -> None:
        body = f"<html><head><title>DAO study</title></head><body><article><p>{PAGE_TEXT}</p>"
        body += "</article></body></html>"
        handler.reply(200, body.encode(), "text/html; charset=utf-8")

    def plain(handler: Handler) -> None:
        handler.reply(200, PAGE_TEXT.encode(), "text/plain; charset=utf-8")

    with Site({"/study.html": page, "/study.txt": plain}) as site:
        old = os.environ.get("TMS_FETCH_ALLOW")
        os.environ["TMS_FETCH_ALLOW"] = site.allow  # read by the fetcher at each call
        try:
            yield site
        finally:
            if old is None:
                os.environ.pop("TMS_FETCH_ALLOW", None)
            else:
                os.environ["TMS_FETCH_ALLOW"] = old


def stored(site: Live, sql: str, *args: Any) -> Any:
    async def read(ledger: Ledger) -> Any:
        return await ledger.pool.fetchval(sql, *args)

    return on_ledger(site.database_url, read)


def session_cookie(page: Page) -> str:
    [cookie] = [c for c in page.context.cookies() if c["name"] == "tms_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    return cookie["value"]


# --- connect -----------------------------------------------------------------------------------


def test_without_an_extension_the_page_says_which_to_install(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    nobody = open_person(browser, None)
    people.append(nobody)
    nobody.page.goto(site.url + "/")
    notice = nobody.page.locator("#no-extension")
    expect(notice).to_be_visible()
    for name in ("Alby", "nos2x", "Keys.band"):
        expect(notice).to_contain_text(name)
    shot(nobody.page, "connect-no-extension")


def test_a_stranger_is_turned_away(browser: Browser, site: Live, people: list[Person]) -> None:
    stranger = open_person(browser, STRANGER)
    people.append(stranger)
    visit(stranger.page, site.url + "/")
    stranger.page.click("#connect-button")
    refused = stranger.page.locator("#not-approved")
    expect(refused).to_contain_text("is not approved and is not a member of any collection")
    expect(refused).to_contain_text(f"tms approve {npub_encode(STRANGER.pubkey)}")
    assert not [c for c in stranger.context.cookies() if c["name"] == "tms_session"]
    shot(stranger.page, "connect-stranger")


def test_a_new_key_agrees_to_the_terms_and_signs_a_profile(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    expect(page.locator("#terms-text")).to_contain_text("right to upload")
    expect(page.locator("#lookup-status")).to_contain_text("No Nostr profile found")
    shot(page, "home-welcome")
    page.fill("#profile-name", "Olive Owner")
    page.fill("#profile-about", "reads papers on histamine")
    page.click("#agree")
    expect(page.locator("#welcome")).to_have_count(0)
    expect(page.locator(".me")).to_have_text("Olive Owner")
    kinds = [e["kind"] for e in owner.signed]
    assert kinds == [27235, 0, 4706]  # login, then the profile and the terms, one batch
    assert stored(site, "SELECT about FROM profiles WHERE pubkey = $1", OWNER.pubkey) == (
        "human: reads papers on histamine"
    )
    assert stored(site, "SELECT count(*) FROM terms_signatures WHERE pubkey = $1", OWNER.pubkey)
    shot(page, "home-empty")


def test_connect_and_store_the_profile_found_on_the_relay(
    browser: Browser, site: Live, relay: Relay, people: list[Person]
) -> None:
    found = profile(PROFILED, "Pat from the relay", about="human", created_at=1_700_000_000)
    older = profile(PROFILED, "Old Pat", created_at=1_600_000_000)
    relay.events.extend([older, found])
    person = connect(browser, site, PROFILED, people)
    page = person.page
    expect(page.locator("#found-name")).to_have_text("Pat from the relay")
    expect(page.locator("#save-profile")).to_have_text("Use this profile here")
    shot(page, "home-found-profile")
    page.click("#save-profile")
    expect(page.locator(".me")).to_have_text("Pat from the relay")
    # stored exactly as it was signed, not signed again
    assert stored(site, "SELECT id FROM profiles WHERE pubkey = $1", PROFILED.pubkey) == found["id"]
    assert [e["kind"] for e in person.signed] == [27235]
    assert any(r[0] == "REQ" and r[2]["authors"] == [PROFILED.pubkey] for r in relay.requests)


# --- collections and members -------------------------------------------------------------------


def test_create_a_collection(browser: Browser, site: Live, people: list[Person]) -> None:
    page = connect(browser, site, OWNER, people).page
    page.fill("#slug", "Field Notes")
    expect(page.locator("#slug-check")).to_contain_text("lowercase")
    page.fill("#slug", "field notes")
    expect(page.locator("#slug-check")).to_contain_text("Not allowed: the space (character 6)")
    page.fill("#slug", SLUG)
    expect(page.locator("#slug-check")).to_contain_text("is a valid name")
    shot(page, "home-create")
    page.click("#create-button")
    page.wait_for_url(f"**/c/{SLUG}")
    expect(page.locator("h1")).to_have_text(SLUG)
    assert stored(site, "SELECT owner FROM collections WHERE slug = $1", SLUG) == OWNER.pubkey
    shot(page, "collection-empty")


def test_add_a_member_who_then_logs_in_and_sees_the_collection(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    visit(page, f"{site.url}/c/{SLUG}/members")
    expect(page.locator("#members")).to_contain_text("A key you leave out is removed")
    good = npub_encode(MEMBER.pubkey)
    bad = good[:-1] + ("q" if good[-1] != "q" else "p")
    page.fill("#member-lines", f"{good}  # Mia\n{bad}\n")
    page.click("#save-members")
    expect(page.locator("#members-problems")).to_contain_text("Line 2")
    expect(page.locator("#members-problems")).to_contain_text("checksum")
    shot(page, "members-bad-npub")
    assert [e["kind"] for e in owner.signed] == [27235]  # nothing signed
    page.fill("#member-lines", f"{good}  # Mia\n")
    page.click("#save-members")
    expect(page.locator("#list-head")).to_contain_text("Current list: 1 key")  # reloaded
    expect(page.locator("#current-members")).to_contain_text(good)
    # the note typed here comes back (kept in this browser: notes are not signed)
    expect(page.locator("#member-lines")).to_have_value(re.compile(f"^{good}  # Mia\\s*$"))
    expect(page.locator("#members-status")).to_contain_text("Saved: 1 member")
    shot(page, "members-saved")

    member = connect(browser, site, MEMBER, people)
    mpage = member.page
    expect(mpage.locator("#terms-text")).to_be_visible()
    mpage.fill("#profile-name", "Mia Member")
    mpage.check("input[name='profile-kind'][value='agent']")
    mpage.click("#agree")
    expect(mpage.locator("#collections")).to_contain_text(SLUG)
    expect(mpage.locator(".me")).to_have_text("Mia Member")
    shot(mpage, "home-member")


def test_a_member_list_that_would_lose_is_shown_not_silently_ignored(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    visit(page, f"{site.url}/c/{SLUG}/members")
    expect(page.locator("#members")).to_be_visible()
    # Meanwhile another device saves a list signed later than this page will sign.
    later = members(OWNER, SLUG, [MEMBER.pubkey], created_at=2_000_000_000 + 600)

    async def save(ledger: Ledger) -> None:
        await ledger.submit([later], now=2_000_000_000, origin=OPERATOR)

    on_ledger(site.database_url, save)
    page.click("#save-members")
    expect(page.locator("#members-status")).to_contain_text("A newer member list was saved")
    page.reload()
    ready(page)
    page.click("#save-members")
    expect(page.locator("#members-status")).to_contain_text("later than your clock")
    shot(page, "members-newer-list")


# --- submit and read ---------------------------------------------------------------------------


def test_submit_evidence_a_claim_and_a_link_then_read_them(
    browser: Browser, site: Live, page_site: Site, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    visit(page, f"{site.url}/submit?c={SLUG}")
    page.fill("#url", page_site.url("/study.txt"))
    page.click("#fetch")
    expect(page.locator("#fetch-status")).to_contain_text("Fetched")
    expect(page.locator("#text")).to_have_value(PAGE_TEXT)
    page.fill("#source", "Example journal")
    row = page.locator("#rows .row").first
    row.locator(".claim").fill("Most adults with suspected histamine intolerance have low DAO.")
    # straight quotes and a hyphen for the text's curly quotes and em dash, other case
    row.locator(".quote").fill(
        "LOW DAO activity was found in most of them, which the authors call "
        '"a consistent pattern" - though'
    )
    row.locator(".reason").fill("The study reports low DAO in most participants.")
    expect(row.locator(".quote-check")).to_contain_text("Found at characters")
    expect(row.locator(".quote-check mark")).to_have_text(
        re.compile(r"^Low DAO activity .*though$")
    )
    shot(page, "submit-filled")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Stored 3 records")
    shot(page, "submit-done")

    page.click("#publish-status a[href*='/claims/']")
    expect(page.locator(".claim-text")).to_have_text(
        "Most adults with suspected histamine intolerance have low DAO."
    )
    mark = page.locator("#supports .context mark")
    expect(mark).to_have_text(
        re.compile(r"^Low DAO activity was found .*“a consistent pattern” — though$")
    )
    expect(page.locator("#supports .context")).to_contain_text("Serum DAO activity")
    expect(page.locator("#claim")).to_contain_text("Olive Owner")
    shot(page, "claim")
    page.set_viewport_size(PHONE)
    shot(page, "claim-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.click("#supports .link .meta a")
    expect(page.locator("#document mark")).to_have_count(1)
    expect(page.locator("#document mark")).to_contain_text("a consistent pattern")
    shot(page, "evidence")

    page.goto(f"{site.url}/c/{SLUG}")
    expect(page.locator("#claims")).to_contain_text("low DAO")
    page.click("text=Unsupported")
    page.fill("#q", "DAO")
    page.select_option("#method", "keyword")
    page.click("form.search button")
    expect(page.locator("#claims")).to_contain_text("Claims matching")
    expect(page.locator("#claims .claim")).to_have_count(1)
    shot(page, "collection-search")


def test_a_wrong_quote_shows_the_error_and_stores_nothing(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, OWNER, people)
    page = person.page
    before = stored(site, "SELECT count(*) FROM events")
    visit(page, f"{site.url}/submit?c={SLUG}")
    page.fill("#text", PAGE_TEXT)
    row = page.locator("#rows .row").first
    row.locator(".claim").fill("DAO is measured in sweat.")
    row.locator(".quote").fill("measured in sweat")
    row.locator(".reason").fill("It says so.")
    expect(row.locator(".quote-check")).to_have_text("✗ Not found verbatim in the text.")
    page.click("#publish")
    expect(row.locator(".row-error")).to_contain_text("not found verbatim")
    shot(page, "submit-wrong-quote")
    assert [e["kind"] for e in person.signed] == [27235]  # nothing signed

    # A claim id that is not in the collection is refused before signing (issue 19).
    row.locator(".quote").fill("measured in 60 adults")
    row.locator(".claim").fill("ab" * 32)
    page.click("#publish")
    expect(row.locator(".row-error")).to_contain_text("no claim, link or contradiction")
    assert [e["kind"] for e in person.signed] == [27235]
    # The server's own refusal lands on its row: what only the server checks (a NUL).
    row.locator(".claim").evaluate("area => { area.value = 'DAO \\u0000 is low.' }")
    page.click("#publish")  # the text is stored already (the test before): warned first
    expect(page.locator("#publish-status")).to_contain_text("already evidence in field-notes")
    page.click("#publish")
    # in plain words beside the row, not where the batch had it (`events[1] (ab12…): `)
    expect(row.locator(".row-error")).to_contain_text("U+0000 (NUL), which cannot be stored")
    expect(row.locator(".row-error")).not_to_contain_text("events[")
    expect(page.locator("#publish-status")).to_contain_text("nothing was stored")
    shot(page, "submit-refused")
    assert stored(site, "SELECT count(*) FROM events") == before


# --- export, dashboard, logout ------------------------------------------------------------------


def test_export_downloads_and_every_line_verifies(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MEMBER, people).page
    with page.expect_download() as download:
        page.click(f"#collections a[href='/c/{SLUG}/export.jsonl']")
    lines = download.value.path().read_bytes().split(b"\n")
    assert lines[-1] == b""
    events = [Event.from_json(line) for line in lines[:-1]]
    for event in events:
        event.verify()
        validate_content(event)
    assert {4701, 4702, 4703, 4705} <= {e.kind for e in events}


def test_the_dashboard_renders_its_chart(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    page.goto(site.url + "/dashboard")
    expect(page.locator("#activity svg rect.bar").first).to_be_attached()
    expect(page.locator("#contributors")).to_contain_text("Olive Owner")
    expect(page.locator("#sources")).to_contain_text("Example journal")
    expect(page.locator("#domains")).to_contain_text("127.0.0.1")
    expect(page.locator("#kinds")).to_contain_text("evidence")
    shot(page, "dashboard")
    page.set_viewport_size(PHONE)
    shot(page, "dashboard-phone")


def test_logout_ends_the_session(browser: Browser, site: Live, people: list[Person]) -> None:
    page = connect(browser, site, OWNER, people).page
    cookie = session_cookie(page)
    page.click("#logout")
    expect(page.locator("#connect-button")).to_be_visible()
    assert not [c for c in page.context.cookies() if c["name"] == "tms_session"]
    # The old cookie, replayed, no longer opens anything: the session ended on the server.
    home = httpx.get(site.url + "/", cookies={"tms_session": cookie})
    assert "connect-button" in home.text and "logout" not in home.text
    export = httpx.get(f"{site.url}/c/{SLUG}/export.jsonl", cookies={"tms_session": cookie})
    assert export.status_code == 401


def test_phone_screenshots_of_every_page(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people, viewport=PHONE).page
    shot(page, "home-phone")
    for path, name in [
        ("/submit", "submit-phone"),
        (f"/c/{SLUG}", "collection-phone"),
        (f"/c/{SLUG}/members", "members-phone"),
        ("/docs", "docs-phone"),
        ("/c/nothing-here", "not-found-phone"),
    ]:
        page.goto(site.url + path)
        shot(page, name, full_page=False)
    expect(page.locator("h1")).to_have_text("Not found")
