"""The collection page a page of claims at a time: "Showing 101-200 of 250" and a pager, for every
sort and for a search, with the total read from the counts kept as records are stored; over HTTP,
and in Chromium at desktop and phone width (screenshots to look at)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import httpx
import pytest
from browser import PHONE, Person, connect, on_ledger, shot
from factories import Live, claim, evidence, key, link, nip98_header, terms
from playwright.sync_api import Browser, expect

from tms.ledger.read.reads import CLAIM_SORTS
from tms.ledger.service import Ledger
from tms.pages.collection import CLAIMS_SHOWN
from tms.rules.admission import OPERATOR

DASH: Final = "\N{EN DASH}"  # as the page writes a range
OWNER: Final = key(0xC1)
SLUG: Final = "paged"
TOTAL: Final = 10 * CLAIMS_SHOWN + 50  # 11 pages; over a thousand, written 1,050
PAGES: Final = 11
MATCHING: Final = TOTAL // 2  # the odd ones name histamine
MATCHING_PAGES: Final = 6
DOC = evidence(OWNER, SLUG, "Histamine intolerance is common. Histamine is rare.")
CLAIMS: Final = [
    claim(OWNER, SLUG, f"Claim number {n} about histamine" if n % 2 else f"Claim number {n}")
    for n in range(TOTAL)
]
# the first claim gets a link, so the count sorts put it first or last
SUPPORTED = link(OWNER, SLUG, DOC["id"], CLAIMS[0]["id"], "histamine intolerance")


@pytest.fixture(scope="module")
def seeded(site: Live) -> Live:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit([terms(OWNER), DOC, *CLAIMS[:500]], origin=OPERATOR)
        await ledger.submit([*CLAIMS[500:], SUPPORTED], origin=OPERATOR)

    on_ledger(site.database_url, seed)
    return site


@contextmanager
def logged_in(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        signed = OWNER.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        answer = client.post(
            challenge["url"], headers={"Authorization": nip98_header(signed), "Origin": live.url}
        )
        assert answer.status_code == 200, answer.text
        yield client


def listed(page: str) -> list[str]:
    claims = page.split('id="claims"')[1].split('id="evidence"')[0]
    return re.findall(r'<li class="claim" data-id="([0-9a-f]{64})"', claims)


def test_every_sort_pages_through_all_its_claims(seeded: Live) -> None:
    with logged_in(seeded) as client:
        for sort in CLAIM_SORTS:
            seen: list[str] = []
            for number in range(1, PAGES + 1):
                page = client.get(f"/c/{SLUG}", params={"sort": sort, "page": number}).text
                first = (number - 1) * CLAIMS_SHOWN + 1
                last = min(number * CLAIMS_SHOWN, TOTAL)
                shown = f"Showing {first:,}{DASH}{last:,} of {TOTAL:,}</p>"
                assert shown in page, (sort, number)
                assert f"Page {number} of {PAGES}" in page
                if number < PAGES:
                    assert f'href="?sort={sort}&amp;page={number + 1}" rel="next"' in page
                else:
                    assert 'rel="next"' not in page
                if number > 1:
                    assert f'href="?sort={sort}&amp;page={number - 1}" rel="prev"' in page
                seen += listed(page)
            assert sorted(seen) == sorted(c["id"] for c in CLAIMS), sort
        recent = client.get(f"/c/{SLUG}").text
        assert CLAIMS[-1]["id"] in listed(recent)
        # past the end: the last page; nonsense: the first
        assert f"Showing 1,001{DASH}1,050 of 1,050" in client.get(f"/c/{SLUG}?page=99").text
        assert f"Showing 1{DASH}100 of 1,050" in client.get(f"/c/{SLUG}?page=x").text
        # the collection's counts, here and on the home page's card, with thousands separators
        assert '<span data-count="claims" data-n="1050">1,050 claims</span>' in recent
        assert "<dt>claims</dt><dd>1,050</dd>" in client.get("/").text
        # a later page of Recent is not where the live script puts new claims
        assert 'data-view="recent page 2"' in client.get(f"/c/{SLUG}?page=2").text


def test_a_search_pages_through_its_matches(seeded: Live) -> None:
    matching = [c["id"] for c in CLAIMS if "histamine" in c_text(c)]
    with logged_in(seeded) as client:
        seen: list[str] = []
        for number in range(1, MATCHING_PAGES + 1):
            params = {"q": "histamine", "method": "keyword", "page": str(number)}
            page = client.get(f"/c/{SLUG}", params=params).text
            last = min(number * CLAIMS_SHOWN, len(matching))
            first = (number - 1) * CLAIMS_SHOWN + 1
            assert f"Showing {first}{DASH}{last} of {len(matching)} found" in page
            assert f"Page {number} of {MATCHING_PAGES}" in page
            seen += listed(page)
        assert sorted(seen) == sorted(matching)
        following = "?q=histamine&amp;method=keyword&amp;page=2"
        assert (
            f'href="{following}" rel="next"'
            in client.get(f"/c/{SLUG}", params={"q": "histamine", "method": "keyword"}).text
        )


def c_text(event: dict[str, object]) -> str:
    return str(json.loads(str(event["content"]))["text"])


def test_the_pager_in_the_browser(browser: Browser, seeded: Live, people: list[Person]) -> None:
    person = connect(browser, seeded, OWNER, people)
    person.page.goto(f"{seeded.url}/c/{SLUG}?sort=links")
    expect(person.page.locator("#shown")).to_have_text(f"Showing 1{DASH}100 of {TOTAL:,}")
    person.page.click("nav.pager a[rel=next]")
    expect(person.page.locator("#shown")).to_have_text(f"Showing 101{DASH}200 of {TOTAL:,}")
    expect(person.page.locator(".tabs [aria-current=page]")).to_have_text("Most linked")
    shot(person.page, "collection-pager-desktop", full_page=False)
    person.page.locator("nav.pager").scroll_into_view_if_needed()
    shot(person.page, "collection-pager-desktop-bottom", full_page=False)
    phone = connect(browser, seeded, OWNER, people, viewport=PHONE)
    phone.page.goto(f"{seeded.url}/c/{SLUG}?q=histamine&method=keyword&page={MATCHING_PAGES}")
    expect(phone.page.locator("#shown")).to_have_text(
        f"Showing 501{DASH}{MATCHING} of {MATCHING} found"
    )
    phone.page.locator("nav.pager").scroll_into_view_if_needed()
    shot(phone.page, "collection-pager-phone", full_page=False)
