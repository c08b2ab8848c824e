"""The browser's fixtures: a live TMS and a test relay per module (over a database of its
own), one Chromium per module, and a fresh context and page per person in a test.

Playwright's sync API keeps an event loop running in this thread while the browser lives, so
nothing else may call `asyncio.run` meanwhile: the browser is started after the module's
database and server (and stopped before them), and seeding runs in a thread of its own
(`browser.on_ledger`). One browser per module, not per session, so that the async tests of
other modules never run beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser import CHROMIUM, CHROMIUM_ARGS, Person, Relay
from factories import Live, fresh_database, live_server, settings
from playwright.sync_api import Browser, sync_playwright


@pytest.fixture(scope="module")
def browser(site: Live) -> Iterator[Browser]:
    """Debian's Chromium (`.ci/run` installs it), never a downloaded browser."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def relay() -> Iterator[Relay]:
    with Relay().running() as running:
        yield running


@pytest.fixture(scope="module")
def site(pg_server_url: str, template_url: str, relay: Relay) -> Iterator[Live]:
    config = settings(TMS_PROFILE_RELAYS=relay.url, TMS_EMBED="off")
    with (
        fresh_database(pg_server_url, template_url, "tms_web") as url,
        live_server(url, config) as live,
    ):
        yield live


@pytest.fixture
def people(browser: Browser) -> Iterator[list[Person]]:
    """The people a test opened (`browser.connect`), closed after it."""
    opened: list[Person] = []
    yield opened
    for person in opened:
        person.close()
