"""Every flow of SPEC's "For people", in headless Chromium with the test NIP-07 provider."""

from __future__ import annotations

import pytest
from browser import open_person, shot
from factories import Live
from playwright.sync_api import Browser, expect


@pytest.fixture
def person(browser: Browser) -> None:
    return None


def test_without_an_extension_the_page_says_which_to_install(browser: Browser, site: Live) -> None:
    nobody = open_person(browser, None)
    try:
        nobody.page.goto(site.url + "/")
        expect(nobody.page.locator("#no-extension")).to_be_visible()
        expect(nobody.page.locator("#no-extension")).to_contain_text("Alby")
        shot(nobody.page, "connect-no-extension")
    finally:
        nobody.close()
