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
from factories import T0, Live, members, profile, terms
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey

OWNER: Final = SecretKey(bytes([0xB1]) * 32)  # approved; owns "lab"; a profile with a typo
MIA: Final = SecretKey(bytes([0xB2]) * 32)  # a member of "lab", added three days after it began
GUS: Final = SecretKey(bytes([0xB3]) * 32)  # the one member of "shared", removed while reading
SLUG: Final = "lab"
STANDING: Final = int(time.time())  # the owner's typo profile, signed "now"
ADDED: Final = T0 + 3 * 86400  # the member list that first names Mia

SEEDED: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def seed(site: Live) -> None:
    async def work(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.publish(
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
            ]
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
    page.click(f"#collections a[href='/c/{SLUG}/members']")
    listed = page.locator("#current-members")
    expect(listed).to_contain_text("Olive Owner")
    expect(listed).to_contain_text("Mia Member")
    expect(listed.locator("li", has_text="Olive Owner")).to_contain_text("owner")
    expect(page.locator("#members-form")).to_have_count(0)  # read, not edited
    expect(page.locator("#members")).to_contain_text("Only its owner, Olive Owner, changes who")
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
        await ledger.publish([members(OWNER, "shared", [], created_at=int(time.time()))])

    on_ledger(site.database_url, remove)
    stopped = page.locator("#live-stopped")
    expect(stopped).to_have_text(
        "Live updates stopped: your key is no longer a member of shared. This page still shows "
        "what it showed, but new records no longer appear; reload it to see what you may read now.",
        timeout=30_000,
    )
    expect(page.locator("#live")).to_be_hidden()
    both_widths(page, "live-stopped")
