"""A dispute of a link, where readers look (issue 27): Bob clicks **Dispute** on a claim's
SUPPORTS link and publishes a REBUTS link aimed at it from the submit page; Alice, with the
claim's page open, sees the supporting link marked disputed without a reload (through the site's
relay), and again after one; the supporting link's evidence page marks it too. Real Chromium, a
test NIP-07 provider; screenshots at desktop and phone width."""

from __future__ import annotations

from typing import Final

import pytest
from browser import DESKTOP, PHONE, Person, connect, on_ledger, shot, visit
from factories import Live, claim, evidence, key, link, members, profile, terms
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

ALICE: Final = key(0xD1)  # approved owner of the collection
BOB: Final = key(0xD2)  # a member
SLUG: Final = "sleep"
TEXT: Final = (
    "In a randomized trial of 120 adults, evening magnesium supplementation improved "
    "self-reported sleep quality over eight weeks."
)
DOC = evidence(ALICE, SLUG, TEXT, title="Magnesium and sleep", source="Example journal")
CLAIM = claim(ALICE, SLUG, "Magnesium improves sleep.")
SUPPORT = link(
    ALICE,
    SLUG,
    DOC["id"],
    CLAIM["id"],
    "magnesium supplementation improved self-reported sleep quality",
)
HEDGE = link(  # a qualification beside the disputed support: both marks on one page
    ALICE,
    SLUG,
    DOC["id"],
    CLAIM["id"],
    "self-reported sleep quality",
    relation="QUALIFIES",
)
BOB_TEXT: Final = (
    "The same trial showed no measurable change in total sleep time, measured by actigraphy."
)
REASON: Final = "Self-reported quality improved, but measured sleep did not: weak support."


@pytest.fixture(scope="module", autouse=True)
def world(site: Live) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([ALICE.pubkey])
        await ledger.submit(
            [
                terms(ALICE),
                profile(ALICE, "Alice"),
                members(ALICE, SLUG, [BOB.pubkey]),
                terms(BOB),
                profile(BOB, "Bob"),
                DOC,
                CLAIM,
                SUPPORT,
                HEDGE,
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, seed)


def no_overflow(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the phone page is {width} px wide"


def both_widths(page: Page, name: str) -> None:
    shot(page, name)
    page.set_viewport_size(PHONE)
    shot(page, f"{name}-phone")
    no_overflow(page)
    page.set_viewport_size(DESKTOP)


def test_a_disputed_link_is_marked_on_the_claim_page_live_and_on_the_evidence_page(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    claim_url = f"{site.url}/c/{SLUG}/claims/{CLAIM['id']}"
    alice = connect(browser, site, ALICE, people).page
    alice.goto(claim_url)
    alice.wait_for_selector("html[data-live='on']", state="attached")
    alice.evaluate("window.__sameDocument = true")  # gone if the page reloads
    supporting = alice.locator(f"#link-{SUPPORT['id']}")
    expect(supporting.locator(".disputes")).to_have_count(0)

    # Bob disputes the supporting link from the same claim page, through the submit page.
    bob = connect(browser, site, BOB, people).page
    visit(bob, claim_url)
    bob.locator(f"#link-{SUPPORT['id']} a.dispute").click()
    bob.wait_for_selector("html[data-js='ready']", state="attached")
    row = bob.locator("#rows .row").first
    expect(row.locator(".claim")).to_have_value(SUPPORT["id"])
    expect(row.locator(".relation")).to_have_value("REBUTS")
    bob.fill("#title", "Actigraphy in the same trial")
    bob.fill("#text", BOB_TEXT)
    row.locator(".quote").fill("no measurable change in total sleep time")
    row.locator(".reason").fill(REASON)
    bob.click("#publish")
    expect(bob.locator("#publish-status")).to_contain_text("Stored 2 records")

    # Alice's open page marks the link, live.
    disputes = supporting.locator(".disputes")
    expect(disputes).to_contain_text(REASON)
    expect(disputes.locator(".count")).to_have_text("1")
    expect(disputes.locator("a")).to_have_text("Actigraphy in the same trial")
    expect(disputes).to_contain_text("Bob")
    expect(supporting.locator(".meta .badge.disputed")).to_have_text("disputed")
    expect(supporting).to_have_class("link disputed")
    assert alice.evaluate("window.__sameDocument") is True  # no reload
    both_widths(alice, "disputed-link-live")

    # After a reload, the server's page marks it the same way; the dispute's link opens it.
    alice.reload()
    disputes = alice.locator(f"#link-{SUPPORT['id']} .disputes")
    expect(disputes).to_contain_text(REASON)
    expect(disputes.locator(".count")).to_have_text("1")
    expect(alice.locator(f"#link-{SUPPORT['id']} .meta .badge.disputed")).to_be_visible()
    expect(alice.locator(".disputes .badge.new")).to_have_count(0)
    hedge = alice.locator(f"#qualifies #link-{HEDGE['id']}")
    expect(hedge.locator(".badge.qualifies")).to_have_text("QUALIFIES")
    expect(hedge.locator(".disputes")).to_have_count(0)  # the dispute marks its own link only
    both_widths(alice, "disputed-link-claim-page")
    href = disputes.locator("a").get_attribute("href")
    assert href is not None and href.startswith(f"/c/{SLUG}/evidence/")
    alice.goto(site.url + href)
    dispute_id = href.rsplit("#quote-", 1)[1]
    expect(alice.locator(f"#quote-{dispute_id}")).to_contain_text("no measurable change")

    # The supporting link's own evidence page marks it too.
    alice.goto(f"{site.url}/c/{SLUG}/evidence/{DOC['id']}")
    quoted = alice.locator(f"#quote-{SUPPORT['id']}")
    expect(quoted.locator(".badge.disputed")).to_be_visible()
    expect(quoted.locator(".disputes")).to_contain_text(REASON)
    expect(quoted.locator(".disputes a")).to_have_attribute(
        "href", f"/c/{SLUG}/evidence/{href.split('/evidence/')[1]}"
    )
    # the two quotes overlap: their marks touch as one band, no seam between them
    marks = alice.locator("#document mark")
    assert marks.evaluate_all("ms => ms.map(m => m.className)") == ["before", "after"]
    both_widths(alice, "disputed-link-evidence-page")
