"""The claim and evidence pages in Chromium with the test NIP-07 provider: "Contradicts…" picks
another claim, signs one kind-4704 contradiction and publishes it; a refused signature or a
refused publish stores nothing and says so; copy buttons copy full ids. Screenshots of both
pages (with links, contradictions and the picker open) at desktop and phone width."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from browser import DESKTOP, PHONE, Person, connect, on_ledger, shot
from factories import (
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
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

OWNER: Final = key(0xB1)  # approved; terms and profile signed
MEMBER: Final = key(0xB2)  # a member; terms signed
SLUG: Final = "dao"
TEXT: Final = (
    "Serum DAO activity was measured in 60 adults with suspected histamine intolerance.\n\n"
    "Low DAO activity was found in most of them, which the authors call “a consistent "
    "pattern” — though not in every case. Symptoms did not follow DAO levels closely."
)
DOC = evidence(OWNER, SLUG, TEXT, title="DAO in 60 adults", source="Example journal")
CLAIM = claim(OWNER, SLUG, "Low DAO activity causes histamine intolerance.")
RIVAL = claim(OWNER, SLUG, "Histamine intolerance is unrelated to DAO activity.")
THIRD = claim(MEMBER, SLUG, "Symptoms follow DAO levels closely.")
SUPPORT = link(OWNER, SLUG, DOC["id"], CLAIM["id"], "“a consistent pattern”")
REBUT = link(
    MEMBER,
    SLUG,
    DOC["id"],
    CLAIM["id"],
    "Symptoms did not follow DAO levels closely",
    relation="REBUTS",
    reason="If low DAO caused the symptoms, they would follow its level.",
)
QUALIFY = link(
    OWNER,
    SLUG,
    DOC["id"],
    CLAIM["id"],
    "though not in every case",
    relation="QUALIFIES",
    reason="Not every adult with symptoms had low DAO.",
)
EARLIER = contradiction(
    MEMBER, SLUG, [THIRD["id"], CLAIM["id"]], "One says DAO matters by its level, one not."
)


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
                THIRD,
                SUPPORT,
                REBUT,
                QUALIFY,
                EARLIER,
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, seed)


def claim_page(page: Page, site: Live) -> None:
    page.goto(f"{site.url}/c/{SLUG}/claims/{CLAIM['id']}")
    page.wait_for_selector("html[data-js='ready']", state="attached")


def stored(site: Live, sql: str, *args: Any) -> Any:
    async def read(ledger: Ledger) -> Any:
        return await ledger.pool.fetch(sql, *args)

    return on_ledger(site.database_url, read)


def test_the_claim_page_with_links_and_contradictions(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    page = connect(browser, site, MEMBER, people).page
    claim_page(page, site)
    expect(page.locator("#supports .context mark")).to_have_text("“a consistent pattern”")
    expect(page.locator("#rebuts .link")).to_have_count(1)
    expect(page.locator("#qualifies .link")).to_have_count(1)
    expect(page.locator(f"#contradiction-{EARLIER['id']}")).to_contain_text(
        "Symptoms follow DAO levels closely."
    )
    expect(page.locator("#claim .full-id")).to_have_text(CLAIM["id"])
    rebut = page.locator("#rebut")
    expect(rebut).to_have_attribute("href", f"/submit?c={SLUG}&to={CLAIM['id']}&relation=REBUTS")
    dispute = page.locator(f"#link-{REBUT['id']} a.dispute")
    expect(dispute).to_have_attribute("href", f"/submit?c={SLUG}&to={REBUT['id']}&relation=REBUTS")
    shot(page, "claim-page")
    page.set_viewport_size(PHONE)
    shot(page, "claim-page-phone")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the phone page is {width} px wide"


def test_contradicts_signs_and_publishes_one_contradiction(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    member = connect(browser, site, MEMBER, people)
    page = member.page
    claim_page(page, site)
    expect(page.locator("#contradicts")).to_be_hidden()
    page.click("#contradicts-open")
    expect(page.locator("#contradicts")).to_be_visible()
    expect(page.locator("#contradicts-open")).to_have_attribute("aria-expanded", "true")
    # The newest claims come first, this one never.
    expect(page.locator("#contradicts-choices .choice")).to_have_count(2)
    expect(page.locator("#contradicts-found")).to_contain_text("The newest claims")
    page.fill("#contradicts-search", "unrelated")
    expect(page.locator("#contradicts-choices .choice")).to_have_count(1)
    expect(page.locator("#contradicts-choices")).to_contain_text("unrelated to DAO activity")
    expect(page.locator("#contradicts-cost")).to_contain_text("one signature")
    page.click("#contradicts-publish")  # nothing picked yet: said, nothing signed
    expect(page.locator("#contradicts-status")).to_have_text("Pick the other claim first.")
    page.check(f"#contradicts-choices input[value='{RIVAL['id']}']")
    page.click("#contradicts-publish")
    expect(page.locator("#contradicts-status")).to_contain_text("Write the reason first")
    page.fill("#contradicts-reason", "One makes DAO the cause, the other denies any link.")
    expect(page.locator("#contradicts-status")).to_have_text("")  # fixed: no longer said
    shot(page, "claim-contradicts-open")
    page.set_viewport_size(PHONE)
    shot(page, "claim-contradicts-open-phone")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the phone page is {width} px wide"
    page.set_viewport_size(DESKTOP)
    assert [e["kind"] for e in member.signed] == [27235]  # nothing signed so far
    page.click("#contradicts-publish")
    page.wait_for_url("**?added=*")
    expect(page.locator("#contradiction-added")).to_contain_text("Your contradiction is stored")
    [signed] = [e for e in member.signed if e["kind"] == 4704]
    assert [e["kind"] for e in member.signed] == [27235, 4704]  # one signature
    assert json.loads(signed["content"]) == {
        "collection": SLUG,
        "claims": [CLAIM["id"], RIVAL["id"]],
        "reason": "One makes DAO the cause, the other denies any link.",
    }
    listed = page.locator(f"#contradiction-{signed['id']}")
    expect(listed).to_contain_text("One makes DAO the cause")
    expect(listed).to_contain_text("unrelated to DAO activity")
    expect(listed.locator(".full-id")).to_have_text(signed["id"])
    rows = stored(
        site, "SELECT claim_id FROM contradiction_claims WHERE contradiction_id = $1", signed["id"]
    )
    assert {r["claim_id"] for r in rows} == {CLAIM["id"], RIVAL["id"]}
    shot(page, "claim-contradiction-added")


def test_a_refusal_says_that_nothing_was_stored(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    member = connect(browser, site, MEMBER, people)
    page = member.page
    before = stored(site, "SELECT count(*) AS n FROM events")[0]["n"]
    claim_page(page, site)
    page.click("#contradicts-open")
    page.fill("#contradicts-search", THIRD["id"][:12])
    expect(page.locator("#contradicts-choices .choice")).to_have_count(1)
    page.check(f"#contradicts-choices input[value='{THIRD['id']}']")
    page.fill("#contradicts-reason", "A reason.")
    # The extension declines to sign.
    page.evaluate(
        "() => { window.nostr.signEvent = async () => { throw new Error('nos2x: denied') } }"
    )
    page.click("#contradicts-publish")
    expect(page.locator("#contradicts-status")).to_have_text(
        "Your extension did not sign (nos2x: denied). Nothing was stored."
    )
    # The extension signs, but what it returns does not verify: the server refuses.
    page.evaluate(
        """() => {
          const sign = window.__tmsTestSign
          window.nostr.signEvent = async (event) => {
            const signed = JSON.parse(await sign(JSON.stringify(event)))
            const flipped = signed.sig[0] === '0' ? '1' : '0'
            signed.sig = flipped + signed.sig.slice(1)
            return signed
          }
        }"""
    )
    page.click("#contradicts-publish")
    status = page.locator("#contradicts-status")
    expect(status).to_contain_text("Refused: signature does not verify")
    expect(status).to_contain_text(". Nothing was stored.")
    expect(status).not_to_contain_text("events[0]")
    expect(page.locator("#contradicts-publish")).to_be_enabled()
    shot(page, "claim-contradicts-refused")
    assert stored(site, "SELECT count(*) AS n FROM events")[0]["n"] == before


def test_copy_buttons_copy_the_full_id(browser: Browser, site: Live, people: list[Person]) -> None:
    person = connect(browser, site, MEMBER, people)
    person.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site.url)
    page = person.page
    claim_page(page, site)
    button = page.locator(f"#link-{REBUT['id']} button.copy")
    button.click()
    expect(button).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == REBUT["id"]
    page.locator("#claim button.copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == CLAIM["id"]
    expect(page.locator("#claim button.copy")).to_have_text("Copy", timeout=5000)

    page.goto(f"{site.url}/c/{SLUG}/evidence/{DOC['id']}")
    page.wait_for_selector("html[data-copy='ready']", state="attached")
    page.locator("#evidence button.copy").click()
    expect(page.locator("#evidence button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == DOC["id"]
    expect(page.locator("#document mark")).to_have_count(3)
    expect(page.locator("#quotes")).not_to_contain_text("““")
    shot(page, "evidence-page")
    page.set_viewport_size(PHONE)
    shot(page, "evidence-page-phone")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the phone page is {width} px wide"
