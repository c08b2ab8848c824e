"""Small things a reader met on the pages (issue 34.10), each looked at in Chromium at desktop
and phone width: Connect without JavaScript says what it needs; the docs' Limits table fits a
phone without breaking words; counts are written with thousands separators everywhere."""

from __future__ import annotations

import json
from typing import Final

from browser import DESKTOP, PHONE, Person, connect, on_ledger, shot
from factories import Live, claim, key, profile, terms
from playwright.sync_api import Browser, expect

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

WIDTHS: Final = {"desktop": DESKTOP, "phone": PHONE}
ONE: Final = key(0xD1)  # one claim, in a collection of its own
NOSTR: Final = key(0xD2)  # a profile made elsewhere on Nostr
FOUND: Final = {
    "about": "Reads histamine papers; ex-nurse.",
    "picture": "https://example.org/me.png",
    "nip05": "me@example.org",
    "lud16": "me@getalby.com",
    "website": "https://example.org",
}
FOUND_TAGS: Final = [["i", "github:me", "abc"]]


def test_connect_without_javascript_says_it_needs_it_and_an_extension(
    browser: Browser, site: Live
) -> None:
    for name, viewport in WIDTHS.items():
        context = browser.new_context(viewport=viewport, java_script_enabled=False)  # type: ignore[arg-type]
        try:
            page = context.new_page()
            page.goto(site.url + "/")
            notice = page.locator("#connect-no-script")
            expect(notice).to_be_visible()
            expect(notice).to_contain_text("Connecting needs JavaScript")
            expect(notice).to_contain_text("NIP-07")
            shot(page, f"connect-no-script-{name}", full_page=False)
        finally:
            context.close()
    with_script = browser.new_context(viewport=DESKTOP)
    try:
        page = with_script.new_page()
        page.goto(site.url + "/")
        expect(page.locator("#connect-button")).to_be_visible()
        expect(page.locator("#connect-no-script")).to_have_count(0)  # noscript is text then
    finally:
        with_script.close()


# Every word of the Limits table's cells on one line (a word broken mid-word has two boxes).
BROKEN_WORDS: Final = """() => {
  const heading = document.getElementById('limits')
  let table = heading.nextElementSibling
  while (table && table.tagName !== 'TABLE') table = table.nextElementSibling
  const broken = []
  const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT)
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.textContent.matchAll(/[^\\s-]+/g)) { // a line may end at a hyphen
      const range = document.createRange()
      range.setStart(node, match.index)
      range.setEnd(node, match.index + match[0].length)
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)))
      if (lines.size > 1) broken.push(match[0])
    }
  }
  return broken
}"""


def test_the_docs_limits_table_keeps_its_words_whole_on_a_phone(
    browser: Browser, site: Live
) -> None:
    for name, viewport in WIDTHS.items():
        context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
        try:
            page = context.new_page()
            page.goto(site.url + "/docs#limits")
            assert page.evaluate(BROKEN_WORDS) == []
            # the page itself never scrolls sideways: only the table may
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
            page.locator("#limits").scroll_into_view_if_needed()
            shot(page, f"docs-limits-{name}", full_page=False)
        finally:
            context.close()


def test_the_dashboard_axis_of_one_record_reads_0_and_1(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([ONE.pubkey])
        await ledger.submit([terms(ONE), claim(ONE, "single", "One claim.")], origin=OPERATOR)

    on_ledger(site.database_url, seed)
    page = connect(browser, site, ONE, people).page
    page.goto(site.url + "/dashboard?c=single")
    ticks = page.locator("#activity svg").first.locator("text.tick[text-anchor=end]")  # the y axis
    expect(ticks).to_have_text(["0", "1"])
    shot(page, "dashboard-one-record", full_page=False)
    page.set_viewport_size(PHONE)
    shot(page, "dashboard-one-record-phone", full_page=False)


def test_editing_a_profile_from_nostr_keeps_its_fields_and_its_about(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([NOSTR.pubkey])
        await ledger.submit(
            [terms(NOSTR), profile(NOSTR, "Nora", tags=FOUND_TAGS, **FOUND)], origin=OPERATOR
        )

    on_ledger(site.database_url, seed)
    person = connect(browser, site, NOSTR, people)
    page = person.page
    expect(page.locator("#profile-shown-about")).to_have_text(f"— {FOUND['about']}")
    page.click("#edit-profile")
    expect(page.locator("#edit-about")).to_have_value(FOUND["about"])
    page.fill("#edit-name", "Nora N.")
    shot(page, "profile-edit-found", full_page=False)
    page.click("#save-edit")
    expect(page.locator("#profile-shown-name")).to_have_text("Nora N.")
    signed = person.signed[-1]
    assert signed["kind"] == 0 and signed["tags"] == FOUND_TAGS
    assert json.loads(signed["content"]) == {**FOUND, "name": "Nora N."}
    expect(page.locator("#profile-shown-about")).to_have_text(f"— {FOUND['about']}")
    page.set_viewport_size(PHONE)
    shot(page, "profile-edit-found-phone", full_page=False)
