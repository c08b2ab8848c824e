"""A write policy's refusal of the evidence, on the submit page: in plain words beside the
evidence, not `events[0] (d3cb…): ...` at the bottom of the page (issue 34.10). The example
`allowlist` plugin refuses evidence from a host it does not list."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

import pytest
from browser import DESKTOP, PHONE, Person, Relay, connect, on_ledger, shot
from factories import Live, fresh_database, key, live_server, members, settings, terms
from playwright.sync_api import Browser, expect

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

OWNER: Final = key(0xE1)
SLUG: Final = "guarded"
TEXT: Final = "Serum DAO activity was measured in 60 adults with suspected histamine intolerance."


@pytest.fixture(scope="module")
def site(pg_server_url: str, template_url: str, relay: Relay) -> Iterator[Live]:
    """This module's server: the allowlist plugin enabled, evidence from example.org only."""
    config = settings(
        TMS_PROFILE_RELAYS=relay.url,
        TMS_EMBED="off",
        TMS_PLUGINS="allowlist",
        TMS_EVIDENCE_HOSTS="example.org",
    )
    old = os.environ.get("TMS_EVIDENCE_HOSTS")
    os.environ["TMS_EVIDENCE_HOSTS"] = "example.org"  # the plugin reads its own setting there
    try:
        with (
            fresh_database(pg_server_url, template_url, "tms_policy") as url,
            live_server(url, config) as live,
        ):
            yield live
    finally:
        if old is None:
            os.environ.pop("TMS_EVIDENCE_HOSTS", None)
        else:
            os.environ["TMS_EVIDENCE_HOSTS"] = old


def test_a_policy_refusing_the_evidence_says_so_beside_it(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit([terms(OWNER), members(OWNER, SLUG, [])], origin=OPERATOR)

    on_ledger(site.database_url, seed)
    page = connect(browser, site, OWNER, people).page
    page.goto(f"{site.url}/submit?c={SLUG}")
    page.wait_for_selector("html[data-js='ready']", state="attached")
    page.fill("#url", "https://elsewhere.net/study")
    page.fill("#title", "A study")
    page.fill("#text", TEXT)
    row = page.locator("#rows .row").first
    row.locator(".claim").fill("Most adults tested had low DAO.")
    row.locator(".quote").fill("measured in 60 adults")
    row.locator(".reason").fill("The study says so.")
    page.click("#publish")
    check = page.locator("#evidence-check")
    expect(check).to_have_text(
        "Refused: evidence from elsewhere.net is not accepted here: not a listed source"
    )
    status = page.locator("#publish-status")
    expect(status).to_have_text("Refused: nothing was stored. The evidence above says why.")
    expect(page.locator("main")).not_to_contain_text("events[0]")
    check.scroll_into_view_if_needed()
    shot(page, "submit-policy-refused", full_page=False)
    page.set_viewport_size(PHONE)
    check.scroll_into_view_if_needed()
    shot(page, "submit-policy-refused-phone", full_page=False)
    page.set_viewport_size(DESKTOP)
