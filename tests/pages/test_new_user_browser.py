"""What a new user met (issue 27), in headless Chromium with the test NIP-07 provider: a profile
changed on the home page, "Member since" the day the member was added, the members page as its
owner and as a member, the refusal screen, a live page after its key is removed, the evidence
page's "Quoted by", and the small words (badges, ranks, labels) at 1280 and 390 px.

The tests share one server and run in order. Screenshots go to tests/artifacts/ (new-user-*).
"""

from __future__ import annotations

import time
from typing import Any, Final

import pytest
from browser import DESKTOP, PHONE, Person, connect, kinds, on_ledger, shot, visit
from factories import T0, Live, claim, evidence, link, members, profile, terms
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.nostr.nip19 import npub_encode
from tms.pages.reading import EVIDENCE_PAGE_CHARS
from tms.rules.admission import OPERATOR

OWNER: Final = SecretKey(bytes([0xB1]) * 32)  # approved; owns "lab"; a profile with a typo
MIA: Final = SecretKey(bytes([0xB2]) * 32)  # a member of "lab", added three days after it began
GUS: Final = SecretKey(bytes([0xB3]) * 32)  # the one member of "shared", removed while reading
NEWBIE: Final = SecretKey(bytes([0xB4]) * 32)  # approved, nothing signed yet
SLUG: Final = "lab"
STANDING: Final = int(time.time())  # the owner's typo profile, signed "now"
ADDED: Final = T0 + 3 * 86400  # the member list that first names Mia
FIRST: Final = "Quoted on the first page of the study"
SECOND: Final = "quoted on the second page of the study"
FILLER: Final = "Serum DAO activity was measured again. " * (EVIDENCE_PAGE_CHARS // 39 + 50)
LONG_TEXT: Final = f"{FIRST}. {FILLER}{SECOND}. The end."
DOC: Final = evidence(OWNER, SLUG, LONG_TEXT, title="A long DAO study", source="Example journal")
CLAIM: Final = claim(OWNER, SLUG, "DAO activity is low in most adults.")
BACKS: Final = link(OWNER, SLUG, DOC["id"], CLAIM["id"], FIRST)
HEDGES: Final = link(OWNER, SLUG, DOC["id"], CLAIM["id"], SECOND, relation="QUALIFIES")

SEEDED: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def seed(site: Live) -> None:
    async def work(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey, NEWBIE.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                profile(OWNER, "Olvie Ownr", about="human: runs the lab", created_at=STANDING),
                members(OWNER, SLUG, []),
                members(OWNER, SLUG, [MIA.pubkey], created_at=ADDED),
                terms(MIA),
                profile(MIA, "Mia Member"),
                members(OWNER, "shared", [GUS.pubkey]),
                terms(GUS),
                profile(GUS, "Gus Gone"),
                DOC,
                CLAIM,
                BACKS,
                HEDGES,
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, work)


def both_widths(page: Page, name: str, *, at: str | None = None) -> None:
    """Photograph the page at 1280 and 390 px (no wider than the window at either), and leave
    it at 1280."""
    for size, suffix in ((DESKTOP, ""), (PHONE, "-phone")):
        page.set_viewport_size(size)
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= size["width"], f"{name}{suffix}: {scroll} px wide"
        if at is not None:
            page.locator(at).first.scroll_into_view_if_needed()
        shot(page, f"new-user-{name}{suffix}", full_page=at is None)
    page.set_viewport_size(DESKTOP)


def profiles_of(site: Live, key: SecretKey) -> list[tuple[int, str]]:
    async def read(ledger: Ledger) -> list[tuple[int, str]]:
        rows = await ledger.pool.fetch(
            "SELECT created_at, name FROM profiles WHERE pubkey = $1 ORDER BY created_at, id",
            key.pubkey,
        )
        return [(row["created_at"], row["name"]) for row in rows]

    result: list[tuple[int, str]] = on_ledger(site.database_url, read)
    return result


# --- the profile -------------------------------------------------------------------------------


def test_a_typo_in_the_profile_is_fixed_on_the_home_page(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    # The edit is signed in the same second as the standing profile: it must still stand.
    person = connect(browser, site, OWNER, people)
    page = person.page
    page.clock.set_fixed_time(STANDING + 0.2)
    visit(page, site.url + "/")
    panel = page.locator("#profile-shown")
    expect(panel.locator("#profile-shown-name")).to_have_text("Olvie Ownr")
    expect(panel).to_contain_text("runs the lab")
    both_widths(page, "profile", at="#profile-shown")
    page.click("#edit-profile")
    expect(page.locator("#edit-name")).to_have_value("Olvie Ownr")
    expect(page.locator("#edit-about")).to_have_value("runs the lab")  # the kind is a radio
    expect(page.locator("input[name='edit-kind'][value='human']")).to_be_checked()
    both_widths(page, "profile-edit", at="#profile-shown")
    page.fill("#edit-name", "Olive Owner")
    page.click("#save-edit")
    expect(page.locator(".me")).to_have_text("Olive Owner")  # reloaded: the header's name
    expect(page.locator("#profile-shown-name")).to_have_text("Olive Owner")
    assert kinds(person) == [27235, 0]
    assert profiles_of(site, OWNER) == [(STANDING, "Olvie Ownr"), (STANDING + 1, "Olive Owner")]


def test_an_empty_name_signs_nothing(browser: Browser, site: Live, people: list[Person]) -> None:
    person = connect(browser, site, MIA, people)
    page = person.page
    page.click("#edit-profile")
    page.fill("#edit-name", "  ")
    page.click("#save-edit")
    expect(page.locator("#edit-status")).to_have_text(
        "Type a name for your profile. Nothing was signed."
    )
    page.click("#cancel-edit")
    expect(page.locator("#profile-edit")).to_be_hidden()
    assert kinds(person) == [27235]


# --- members -----------------------------------------------------------------------------------


def test_a_member_is_member_since_the_list_that_added_them(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MIA, people).page
    card = page.locator("#collections .card", has_text=SLUG)
    expect(card).to_contain_text("Member since 2026-09-24")  # ADDED, not the collection's T0
    expect(card).not_to_contain_text("2026-09-21")
    both_widths(page, "home-member")


def test_a_member_reads_who_else_is_a_member(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MIA, people).page
    page.click(f"#collections a[href='/c/{SLUG}']")
    page.click(f"a[href='/c/{SLUG}/members']")  # the collection page links it for a member too
    listed = page.locator("#current-members")
    owner = listed.locator("li", has_text=npub_encode(OWNER.pubkey))
    expect(owner.locator(".badge")).to_have_text("owner")
    expect(owner.locator("strong")).not_to_be_empty()  # the owner's profile name
    expect(listed.locator("li", has_text="Mia Member").locator(".badge")).to_have_text("you")
    expect(page.locator("#members-form")).to_have_count(0)  # read, not edited
    expect(page.locator("#members")).to_contain_text("Only its owner, ")
    expect(page.locator("#members")).to_contain_text(", changes who is in.")
    both_widths(page, "members-as-member")


def test_the_owner_s_note_stays_and_long_lines_wrap_on_a_phone(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people, viewport=PHONE).page
    visit(page, f"{site.url}/c/{SLUG}/members")
    value = page.locator("#member-lines").input_value()
    assert value.strip().endswith("# Mia Member")  # no note typed yet: the profile name
    page.fill("#member-lines", value.replace("# Mia Member", "# Mia from the wet lab"))
    page.click("#save-members")
    expect(page.locator("#members-status")).to_contain_text("This is the list now standing")
    assert page.locator("#member-lines").input_value().strip().endswith("# Mia from the wet lab")
    expect(page.locator("#current-members")).to_contain_text("your note: Mia from the wet lab")
    # the textarea wraps a line rather than hiding its note off to the right
    box = page.eval_on_selector(
        "#member-lines", "el => [el.scrollWidth, el.clientWidth, el.scrollHeight]"
    )
    assert box[0] <= box[1], box
    both_widths(page, "members-owner")


# --- live pages --------------------------------------------------------------------------------


def test_a_removed_member_s_open_page_says_it_is_no_longer_live(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, GUS, people).page
    page.goto(f"{site.url}/c/shared")
    page.wait_for_selector("html[data-live='on']", state="attached", timeout=30_000)
    expect(page.locator("#live-stopped")).to_have_count(0)

    async def remove(ledger: Ledger) -> None:
        await ledger.submit(
            [members(OWNER, "shared", [], created_at=int(time.time()))], origin=OPERATOR
        )

    on_ledger(site.database_url, remove)
    stopped = page.locator("#live-stopped")
    expect(stopped).to_have_text(
        "Live updates stopped: your key is no longer a member of shared. This page still shows "
        "what it showed, but new records no longer appear; reload it to see what you may read now.",
        timeout=30_000,
    )
    expect(page.locator("#live")).to_be_hidden()
    both_widths(page, "live-stopped")


# --- the small words ---------------------------------------------------------------------------


def test_badges_say_one_support_and_one_qualification(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    page.goto(f"{site.url}/c/{SLUG}")
    item = page.locator(f".claim[data-id='{CLAIM['id']}'] .meta")
    expect(item.locator(".badge.supports")).to_have_text("1 support")
    expect(item.locator(".badge.qualifies")).to_have_text("1 qualification")
    expect(item.locator(".badge.rebuts")).to_have_text("0 rebuttals")
    both_widths(page, "collection")


def test_a_keyword_search_says_each_match_s_place_not_a_zero_rank(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    page.goto(f"{site.url}/c/{SLUG}?q=adults&method=keyword")
    meta = page.locator(f".claim[data-id='{CLAIM['id']}'] .meta")
    expect(meta).to_contain_text("match 1 of 1")
    expect(meta).not_to_contain_text("0.000")
    expect(page.locator("#claims")).to_contain_text("best keyword match first")
    both_widths(page, "collection-search")


PLACEHOLDER_FITS: Final = """sel => {
  const input = document.querySelector(sel)
  const style = getComputedStyle(input)
  const context = document.createElement('canvas').getContext('2d')
  context.font = style.font
  const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
  return [context.measureText(input.placeholder).width, room]
}"""


def test_the_terms_read_as_paragraphs_and_the_about_hint_fits_a_phone(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, NEWBIE, people, viewport=PHONE).page
    paragraphs = page.locator("#terms-text p")
    expect(paragraphs.first).to_have_text("TMS terms of use, version 1")
    texts = paragraphs.all_inner_texts()
    assert len(texts) >= 2 and all("\n" not in text for text in texts), texts
    # each paragraph's lines fill the box (but the last): no long-short-long-short lines
    ragged = page.evaluate(
        """() => [...document.querySelectorAll('#terms-text p')].map(p => {
            const range = document.createRange()
            range.selectNodeContents(p)
            const lines = [...range.getClientRects()]
            const widths = lines.slice(0, -1).map(r => r.width)
            return widths.filter(w => w < p.clientWidth * 0.6).length
        })"""
    )
    assert sum(ragged) == 0, ragged
    width, room = page.evaluate(PLACEHOLDER_FITS, "#profile-about")
    assert width <= room, (width, room)
    both_widths(page, "terms", at="#terms-text")


def test_the_edit_form_s_about_hint_fits_a_phone(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MIA, people, viewport=PHONE).page
    page.click("#edit-profile")
    width, room = page.evaluate(PLACEHOLDER_FITS, "#edit-about")
    assert width <= room, (width, room)


def test_the_dashboard_s_chart_labels_are_12px_on_a_phone(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people, viewport=PHONE).page
    page.goto(f"{site.url}/dashboard?c={SLUG}")
    sizes = page.evaluate(
        """() => [...document.querySelectorAll('svg.chart text')]
            .filter(t => t.getClientRects().length)
            .map(t => t.getScreenCTM().a * parseFloat(getComputedStyle(t).fontSize))"""
    )
    assert sizes and min(sizes) >= 11.9, sizes
    both_widths(page, "dashboard")


# --- the evidence page -------------------------------------------------------------------------


def test_quoted_by_gives_each_link_s_id_dispute_and_page(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    page.goto(f"{site.url}/c/{SLUG}/evidence/{DOC['id']}")
    expect(page.locator("#marked-count")).to_have_text(
        "1 of 2 quotes marked on this page (each quote below says its page)."
    )
    first = page.locator(f"#quote-{BACKS['id']}")
    expect(first.locator(".full-id")).to_have_text(BACKS["id"])
    expect(first).to_contain_text("on this page")
    dispute = first.locator("a.dispute")
    expect(dispute).to_have_text("Dispute")
    assert dispute.get_attribute("href") == (f"/submit?c={SLUG}&to={BACKS['id']}&relation=REBUTS")
    second = page.locator(f"#quote-{HEDGES['id']}")
    expect(second.locator("a.on-page")).to_have_text("on page 2")
    both_widths(page, "evidence-quotes", at="#quotes")
    second.locator("a.on-page").click()
    expect(page.locator("#marked-count")).to_have_text(
        "1 of 2 quotes marked on this page (each quote below says its page)."
    )
    expect(page.locator(f"mark[data-links='{HEDGES['id']}']")).to_have_count(1)
    expect(page.locator(f"#quote-{BACKS['id']} a.on-page")).to_have_text("on page 1")


# --- the submit page ---------------------------------------------------------------------------


def test_a_dispute_names_its_field_and_a_removed_row_takes_its_red_with_it(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, OWNER, people)
    page = person.page
    visit(page, f"{site.url}/submit?c={SLUG}&to={BACKS['id']}&relation=REBUTS")
    row = page.locator("#rows .row").first
    expect(row.locator(".claim-label-text")).to_have_text(
        "The link this row disputes or backs", timeout=15_000
    )
    # the hint beside it says what else the field takes, not that the link may be "new text"
    expect(row.locator(".claim-label-hint")).to_have_text(
        "(or, in its place, new claim text or a claim's id)"
    )
    expect(row.locator(".relation")).to_have_value("REBUTS")
    both_widths(page, "submit-dispute", at="#rows")
    page.fill("#text", "A rebuttal's own evidence, with its quote.")
    page.click("#publish")
    status = page.locator("#publish-status")
    expect(status).to_have_text("Nothing was signed: fix the rows marked in red.")
    row.locator(".remove").click()
    expect(page.locator("#rows .row")).to_have_count(0)
    expect(status).to_have_text("")
    assert kinds(person) == [27235]


# --- the guide ---------------------------------------------------------------------------------


def test_the_guide_s_contents_and_its_in_page_link_lead_somewhere(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MIA, people).page
    page.goto(f"{site.url}/docs")
    toc = page.locator("nav.toc")
    expect(toc.locator("a[href='#for-bots-and-agents']")).to_have_text("For bots and agents")
    both_widths(page, "docs-toc", at="nav.toc")
    page.click("a[href='#checking-the-history-transparency-log']:not(nav.toc a)")
    heading = page.locator("#checking-the-history-transparency-log")
    expect(heading).to_have_text("Checking the history (transparency log)")
    expect(heading).to_be_in_viewport()
