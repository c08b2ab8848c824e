"""What a new user meets on the people's pages (issue 19, items 1, 4, 8, 9 and 11), in headless
Chromium with the test NIP-07 provider, and over plain HTTP where that is enough:

- the member list survives a save and a reload: one npub per line, the names as notes, "Saved";
- a key that is turned away sees its npub, a copy button and what to do next;
- every action says how many signatures it needs, and after a refusal that nothing was stored;
- the slug error names the characters that are wrong; a taken name is refused before anything
  is signed, and by the server (never an empty member list over an existing collection);
- the two exports have their own file names; search says "similar", not "cosine distance";
- no page is wider than a 390 px phone, and no key sticks out of its card on a desktop.

The tests share one server and run in order. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import httpx
import pytest
from browser import (
    DESKTOP,
    PHONE,
    Person,
    Relay,
    connect,
    kinds,
    on_ledger,
    open_person,
    ready,
    shot,
    visit,
)
from factories import Live, claim, evidence, link, members, nip98_header, profile, terms
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.nostr.nip19 import npub_encode
from tms.pages.render import Renderer
from tms.rules.admission import OPERATOR

OWNER: Final = SecretKey(bytes([0xA1]) * 32)  # approved, terms and profile signed, owns "lab"
RIVAL: Final = SecretKey(bytes([0xA2]) * 32)  # approved, terms signed, owns nothing yet
ADA: Final = SecretKey(bytes([0xA3]) * 32)  # not approved; a profile named "Ada Lovelace"
BOT: Final = SecretKey(bytes([0xA4]) * 32)  # no profile
CAROL: Final = SecretKey(bytes([0xA5]) * 32)  # no profile
STRANGER: Final = SecretKey(bytes([0xA6]) * 32)  # neither approved nor a member
NEWCOMER: Final = SecretKey(bytes([0xA7]) * 32)  # approved, nothing signed yet
PAT: Final = SecretKey(bytes([0xA9]) * 32)  # approved, terms signed, a profile on the relay only
ODD: Final = SecretKey(bytes([0xA8]) * 32)  # a profile name over two lines, with a '#'
SLUG: Final = "lab"
LONG_TOKEN: Final = "x" * 40 + "f" * 64  # no break opportunity anywhere
TEXT: Final = (
    "Serum DAO activity was measured in 60 adults. Low DAO activity was found in most of them. "
    f"Raw data: {LONG_TOKEN}"
)

# The extension says no to the kinds given (as nos2x does when its user clicks "reject").
DENY: Final = """kinds => {
  const sign = window.nostr.signEvent
  window.nostr.signEvent = async event => {
    if (kinds.includes(event.kind)) throw new Error('nos2x: denied')
    return sign(event)
  }
}"""
# Something happens elsewhere while the extension's prompt is open (the Python side runs it).
MEANWHILE: Final = """() => {
  const sign = window.nostr.signEvent
  window.nostr.signEvent = async event => { await window.__tmsMeanwhile(); return sign(event) }
}"""

SEEDED: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def seed(site: Live) -> None:
    doc = evidence(OWNER, SLUG, TEXT, title="DAO study " + LONG_TOKEN, url="https://example.org/")
    found = claim(OWNER, SLUG, "Most adults measured had low DAO activity.")
    quoted = link(OWNER, SLUG, doc["id"], found["id"], "Low DAO activity was found")

    async def work(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey, RIVAL.pubkey, NEWCOMER.pubkey, PAT.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                profile(OWNER, "Olive Owner"),
                terms(RIVAL),
                profile(RIVAL, "Rita Rival"),
                members(OWNER, SLUG, []),
                doc,
                found,
                quoted,
                members(OWNER, "names", [ADA.pubkey, BOT.pubkey, ODD.pubkey]),
                terms(ADA),
                profile(ADA, "Ada Lovelace"),
                terms(PAT),
                terms(ODD),
                profile(ODD, "Odd\nname # with a hash"),
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, work)
    SEEDED.update(doc=doc, claim=found)


# --- helpers -----------------------------------------------------------------------------------


def fits(page: Page, what: str) -> None:
    """No horizontal scrolling: the page is no wider than the window, and no key, id or hash
    (code) sticks out of the panel or card it sits in."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{what}: {scroll} px wide in a {width} px window"
    sticking = page.evaluate(
        """() => [...document.querySelectorAll('main code, main .status')].filter(el => {
            if (el.closest('pre, table, textarea')) return false
            const box = el.closest('.panel, .card, .notice, .claim, li, main')
            return el.getBoundingClientRect().right > box.getBoundingClientRect().right + 1
        }).map(el => el.textContent.slice(0, 40))"""
    )
    assert not sticking, f"{what}: sticking out of their box: {sticking}"


def both_widths(page: Page, name: str, *, at: str | None = None) -> None:
    """Check and photograph the page at 1280 and at 390 px (with `at`, the window around that
    element rather than the whole page), and leave it at 1280."""
    for size, suffix in ((DESKTOP, ""), (PHONE, "-phone")):
        page.set_viewport_size(size)
        fits(page, f"{name}{suffix}")
        if at is not None:
            page.locator(at).first.scroll_into_view_if_needed()
        shot(page, f"people-{name}{suffix}", full_page=at is None)
    page.set_viewport_size(DESKTOP)


def lines_of(page: Page) -> list[str]:
    value: str = page.locator("#member-lines").input_value()
    return [line for line in value.split("\n") if line.strip()]


def current_list(site: Live, slug: str) -> list[str]:
    async def read(ledger: Ledger) -> list[str]:
        found = await ledger.pool.fetchval(
            """SELECT l.members FROM current_member_lists h
               JOIN member_lists l ON l.id = h.list_id WHERE h.collection = $1""",
            slug,
        )
        return list(found or [])

    result: list[str] = on_ledger(site.database_url, read)
    return result


def count(site: Live, sql: str, *args: Any) -> int:
    async def read(ledger: Ledger) -> int:
        return int(await ledger.pool.fetchval(sql, *args))

    result: int = on_ledger(site.database_url, read)
    return result


def meanwhile(page: Page, work: Callable[[], None]) -> None:
    """Run `work` (in Python) while the extension's next prompt is open."""
    page.expose_function("__tmsMeanwhile", work)
    page.evaluate(MEANWHILE)


@contextmanager
def http_session(site: Live, key: SecretKey) -> Iterator[httpx.Client]:
    """A logged-in HTTP client with the session's CSRF token and this site's Origin."""
    with httpx.Client(base_url=site.url) as client:
        challenge = client.get("/login/challenge").json()
        tags = [["u", challenge["url"]], ["method", "POST"]]
        event = key.sign(27235, "", int(time.time()), tags)
        answer = client.post(
            challenge["url"], headers={"Authorization": nip98_header(event), "Origin": site.url}
        )
        assert answer.status_code == 200, answer.text
        home = client.get("/").text
        csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
        client.headers.update({"Origin": site.url, "X-CSRF-Token": csrf})
        yield client


# --- over HTTP ---------------------------------------------------------------------------------


def test_the_two_exports_have_their_own_file_names(site: Live) -> None:
    with http_session(site, OWNER) as client:
        plain = client.get(f"/c/{SLUG}/export.jsonl")
        checkpointed = client.get(f"/c/{SLUG}/export.jsonl?checkpoint=1")
        page = client.get(f"/c/{SLUG}").text
    assert plain.headers["content-disposition"] == 'attachment; filename="lab.jsonl"'
    assert checkpointed.headers["content-disposition"] == (
        'attachment; filename="lab.checkpoint.jsonl"'
    )
    assert 'download="lab.jsonl"' in page and 'download="lab.checkpoint.jsonl"' in page


def test_only_approved_keys_hear_whether_a_name_is_taken(site: Live) -> None:
    assert httpx.get(f"{site.url}/collections/check?slug={SLUG}").status_code == 401
    with http_session(site, OWNER) as owner:
        no_token = owner.get(f"/collections/check?slug={SLUG}", headers={"X-CSRF-Token": ""})
        assert no_token.status_code == 403 and "CSRF" in no_token.json()["error"]
        mine = owner.get(f"/collections/check?slug={SLUG}").json()
        assert mine == {"slug": SLUG, "exists": True, "yours": True}
        free = owner.get("/collections/check?slug=free-name").json()
        assert free == {"slug": "free-name", "exists": False, "yours": False}
        bad = owner.get("/collections/check", params={"slug": "Coffee Health"})
        assert bad.status_code == 400 and "lowercase letters" in bad.json()["error"]
    with http_session(site, RIVAL) as rival:
        theirs = rival.get(f"/collections/check?slug={SLUG}").json()
        assert theirs == {"slug": SLUG, "exists": True, "yours": False}

    async def add_ada(ledger: Ledger) -> None:
        await ledger.submit([members(OWNER, "ada-only", [ADA.pubkey])], origin=OPERATOR)

    on_ledger(site.database_url, add_ada)
    with http_session(site, ADA) as member:  # a member, not approved: told nothing
        for slug in (SLUG, "free-name"):
            answer = member.get(f"/collections/check?slug={slug}")
            assert answer.status_code == 403
            assert answer.json() == {
                "error": "only approved pubkeys create collections: "
                "ask the operator to approve your key"
            }


def test_a_page_publish_never_puts_an_empty_list_over_an_existing_collection(
    site: Live,
) -> None:
    before = current_list(site, "ada-only")
    with http_session(site, OWNER) as owner:
        stale = members(OWNER, "ada-only", [], created_at=int(time.time()))
        answer = owner.post("/publish", json={"events": [stale], "expected": {"ada-only": None}})
        assert answer.status_code == 400
        assert answer.json()["error"].startswith("you already own collection 'ada-only'")
        for expected in ({"ada-only": "nope"}, {"Bad Slug": None}, [], {"ada-only": 1}):
            malformed = owner.post("/publish", json={"events": [stale], "expected": expected})
            assert malformed.status_code == 400
            assert "expected must map collection slugs" in malformed.json()["error"]
    with http_session(site, RIVAL) as rival:
        taken = members(RIVAL, "ada-only", [], created_at=int(time.time()))
        answer = rival.post("/publish", json={"events": [taken], "expected": {"ada-only": None}})
        assert answer.status_code == 400 and "is taken by another collection" in answer.text
    assert current_list(site, "ada-only") == before == [ADA.pubkey]


def test_the_members_page_lists_one_npub_per_line_with_names(site: Live) -> None:
    with http_session(site, OWNER) as owner:
        page = owner.get("/c/names/members").text
    area = page.split('id="member-lines"')[1].split(">", 1)[1].split("</textarea>")[0]
    assert area == (
        f"{npub_encode(ADA.pubkey)}  # Ada Lovelace\n"
        f"{npub_encode(BOT.pubkey)}\n"
        f"{npub_encode(ODD.pubkey)}  # Odd name # with a hash\n"
    )


def test_search_results_say_similar_not_cosine_distance() -> None:
    """The template as the collection page renders a vector search (the browser tests' server
    runs without the embedding model)."""
    item = {
        "id": "ab" * 32,
        "pubkey": OWNER.pubkey,
        "author": "Olive",
        "text": "Low DAO.",
        "received_at": "2026-12-01T10:00:00+00:00",
        "distance": 0.1234,
        "links": [],
        "contradiction_ids": [],
    }
    far = {**item, "distance": 1.4}
    html = Renderer()(
        "collection.html",
        {
            "user": None,
            "path": "/c/lab",
            "status": 200,
            "slug": SLUG,
            "info": None,
            "sort": "recent",
            "sorts": (),
            "query": "DAO",
            "method": "vector",
            "search": {"method": "vector", "note": None, "items": [item, far]},
            "page": 1,
            "pages": 1,
            "shown": {"first": 1, "last": 2, "of": 2, "more": False, "cap": 1000},
            "pager_base": "?q=DAO&page=",
            "pager_label": "Pages of claims",
            "claims": [],
            "evidence": [],
            "evidence_cut": False,
            "owner": True,
            "live": {"after": None, "kinds": (4702,), "caught_up": (4702,)},
        },
    )
    assert "cosine" not in html and "distance 0." not in html
    assert "· 88% similar</p>" in html and "· 0% similar</p>" in html
    assert "100% is the same meaning" in html


# --- Connect -----------------------------------------------------------------------------------


def test_a_refused_key_sees_its_npub_and_what_to_do(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    stranger = open_person(browser, STRANGER)
    people.append(stranger)
    page = stranger.page
    stranger.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.url)
    visit(page, site.url + "/")
    expect(page.locator("#connect-needs")).to_have_text(
        "This needs one signature from your extension: a one-time login. It stores nothing."
    )
    page.click("#connect-button")
    refused = page.locator("#not-approved")
    expect(refused).to_be_visible()
    npub = npub_encode(STRANGER.pubkey)
    expect(refused).to_contain_text("is not approved and is not a member of any collection")
    expect(refused).to_contain_text("Nothing was stored")
    expect(page.locator("#refused-npub")).to_have_text(npub)
    # the command that works from a checkout, and where the other ways differ
    expect(page.locator("#approve-command")).to_have_text(f"uv run tms approve {npub}")
    expect(page.locator("#approve-where")).to_contain_text("without uv run")
    page.click("#copy-command")
    expect(page.locator("#copy-command")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == f"uv run tms approve {npub}"
    expect(refused).to_contain_text("the owner of a collection")
    assert STRANGER.pubkey not in page.locator("main").inner_text()  # the npub, not the hex
    assert kinds(stranger) == [27235]  # one prompt: the login (the key comes with it)
    page.click("#copy-npub")
    expect(page.locator("#copy-npub")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == npub
    both_widths(page, "connect-refused")


def test_an_extension_refusal_on_connect_says_nothing_was_stored(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = open_person(browser, OWNER)
    people.append(person)
    visit(person.page, site.url + "/")
    person.page.evaluate(DENY, [27235])
    person.page.click("#connect-button")
    expect(person.page.locator("#connect-status")).to_have_text(
        "Your extension did not sign the login (nos2x: denied). "
        "Nothing was stored; you are not logged in."
    )
    expect(person.page.locator("#connect-button")).to_be_enabled()
    assert person.signed == []


# --- home: terms and profile -------------------------------------------------------------------


def test_the_welcome_says_how_many_signatures_and_a_refusal_stores_nothing(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, NEWCOMER, people)
    page = person.page
    expect(page.locator("#lookup-status")).to_contain_text("No Nostr profile found")
    expect(page.locator("#agree-needs")).to_have_text(
        "This needs 2 signatures from your extension: your profile, then the terms. "
        "Both are stored together, or neither."
    )
    both_widths(page, "home-welcome")
    page.fill("#profile-name", "Nora Newcomer")
    page.evaluate(DENY, [4706])
    page.click("#agree")
    expect(page.locator("#welcome-status")).to_have_text(
        "Your extension did not sign (nos2x: denied). Nothing was stored."
    )
    assert count(site, "SELECT count(*) FROM events WHERE pubkey = $1", NEWCOMER.pubkey) == 0
    page.reload()
    ready(page)
    page.fill("#profile-name", "Nora Newcomer")
    page.click("#agree")
    expect(page.locator(".me")).to_have_text("Nora Newcomer")
    assert kinds(person) == [27235, 0, 0, 4706]  # the first profile was signed, never stored


def test_a_profile_found_on_the_relay_needs_no_signature(
    browser: Browser, site: Live, people: list[Person], relay: Relay
) -> None:
    relay.events.append(profile(PAT, "Pat on the relay", created_at=int(time.time()) - 60))
    person = connect(browser, site, PAT, people)
    page = person.page
    expect(page.locator("#found-name")).to_have_text("Pat on the relay")
    needs = page.locator("#profile-needs")
    expect(needs).to_have_text(
        "This needs no signature from your extension. "
        "Your Nostr profile is stored exactly as you signed it before."
    )
    page.check("#choice-new")
    expect(needs).to_have_text("This needs one signature from your extension: your profile.")
    page.fill("#profile-name", "Pat")
    page.evaluate(DENY, [0])
    page.click("#save-profile")
    expect(page.locator("#welcome-status")).to_have_text(
        "Your extension did not sign (nos2x: denied). Nothing was stored."
    )
    page.check("#choice-found")
    page.click("#save-profile")
    expect(page.locator(".me")).to_have_text("Pat on the relay")
    assert kinds(person) == [27235]


# --- creating a collection ---------------------------------------------------------------------


def test_the_slug_error_names_the_wrong_characters(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = connect(browser, site, OWNER, people)
    page = person.page
    expect(page.locator("#create-needs")).to_contain_text(
        "This needs one signature from your extension"
    )
    page.fill("#slug", "Coffee Health")
    check = page.locator("#slug-check")
    expect(check).to_have_text(
        'Not allowed: "C" (character 1, uppercase), the space (character 7) and "H" '
        "(character 8, uppercase). A name has only lowercase letters a-z, digits 0-9, - and _, "
        "1 to 64 of them. Try coffee-health."
    )
    expect(page.locator("#slug")).to_have_attribute("aria-invalid", "true")
    page.fill("#slug", "coffee-health")
    expect(check).to_have_text("coffee-health is free.")
    page.fill("#slug", "Coffee Health")
    page.click("#create-button")
    expect(check).to_contain_text("Not allowed")
    assert kinds(person) == [27235]


def test_a_taken_name_is_refused_before_anything_is_signed(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    page.fill("#slug", SLUG)
    expect(page.locator("#slug-check")).to_have_text(
        "You already own lab: open it from your collections above."
    )
    page.click("#create-button")
    expect(page.locator("#create-status")).to_contain_text("Nothing was signed")
    rival = connect(browser, site, RIVAL, people)
    rpage = rival.page
    rpage.fill("#slug", SLUG)
    expect(rpage.locator("#slug-check")).to_have_text(
        "The name lab is taken by another collection: choose another."
    )
    rpage.click("#create-button")
    expect(rpage.locator("#create-status")).to_have_text(
        "Nothing was signed: The name lab is taken by another collection: choose another."
    )
    # A name free when typed, created elsewhere before the click: checked again before signing.
    rpage.fill("#slug", "rivals")
    expect(rpage.locator("#slug-check")).to_have_text("rivals is free.")

    async def create(ledger: Ledger) -> None:
        await ledger.submit([members(RIVAL, "rivals", [ADA.pubkey])], origin=OPERATOR)

    on_ledger(site.database_url, create)
    rpage.click("#create-button")
    expect(rpage.locator("#create-status")).to_contain_text("You already own rivals")
    assert kinds(owner) == kinds(rival) == [27235]
    assert current_list(site, "rivals") == [ADA.pubkey]


def test_a_name_taken_while_the_extension_asks_is_refused_by_the_server(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    """The last window: the page checked, the extension's prompt is open, and meanwhile the
    same owner creates the collection on another device and adds a member. The server refuses
    the stale empty list, so the member stays."""
    person = connect(browser, site, RIVAL, people)
    page = person.page
    page.fill("#slug", "race")
    expect(page.locator("#slug-check")).to_have_text("race is free.")

    def elsewhere() -> None:
        async def create(ledger: Ledger) -> None:
            await ledger.submit([members(RIVAL, "race", [ADA.pubkey])], origin=OPERATOR)

        on_ledger(site.database_url, create)

    meanwhile(page, elsewhere)
    page.click("#create-button")
    expect(page.locator("#create-status")).to_have_text(
        "The server refused it: you already own collection 'race': nothing was stored "
        "(open it from your collections)"
    )
    assert kinds(person) == [27235, 4705]  # signed, and refused
    assert current_list(site, "race") == [ADA.pubkey]


# --- members -----------------------------------------------------------------------------------


def test_the_member_list_survives_save_reload_add_save_reload(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    # Both saves in one second, as a quick hand or a loaded machine makes them: the second list
    # must stand, not lose the tie to the first (the lower id wins a same-second tie).
    page.clock.set_fixed_time(time.time())
    visit(page, f"{site.url}/c/{SLUG}/members")
    expect(page.locator("#members-needs")).to_have_text(
        "This needs one signature from your extension: the complete member list."
    )
    ada, bot, carol = (npub_encode(k.pubkey) for k in (ADA, BOT, CAROL))
    page.fill("#member-lines", f"{ada}  # Ada from the lab\n{bot}  # the lab's bot\n")
    page.click("#save-members")
    expect(page.locator("#list-head")).to_contain_text("Current list: 2 keys")  # reloaded
    expect(page.locator("#members-status")).to_have_text(
        "Saved: 2 members. This is the list now standing."
    )
    # One npub per line, each with the note typed for it: the owner's own note, never replaced
    # by the member's profile name (shown below the list instead).
    assert lines_of(page) == [f"{ada}  # Ada from the lab", f"{bot}  # the lab's bot"]
    expect(page.locator("#current-members")).to_contain_text("Ada Lovelace")
    expect(page.locator("#current-members")).to_contain_text("your note: Ada from the lab")
    both_widths(page, "members-saved")

    page.locator("#member-lines").press("End")
    page.locator("#member-lines").press("Control+End")
    page.keyboard.type(f"{carol}  # Carol\n")
    page.click("#save-members")
    expect(page.locator("#list-head")).to_contain_text("Current list: 3 keys")
    expect(page.locator("#members-problems")).to_be_empty()
    expect(page.locator("#members-status")).to_contain_text("Saved: 3 members")
    assert lines_of(page) == [
        f"{ada}  # Ada from the lab",
        f"{bot}  # the lab's bot",
        f"{carol}  # Carol",
    ]
    assert current_list(site, SLUG) == [ADA.pubkey, BOT.pubkey, CAROL.pubkey]
    page.reload()
    ready(page)
    expect(page.locator("#members-status")).to_have_text("")  # said once, after the save
    assert len(lines_of(page)) == 3
    assert kinds(owner) == [27235, 4705, 4705]


def test_two_npubs_on_one_line_are_named_as_such(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    visit(page, f"{site.url}/c/{SLUG}/members")
    joined = npub_encode(ADA.pubkey) + npub_encode(BOT.pubkey)
    page.fill("#member-lines", joined)
    page.click("#save-members")
    expect(page.locator("#members-problems")).to_contain_text(
        "two npubs on one line? put each on a line of its own"
    )
    assert kinds(owner) == [27235]


def test_a_refused_member_list_changes_nothing_and_says_so(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    visit(page, f"{site.url}/c/{SLUG}/members")
    before = current_list(site, SLUG)
    page.fill("#member-lines", npub_encode(BOT.pubkey))
    page.evaluate(DENY, [4705])
    page.click("#save-members")
    expect(page.locator("#members-status")).to_have_text(
        "Your extension did not sign (nos2x: denied). "
        "Nothing was changed: the member list stands as before."
    )
    # Another device saves while this page's prompt is open: the server refuses the stale list.
    page.reload()
    ready(page)
    page.fill("#member-lines", npub_encode(BOT.pubkey))

    def elsewhere() -> None:
        async def save(ledger: Ledger) -> None:
            keys = [*before, STRANGER.pubkey]
            await ledger.submit(
                [members(OWNER, SLUG, keys, created_at=int(time.time()) - 1)], origin=OPERATOR
            )

        on_ledger(site.database_url, save)

    meanwhile(page, elsewhere)
    page.click("#save-members")
    expect(page.locator("#members-status")).to_contain_text(
        "The server refused it: the member list of 'lab' changed since this page was loaded"
    )
    expect(page.locator("#members-status")).to_contain_text("nothing was stored")
    assert current_list(site, SLUG) == [*before, STRANGER.pubkey]


# --- every page, at both widths ----------------------------------------------------------------


def test_both_export_links_download_under_their_own_names(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, OWNER, people).page
    page.goto(f"{site.url}/c/{SLUG}")
    names = []
    for selector in (
        f"a[href='/c/{SLUG}/export.jsonl']",
        f"a[href='/c/{SLUG}/export.jsonl?checkpoint=1']",
    ):
        with page.expect_download() as download:
            page.click(selector)
        names.append(download.value.suggested_filename)
    assert names == ["lab.jsonl", "lab.checkpoint.jsonl"]


def test_no_page_is_wider_than_a_phone(browser: Browser, site: Live, people: list[Person]) -> None:
    visitor = open_person(browser, None, viewport=PHONE)
    people.append(visitor)
    for path in ("/", "/docs"):
        visitor.page.goto(site.url + path)
        fits(visitor.page, f"logged out {path}")
    visitor.page.goto(site.url + "/docs")
    both_widths(visitor.page, "docs", at=".docs blockquote")  # the terms' sha256

    page = connect(browser, site, OWNER, people).page
    both_widths(page, "home")
    doc, found = SEEDED["doc"], SEEDED["claim"]
    for path in (
        f"/c/{SLUG}",
        f"/c/{SLUG}?q=DAO&method=keyword",
        f"/c/{SLUG}/claims/{found['id']}",
        f"/c/{SLUG}/evidence/{doc['id']}",
        f"/c/{SLUG}/members",
        "/submit",
        f"/submit?c={SLUG}",
        "/dashboard",
        "/docs",
        "/c/nothing-here",
    ):
        for size in (PHONE, DESKTOP):
            page.set_viewport_size(size)
            page.goto(site.url + path)
            fits(page, f"{path} at {size['width']}")
    page.goto(f"{site.url}/c/{SLUG}")
    both_widths(page, "collection")
    page.goto(f"{site.url}/c/{SLUG}?q=DAO&method=keyword")
    both_widths(page, "collection-search")
    page.goto(f"{site.url}/c/{SLUG}/members")
    both_widths(page, "members")
    assert re.search(r"Current list: \d+ keys", page.locator("#list-head").inner_text())
