"""What the browser tests are made of: Debian's Chromium driven by Playwright (no browser
download), a test NIP-07 provider signing with a real key, a NIP-01 test relay on 127.0.0.1
serving the profile look-up, a live TMS over a database of its own, and screenshots.

The provider is `window.nostr`, injected into every page of a context before its scripts run:
`getPublicKey` and `signEvent` call back into Python (`page.expose_function`), which signs with
`tms.nostr.events.SecretKey.sign`, real BIP-340. Every signature the provider makes is counted,
so a test can prove that nothing was signed.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import websockets
from factories import Live
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.store.database import open_pool

CHROMIUM: Final = os.environ.get("TMS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# What an assertion on a page waits for before it fails: Playwright's 5 s was met by a loaded
# CI machine (a policy's refusal shown after a publish through a plugin, at load 10), where
# the behaviour was right and only late. A page that never shows it still fails.
expect.set_options(timeout=15_000)
ARTIFACTS: Final = Path(__file__).resolve().parent.parent / "artifacts"
DESKTOP: Final = {"width": 1280, "height": 900}
PHONE: Final = {"width": 390, "height": 844}

PROVIDER: Final = """
window.nostr = {
  getPublicKey: async () => await window.__tmsTestPublicKey(),
  signEvent: async (event) => JSON.parse(await window.__tmsTestSign(JSON.stringify(event))),
};
"""


@dataclass
class Person:
    """A browser context holding one key in its NIP-07 provider, and its page."""

    key: SecretKey
    context: BrowserContext
    page: Page
    signed: list[dict[str, Any]] = field(default_factory=list)

    def close(self) -> None:
        self.context.close()


def open_person(
    browser: Browser, key: SecretKey | None, *, viewport: dict[str, int] = DESKTOP
) -> Person:
    """A fresh context (its own cookies) whose pages see `key` through `window.nostr`; with
    `key` None, a browser without any extension."""
    context = browser.new_context(viewport=viewport, accept_downloads=True)  # type: ignore[arg-type]
    person = Person(key or SecretKey.generate(), context, context.new_page())
    if key is not None:

        def public_key() -> str:
            return key.pubkey

        def sign(template: str) -> str:
            event = json.loads(template)
            signed = key.sign(
                event["kind"], event["content"], event["created_at"], event.get("tags", [])
            ).to_dict()
            person.signed.append(signed)
            return json.dumps(signed)

        context.expose_function("__tmsTestPublicKey", public_key)
        context.expose_function("__tmsTestSign", sign)
        context.add_init_script(PROVIDER)
    return person


def ready(page: Page) -> None:
    """The page's script has attached its handlers (what a test waits for before acting)."""
    page.wait_for_selector("html[data-js='ready']", state="attached")


def visit(page: Page, url: str) -> None:
    """Open a page with a script, once the script has attached its handlers."""
    page.goto(url)
    ready(page)


def connect(
    browser: Browser, site: Live, key: SecretKey, people: list[Person], **kw: Any
) -> Person:
    """A person with `key` in their extension, logged in (the home page is showing); closed
    after the test by the `people` fixture."""
    person = open_person(browser, key, **kw)
    people.append(person)
    visit(person.page, site.url + "/")
    person.page.click("#connect-button")
    expect(person.page.locator("#logout")).to_be_visible()
    ready(person.page)
    return person


def kinds(person: Person) -> list[int]:
    """The kinds of what this person's extension signed, in order."""
    return [e["kind"] for e in person.signed]


def shot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """A screenshot in tests/artifacts/ (ignored by git), to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def on_ledger(database_url: str, work: Callable[[Ledger], Coroutine[Any, Any, Any]]) -> Any:
    """Run `work` with a ledger over the test's database (seeding, and looking behind the
    pages at what was stored)."""

    async def run() -> Any:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            return await work(Ledger(pool))
        finally:
            await pool.close()

    # In a thread of its own: Playwright's loop runs in this one (see conftest).
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(run()))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    if errors:
        raise errors[0]
    return result[0]


# --- a NIP-01 relay ------------------------------------------------------------------------------


class Relay:
    """Just enough of a relay for a profile look-up: it holds events and answers a REQ with
    those matching `kinds` and `authors` (newest first, up to `limit`), then EOSE."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.requests: list[Any] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _serve(self, socket: Any) -> None:
        try:
            async for message in socket:
                data = json.loads(message)
                self.requests.append(data)
                if data[0] == "REQ":
                    subscription, filters = data[1], data[2:]
                    for event in self._matching(filters):
                        await socket.send(json.dumps(["EVENT", subscription, event]))
                    await socket.send(json.dumps(["EOSE", subscription]))
        except websockets.ConnectionClosed:
            pass

    def _matching(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = []
        for wanted in filters:
            events = [
                e
                for e in self.events
                if e["kind"] in wanted.get("kinds", [e["kind"]])
                and e["pubkey"] in wanted.get("authors", [e["pubkey"]])
            ]
            events.sort(key=lambda e: (-e["created_at"], e["id"]))
            found.extend(events[: wanted.get("limit", len(events))])
        return found

    def _run(self, started: threading.Event) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            async with websockets.serve(self._serve, "127.0.0.1", 0) as server:
                port = next(iter(server.sockets)).getsockname()[1]
                self.url = f"ws://127.0.0.1:{port}"
                started.set()
                await self._stop.wait()

        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(main())
        self._loop.close()

    @contextmanager
    def running(self) -> Iterator[Relay]:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        assert started.wait(10), "the test relay did not start"
        try:
            yield self
        finally:
            assert self._loop is not None and self._stop is not None
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
