"""The submit page in headless Chromium with the test NIP-07 provider (issue 19): a pasted id is
read as an id or refused before anything is signed, never stored as a claim; a row can target
a link (prefilled from a claim page's "Rebut or qualify" and "Dispute"); what is already stored
is offered instead of a duplicate, and a stored batch locks the form; Enter in the URL box
fetches; a wrong quote gets its nearest passage; the page says how many signatures it needs and,
after a refusal, that nothing was stored; the boxes grow on a phone; an evidence too long with
its source is refused before signing. Screenshots at 1280 and 390 px in tests/artifacts/."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any, Final

import pytest
from browser import DESKTOP, PHONE, Person, kinds, on_ledger, open_person, ready, shot
from factories import Live, claim, contradiction, evidence, link, members, profile, terms
from fetch_site import Handler, Site
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr import nip19
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR

OWNER: Final = SecretKey(bytes([0xB1]) * 32)
MEMBER: Final = SecretKey(bytes([0xB2]) * 32)
SLUG: Final = "lab"
TEXT: Final = (
    "Serum DAO activity was measured in 60 adults with suspected histamine intolerance.\n\n"
    "Low DAO activity was found in most of them, which the authors call “a consistent "
    "pattern” — though not in every case. Children were not studied."
)
DOC: Final = evidence(OWNER, SLUG, TEXT, url="https://example.org/dao", title="DAO study")
LOW: Final = claim(OWNER, SLUG, "Most adults with suspected histamine intolerance have low DAO.")
QUOTED: Final = link(OWNER, SLUG, DOC["id"], LOW["id"], "a consistent pattern")
CHILDREN: Final = claim(OWNER, SLUG, "Children with histamine intolerance have low DAO.")
BOTH: Final = contradiction(OWNER, SLUG, [LOW["id"], CHILDREN["id"]], "Adults are not children.")
NEW_TEXT: Final = (
    "A second study of 40 adults found normal DAO activity in half of them; the authors "
    "doubt that low DAO explains histamine intolerance on its own."
)
LOGIN: Final = 27235


def other_text(tag: str) -> str:
    """A text no other test publishes (they share a collection, and a text already stored is
    warned of)."""
    return f"{NEW_TEXT} ({tag})"


@pytest.fixture(scope="module", autouse=True)
def seeded(site: Live) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                profile(OWNER, "Olive Owner"),
                members(OWNER, SLUG, [MEMBER.pubkey]),
                terms(MEMBER),
                *(DOC, LOW, QUOTED, CHILDREN, BOTH),
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, seed)


@pytest.fixture
def page_site() -> Iterator[Site]:
    """Pages to fetch: the new study, and one whose text fills an evidence to its last few
    hundred characters (as `fetch_url` measures it: url, title, the longest collection name)."""
    full = "".join(f"w{i:06d} " for i in range(249_975))  # 1,999,800 characters

    def study(handler: Handler) -> None:
        handler.reply(200, NEW_TEXT.encode(), "text/plain; charset=utf-8")

    def huge(handler: Handler) -> None:
        handler.reply(200, full.encode(), "text/plain; charset=utf-8")

    with Site({"/study.txt": study, "/huge.txt": huge}) as site:
        old = os.environ.get("TMS_FETCH_ALLOW")
        os.environ["TMS_FETCH_ALLOW"] = site.allow
        try:
            yield site
        finally:
            if old is None:
                os.environ.pop("TMS_FETCH_ALLOW", None)
            else:
                os.environ["TMS_FETCH_ALLOW"] = old


def submit_page(
    browser: Browser, site: Live, people: list[Person], query: str = "", **kw: Any
) -> Person:
    """A member logged in, on /submit?c=lab (and `query`), with the quote rules loaded."""
    person = open_person(browser, MEMBER, **kw)
    people.append(person)
    person.page.goto(site.url + "/")
    ready(person.page)
    person.page.click("#connect-button")
    expect(person.page.locator("#logout")).to_be_visible()
    person.page.goto(f"{site.url}/submit?c={SLUG}{query}")
    ready(person.page)
    expect(person.page.locator("#text-count")).to_have_text("0 characters")
    return person


def stored(site: Live, sql: str, *args: Any) -> Any:
    async def read(ledger: Ledger) -> Any:
        return await ledger.pool.fetchval(sql, *args)

    return on_ledger(site.database_url, read)


def fill_row(page: Page, claim_text: str, quote: str, reason: str = "It says so.") -> Any:
    row = page.locator("#rows .row").first
    row.locator(".claim").fill(claim_text)
    row.locator(".quote").fill(quote)
    row.locator(".reason").fill(reason)
    return row


def both_widths(page: Page, name: str) -> None:
    shot(page, name)
    page.set_viewport_size(PHONE)
    shot(page, f"{name}-phone")
    page.set_viewport_size(DESKTOP)


# --- 2: ids are ids, never claim text -----------------------------------------------------------


def test_a_shortened_id_of_no_record_is_refused_before_signing(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    before = stored(site, "SELECT count(*) FROM events")
    page.fill("#text", NEW_TEXT)
    row = fill_row(page, "138e82465439f10b…", "normal DAO activity in half of them")
    check = row.locator(".claim-check")
    expect(check).to_contain_text("✗ No claim, link or contradiction of lab has an id like")
    page.click("#publish")
    expect(row.locator(".row-error")).to_contain_text("no claim, link or contradiction of lab")
    expect(page.locator("#publish-status")).to_contain_text("Nothing was signed")
    shot(page, "submit-unknown-id")
    row.locator(".claim").fill("note1qqqq")  # shaped like a NIP-19 id, broken
    expect(check).to_contain_text("is not a valid NIP-19 note or nevent")
    assert kinds(person) == [LOGIN]
    assert stored(site, "SELECT count(*) FROM events") == before


def test_a_shortened_or_nip19_id_of_a_claim_links_to_that_claim(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    page.fill("#text", other_text("shortened"))
    row = fill_row(page, f"{LOW['id'][:8]}…", "normal DAO activity in half of them")
    row.locator(".relation").select_option("REBUTS")
    check = row.locator(".claim-check")
    expect(check).to_contain_text(f"→ Links to the claim: “{LOW_TEXT}”")
    shot(page, "submit-shortened-id")
    row.locator(".claim").fill(nip19.encode("note", bytes.fromhex(LOW["id"])))
    expect(check).to_contain_text(f"→ Links to the claim: “{LOW_TEXT}”")
    expect(page.locator("#sign-plan")).to_contain_text(
        "asks your extension for 2 signatures: the evidence and 1 link"
    )
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Stored 2 records")
    assert kinds(person) == [LOGIN, 4701, 4703]
    link_id = person.signed[-1]["id"]
    assert stored(site, "SELECT to_id FROM links WHERE id = $1", link_id) == LOW["id"]
    assert (
        stored(site, "SELECT count(*) FROM claims WHERE text LIKE 'note1%' OR text LIKE '%…'") == 0
    )


LOW_TEXT: Final = "Most adults with suspected histamine intolerance have low DAO."


# --- prefilled rows: disputing a link ----------------------------------------------------------


def test_a_row_prefilled_from_a_claim_page_disputes_a_link(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people, f"&to={QUOTED['id']}&relation=REBUTS")
    page = person.page
    row = page.locator("#rows .row").first
    expect(row.locator(".claim")).to_have_value(QUOTED["id"])
    expect(row.locator(".relation")).to_have_value("REBUTS")
    expect(row.locator(".claim-check")).to_contain_text(
        "→ Links to the SUPPORTS link: “a consistent pattern”"
    )
    both_widths(page, "submit-prefilled")
    page.fill("#text", other_text("prefilled"))
    row.locator(".quote").fill("the authors doubt that low DAO explains histamine intolerance")
    row.locator(".reason").fill("A second study finds normal DAO in half.")
    row.locator(".relation").select_option("QUALIFIES")
    page.click("#publish")
    expect(row.locator(".row-error")).to_contain_text("QUALIFIES only targets a claim")
    assert kinds(person) == [LOGIN]
    row.locator(".relation").select_option("REBUTS")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Stored 2 records")
    expect(page.locator("#publish-status")).to_contain_text("a link to the link “a consistent")
    link_id = person.signed[-1]["id"]
    assert stored(site, "SELECT to_id || relation FROM links WHERE id = $1", link_id) == (
        QUOTED["id"] + "REBUTS"
    )
    # A contradiction is disputed the same way.
    page.click("#publish-another")
    row = page.locator("#rows .row").first
    row.locator(".claim").fill(BOTH["id"])
    expect(row.locator(".claim-check")).to_contain_text(
        "→ Links to the contradiction: “Adults are not children.”"
    )


# --- 3: duplicates, and a stored batch locks the form --------------------------------------------


def test_after_success_the_form_locks_and_a_second_publish_is_warned_of_duplicates(
    browser: Browser, site: Live, people: list[Person], page_site: Site
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    page.fill("#url", page_site.url("/study.txt"))
    page.click("#fetch")
    expect(page.locator("#fetch-status")).to_contain_text("Fetched")
    claim_text = "Low DAO does not explain histamine intolerance on its own."
    fill_row(page, claim_text, "low DAO explains histamine intolerance on its own")
    expect(page.locator("#sign-plan")).to_contain_text(
        "3 signatures: the evidence, 1 new claim and 1 link. If it asks for each one, approve each."
    )
    page.dblclick("#publish")  # a double click publishes once
    expect(page.locator("#publish-status")).to_contain_text("Stored 3 records.")
    assert kinds(person) == [LOGIN, 4701, 4702, 4703]
    expect(page.locator("#text")).to_be_disabled()
    expect(page.locator("#rows .claim")).to_be_disabled()
    expect(page.locator("#publish")).to_be_hidden()
    expect(page.locator("#publish-status a")).to_have_count(2)  # the evidence and the claim
    both_widths(page, "submit-done")

    page.click("#publish-another")
    expect(page.locator("#text")).to_have_value("")
    expect(page.locator("#text")).to_be_enabled()
    # The same document and claim again: warned, offered the stored ones.
    page.fill("#url", page_site.url("/study.txt"))
    page.press("#url", "Enter")
    expect(page.locator("#fetch-status")).to_contain_text("Fetched")
    warning = page.locator("#evidence-check")
    expect(warning).to_contain_text("This exact text is already evidence in lab")
    row = fill_row(page, claim_text.upper(), "low DAO explains histamine intolerance on its own")
    expect(row.locator(".claim-check")).to_contain_text("This claim is already in lab")
    both_widths(page, "submit-duplicate")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Nothing was signed yet")
    assert kinds(person) == [LOGIN, 4701, 4702, 4703]
    page.click("button.use-stored")
    expect(warning).to_contain_text("The rows will link from the stored evidence")
    expect(page.locator("#text")).to_have_attribute("readonly", "")
    row.locator("button.use-claim").click()
    expect(row.locator(".claim-check")).to_contain_text("→ Links to the claim")
    row.locator(".relation").select_option("QUALIFIES")
    expect(page.locator("#sign-plan")).to_contain_text(
        "asks your extension for 1 signature: 1 link."
    )
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Stored 1 record.")
    assert kinds(person) == [LOGIN, 4701, 4702, 4703, 4703]
    assert stored(site, "SELECT count(*) FROM evidence WHERE text = $1", NEW_TEXT) == 1
    assert (
        stored(site, "SELECT count(*) FROM claims WHERE lower(text) = lower($1)", claim_text) == 1
    )


def test_a_duplicate_may_still_be_published_on_a_second_click(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    page.fill("#text", TEXT)  # the stored DOC's text
    expect(page.locator("#evidence-check")).to_contain_text("This exact text is already evidence")
    fill_row(page, "Some adults have normal DAO.", "though not in every case")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Nothing was signed yet")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text("Stored 3 records.")
    assert stored(site, "SELECT count(*) FROM evidence WHERE text = $1", TEXT) == 2


# --- 5: Enter in the URL box fetches -------------------------------------------------------------


def test_enter_in_the_url_box_fetches_and_never_publishes(
    browser: Browser, site: Live, people: list[Person], page_site: Site
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    fill_row(page, "A claim.", "normal DAO")
    page.fill("#url", page_site.url("/study.txt"))
    page.press("#url", "Enter")
    expect(page.locator("#fetch-status")).to_contain_text("Fetched")
    expect(page.locator("#text")).to_have_value(NEW_TEXT)
    page.press("#title", "Enter")
    page.press("#source", "Enter")
    expect(page.locator("#publish-status")).to_have_text("")
    assert kinds(person) == [LOGIN]


# --- 7: the nearest passage ---------------------------------------------------------------------


def test_a_wrong_quote_shows_the_nearest_passage_and_uses_it(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    page.fill("#text", NEW_TEXT)
    row = fill_row(
        page,
        "Half of the adults had normal DAO.",
        "found normal DAO activity in half of the adults",
    )
    expect(row.locator(".quote-check")).to_have_text("✗ Not found verbatim in the text.")
    hint = row.locator(".quote-hint")
    expect(hint).to_contain_text("The nearest passage of the text")
    expect(hint).to_contain_text("% similar")
    passage = re.compile(r"^found normal DAO activity in half of them")
    expect(hint.locator(".passage")).to_have_text(passage)
    both_widths(page, "submit-quote-hint")
    hint.locator("button.use-passage").click()
    expect(row.locator(".quote")).to_have_value(passage)
    expect(row.locator(".quote-check")).to_contain_text("✓ Found at characters")
    expect(hint).to_be_hidden()
    assert kinds(person) == [LOGIN]


def test_a_two_million_character_text_gets_its_hint_and_its_size_checked(
    browser: Browser, site: Live, people: list[Person], page_site: Site
) -> None:
    """Item 13: fetched right at the limit (as `fetch_url` measures it), then a source typed on
    the page: refused before signing, saying why. And the hint for a wrong quote still comes."""
    person = submit_page(browser, site, people)
    page = person.page
    page.fill("#url", page_site.url("/huge.txt"))
    page.click("#fetch")
    expect(page.locator("#fetch-status")).to_contain_text("Fetched 1,999,800 characters")
    expect(page.locator("#fetch-status")).to_contain_text(
        "are left for a longer title and the source"
    )
    row = fill_row(page, "Words are numbered.", "w123456 w123457 w12345B w123459")
    expect(row.locator(".quote-hint .passage")).to_have_text(
        "w123456 w123457 w123458 w123459", timeout=20_000
    )
    page.fill("#source", "A very long source name. " * 10)
    expect(page.locator("#text-count")).to_contain_text("too long")
    row.locator(".quote").fill("w123456 w123457")
    page.click("#publish")
    expect(page.locator("#publish-status")).to_contain_text(
        "more than the 2,000,000 one evidence holds"
    )
    expect(page.locator("#publish-status")).to_contain_text("Shorten the title or the source")
    assert kinds(person) == [LOGIN]


# --- 8: signatures counted, a refusal explained ------------------------------------------------


def test_a_refused_signature_says_nothing_was_stored(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people)
    page = person.page
    before = stored(site, "SELECT count(*) FROM events")
    page.evaluate(
        """() => {
            const real = window.nostr.signEvent
            let calls = 0
            window.nostr.signEvent = async event => {
              calls += 1
              if (calls === 2) throw new Error('nos2x: denied')
              return real(event)
            }
        }"""
    )
    page.fill("#text", other_text("refused"))
    fill_row(page, "Half of the adults had normal DAO.", "normal DAO activity in half of them")
    expect(page.locator("#sign-plan")).to_contain_text("3 signatures")
    page.click("#publish")
    status = page.locator("#publish-status")
    expect(status).to_contain_text("Record 2 of 3 was not signed (nos2x: denied).")
    expect(status).to_contain_text("Nothing was stored: the records are sent only once all 3")
    expect(page.locator("#publish")).to_be_enabled()
    both_widths(page, "submit-sign-refused")
    assert stored(site, "SELECT count(*) FROM events") == before


# --- 9: the boxes on a phone -------------------------------------------------------------------


def test_the_row_boxes_are_comfortable_on_a_phone(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people, viewport=PHONE)
    page = person.page
    shot(page, "submit-fresh-phone")
    row = page.locator("#rows .row").first
    for name in ("claim", "quote", "reason"):
        box = row.locator(f".{name}").bounding_box()
        assert box is not None and box["height"] >= 70, (name, box)  # three lines and more
    long = "The authors measured DAO activity in serum, which may not reflect the gut. " * 4
    row.locator(".reason").fill(long)
    sizes = row.locator(".reason").evaluate("a => [a.scrollHeight, a.clientHeight]")
    assert sizes[0] <= sizes[1] + 2, sizes  # it grew: nothing scrolls inside
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    person.page.set_viewport_size(DESKTOP)
    shot(page, "submit-fresh")


def test_the_pages_sha256_is_the_servers_with_or_without_crypto_subtle(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    """The fallback digest (a page on a plain http address has no crypto.subtle) agrees with
    crypto.subtle, and both with Python's, on block boundaries and non-ASCII text."""
    page = submit_page(browser, site, people).page
    samples = ["", "abc", "x" * 55, "x" * 56, "x" * 64, "Straße — “café” 漢字 🧪", "ab\n" * 70_000]
    digests = page.evaluate(
        """async samples => {
            const { sha256Hex, sha256Bytes } = await import('/static/digest.js')
            const out = []
            for (const s of samples) {
              out.push([await sha256Hex(s), sha256Bytes(new TextEncoder().encode(s))])
            }
            return out
        }""",
        samples,
    )
    for sample, (subtle, fallback) in zip(samples, digests, strict=True):
        expected = hashlib.sha256(sample.encode()).hexdigest()
        assert subtle == fallback == expected, sample[:20]


# --- 34.10: offsets in code points, a prefilled note's punctuation ------------------------------


def test_a_quote_is_found_at_code_points_as_the_ledger_counts_them(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    """Characters outside the BMP (two UTF-16 units in JavaScript) count once, as Python's `len`
    and the ledger's anchors count them."""
    person = submit_page(browser, site, people)
    page = person.page
    astral = "\U0001d504\U0001d505 \U0001f600 " + other_text("astral")
    page.fill("#text", astral)
    expect(page.locator("#text-count")).to_have_text(f"{len(astral)} characters")
    quote = "normal DAO activity"
    row = fill_row(page, "Half had normal DAO.", quote)
    start = astral.index(quote)
    expect(row.locator(".quote-check")).to_contain_text(
        f"✓ Found at characters {start}\N{EN DASH}{start + len(quote)}:"
    )
    expect(row.locator(".quote-check mark")).to_have_text(quote)
    # the text and the quote's preview in the pages' one font, not a serif of their own
    font = "e => getComputedStyle(e).fontFamily"
    body = page.eval_on_selector("body", font)
    assert "sans-serif" in body
    for shown in ("#text", ".quote-check .preview"):
        assert page.eval_on_selector(shown, font) == body, shown
    both_widths(page, "submit-code-points")


def test_the_prefilled_note_ends_a_quoted_sentence_once(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    person = submit_page(browser, site, people, f"&to={BOTH['id']}&relation=REBUTS")
    note = person.page.locator("#prefill-note")
    expect(note).to_have_text(
        "Row 1 links this evidence to the contradiction: “Adults are not children.” Add the "
        "evidence (fetch or paste it), then the row's quote and reason."
    )
    shot(person.page, "submit-prefilled-note", full_page=False)
