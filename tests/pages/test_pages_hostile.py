"""What a page must never do with what records hold, and the page's quote matching against the
server's, in headless Chromium.

Evidence text is untrusted HTML. Payloads with `<script>`, `onerror=` and `javascript:` go into
every text field of every kind (and a profile name), and every page that shows them is opened:
nothing runs, no element gains a handler, and the text reads as text.

The submit page normalizes quotes in JavaScript; hypothesis holds it equal to
`tms.rules.quotes.normalize` on random text (ß, ligatures, curly quotes, odd whitespace), and its
matched spans to `tms.rules.spans.QuoteIndex`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

import httpx
import pytest
from browser import Person, on_ledger, open_person, shot
from factories import (
    Live,
    claim,
    contradiction,
    evidence,
    link,
    members,
    profile,
    terms,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Browser, Page, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.pages.security import content_security_policy
from tms.rules.admission import OPERATOR
from tms.rules.quotes import CHARACTER_MAP, normalize
from tms.rules.spans import QuoteIndex

OWNER: Final = SecretKey(bytes([0x81]) * 32)
SLUG: Final = "hostile"
MARK: Final = "window.__pwned = (window.__pwned || 0) + 1"
PAYLOADS: Final = [
    f"<script>{MARK}</script>",
    f'<img src=x onerror="{MARK}">',
    f"\"><svg onload='{MARK}'>",
    f"javascript:{MARK}",
    f"</textarea><script>{MARK}</script>",
    f'{{{{ 7*7 }}}}<iframe srcdoc="<script>{MARK}</script>">',
]
PAYLOAD: Final = " ".join(PAYLOADS)


@pytest.fixture(scope="module")
def world(site: Live) -> dict[str, str]:
    """Every text field of every kind holds every payload; the ids of what was stored."""
    doc = evidence(
        OWNER,
        SLUG,
        f"Start. {PAYLOAD} End.",
        title=PAYLOAD,
        url=f"javascript:{MARK}",
        source=PAYLOAD,
    )
    first = claim(OWNER, SLUG, f"Claim {PAYLOAD}")
    second = claim(OWNER, SLUG, f"Rival {PAYLOAD}")
    quote = link(OWNER, SLUG, doc["id"], first["id"], PAYLOADS[1], reason=PAYLOAD)
    clash = contradiction(OWNER, SLUG, [first["id"], second["id"]], PAYLOAD)

    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                profile(OWNER, PAYLOAD, about=PAYLOAD),
                members(OWNER, SLUG, []),
                doc,
                first,
                second,
                quote,
                clash,
            ],
            origin=OPERATOR,
        )

    on_ledger(site.database_url, seed)
    return {"evidence": doc["id"], "claim": first["id"]}


@pytest.fixture
def owner(browser: Browser, site: Live, world: dict[str, str]) -> Iterator[Person]:
    person = open_person(browser, OWNER)
    page = person.page
    page.goto(site.url + "/")
    page.wait_for_selector("html[data-js='ready']", state="attached")
    page.click("#connect-button")
    expect(page.locator("#logout")).to_be_visible()
    yield person
    person.close()


def assert_nothing_ran(page: Page) -> None:
    assert page.evaluate("window.__pwned") is None
    assert (
        page.evaluate(
            "[...document.querySelectorAll('*')].filter(e => [...e.attributes].some("
            "a => a.name.startsWith('on'))).length"
        )
        == 0
    )
    inline = page.evaluate("[...document.querySelectorAll('script')].filter(s => !s.src).length")
    assert inline == 0
    assert page.locator("iframe, svg[onload], img[src='x']").count() == 0


def test_payloads_in_every_field_never_run(
    owner: Person, site: Live, world: dict[str, str]
) -> None:
    page = owner.page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pages = {
        "hostile-home": "/",
        "hostile-collection": f"/c/{SLUG}",
        "hostile-search": f"/c/{SLUG}?q=script&method=keyword",
        "hostile-claim": f"/c/{SLUG}/claims/{world['claim']}",
        "hostile-evidence": f"/c/{SLUG}/evidence/{world['evidence']}",
        "hostile-members": f"/c/{SLUG}/members",
        "hostile-dashboard": "/dashboard",
    }
    for name, path in pages.items():
        page.goto(site.url + path)
        assert_nothing_ran(page)
        shot(page, name)
    assert dialogs == []
    page.goto(f"{site.url}/c/{SLUG}/evidence/{world['evidence']}")
    expect(page.locator("#document")).to_contain_text(PAYLOADS[0])  # as text
    expect(page.locator("#document mark")).to_have_text(PAYLOADS[1])
    assert page.locator("#evidence a[href^='javascript']").count() == 0
    page.goto(f"{site.url}/c/{SLUG}/claims/{world['claim']}")
    expect(page.locator(".context mark")).to_have_text(PAYLOADS[1])
    expect(page.locator("#claim .meta strong")).to_contain_text("<script>")


def test_every_page_sends_a_strict_content_security_policy(site: Live, relay_url: str) -> None:
    for path in ("/", "/docs", "/docs.md", "/c/x", "/terms", "/static/tms.css"):
        policy = httpx.get(site.url + path).headers["content-security-policy"]
        assert "script-src 'self';" in policy and "unsafe-inline" not in policy
        assert f"connect-src 'self' {relay_url};" in policy
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy


def test_the_policy_names_the_sites_own_websocket_origin_when_it_is_known() -> None:
    """The reading pages open a WebSocket to this site's relay: `'self'` covers it in CSP
    Level 3, and behind a proxy (TMS_BASE_URL) the public ws(s) origin is named too."""
    relays = ("wss://relay.example.net",)
    policy = content_security_policy(relays, "https://tms.example.org")
    assert "connect-src 'self' wss://tms.example.org wss://relay.example.net;" in policy
    assert "connect-src 'self' ws://10.0.0.5:8080;" in content_security_policy(
        (), "http://10.0.0.5:8080"
    )
    assert "connect-src 'self' wss://relay.example.net;" in content_security_policy(relays)


@pytest.fixture
def relay_url(relay: object) -> str:
    return str(relay.url)  # type: ignore[attr-defined]


# --- the page's quote matching against the server's ------------------------------------------

ALPHABET: Final = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(
        [*sorted(CHARACTER_MAP), "ß", "ẞ", "İ", "ŉ", "ǰ", "ﬀ", "ﬃ", "Σ", "ς", "ᾼ", "𐐀"]
    ),
    st.sampled_from([" ", "\n", "A", "a", "\t", "\u00a0"]),
)
TEXTS: Final = st.text(alphabet=ALPHABET, max_size=40)


@pytest.fixture
def submit_page(owner: Person, site: Live) -> Page:
    page = owner.page
    page.goto(site.url + "/submit")
    page.wait_for_selector("html[data-js='ready']", state="attached")
    page.evaluate(
        "import('/static/quotes.js').then(async q => { await q.loadRules(); window.__q = q })"
    )
    page.wait_for_function("window.__q !== undefined")
    return page


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(TEXTS, min_size=1, max_size=20))
def test_the_page_normalizes_exactly_as_the_server(submit_page: Page, texts: list[str]) -> None:
    got = submit_page.evaluate("texts => texts.map(t => window.__q.normalize(t))", texts)
    assert got == [normalize(t) for t in texts]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXTS, start=st.integers(0, 40), length=st.integers(1, 12), noise=TEXTS)
def test_the_page_finds_the_span_the_server_finds(
    submit_page: Page, text: str, start: int, length: int, noise: str
) -> None:
    for quote in (text[start : start + length], noise):
        span = submit_page.evaluate(
            "([t, q]) => { const s = new window.__q.QuoteIndex(t).find(q); "
            "return s === null ? null : t.slice(s[0], s[1]) }",
            [text, quote],
        )
        found = QuoteIndex(text).find(quote)
        assert span == (None if found is None else text[found[0] : found[1]]), json.dumps(
            [text, quote]
        )
