"""Small things a reader met on the pages (issue 34.10), each looked at in Chromium at desktop
and phone width: Connect without JavaScript says what it needs; the docs' Limits table fits a
phone without breaking words; counts are written with thousands separators everywhere."""

from __future__ import annotations

from typing import Final

from browser import DESKTOP, PHONE, shot
from factories import Live
from playwright.sync_api import Browser, expect

WIDTHS: Final = {"desktop": DESKTOP, "phone": PHONE}


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
