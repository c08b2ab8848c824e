"""The user guide, `/docs.md` and `/docs`: SPEC's contract written for this server, with its
base URL and current terms filled in, and every limit read from the code that enforces it, so
the numbers in the guide cannot drift from the server's.

The Markdown is a template (`templates/docs.md`); the HTML is that Markdown rendered by
markdown-it (CommonMark, tables, raw HTML escaped rather than passed through), every heading
given the id GitHub would give it (so `[..](#checking-the-history-transparency-log)` in the
Markdown works on the page too), and a table of contents of its sections: the guide is long.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Final, NamedTuple

from jinja2 import Environment, PackageLoader, StrictUndefined
from limits import RateLimitItem
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_core import StateCore
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms.config import Settings
from tms.fetch.client import MAX_BYTES, MAX_REDIRECTS, TOTAL_TIMEOUT
from tms.guard.rates import NEG_BYTES_PER_UNIT, NEG_ITEMS_PER_UNIT
from tms.http.bodies import BIG_BODIES, BIG_WAIT_SECONDS, MAX_BODY, SMALL_BODY, MiB
from tms.http.login import NONCE_SECONDS, SESSION_SECONDS
from tms.http.protocol import MAX_HEAD_BYTES
from tms.ledger import CLAIM_SORTS, DEFAULT_WINDOW
from tms.mcp.envelope import MAX_CONTAINERS, MAX_VALUES
from tms.nostr.events import MAX_DEPTH, MAX_TAG_CHARS, MAX_TAGS
from tms.nostr.filters import MAX_IDS, MAX_LISTED_IDS, MAX_TAG_VALUE_CHARS
from tms.nostr.filters import MAX_VALUES as FILTER_VALUES
from tms.nostr.nip42 import MAX_AGE_SECONDS as NIP42_SECONDS
from tms.nostr.nip98 import MAX_AGE_SECONDS as NIP98_SECONDS
from tms.pages.door import door_of, page
from tms.pages.reading import EVIDENCE_PAGE_CHARS
from tms.relay import limits as relay_limits
from tms.rules.content import MAX_CONTENT_CONTAINERS, MAX_CONTENT_VALUES
from tms.rules.publish import MAX_BATCH
from tms.rules.requests import REQUEST_WINDOW_SECONDS
from tms.rules.terms import current_terms
from tms.types import (
    MAX_CONTENT_CHARS,
    MAX_EVIDENCE_LIMIT,
    MAX_FUTURE_SECONDS,
    MAX_LIMIT,
    MAX_LINKS_LIMIT,
    MAX_QUERY_CHARS,
)

TEMPLATE: Final = "docs.md"
TOC_LEVELS: Final = (2, 3)  # the sections and their parts; h4 (a language's snippet) is not
_NOT_IN_SLUG: Final = re.compile(r"[^\w\- ]", re.UNICODE)


def limits(settings: Settings) -> dict[str, Any]:
    """Every number the guide states: the code's constants, and this server's settings."""
    rates = settings.rates
    return {
        "batch": MAX_BATCH,
        "content_chars": MAX_CONTENT_CHARS,
        "request_seconds": REQUEST_WINDOW_SECONDS,
        "nip98_seconds": NIP98_SECONDS,
        "future_minutes": MAX_FUTURE_SECONDS // 60,
        "limit": MAX_LIMIT,
        "evidence_limit": MAX_EVIDENCE_LIMIT,
        "links_limit": MAX_LINKS_LIMIT,
        "query_chars": MAX_QUERY_CHARS,
        "window": DEFAULT_WINDOW,
        "fetch_mb": MAX_BYTES // MiB,
        "fetch_seconds": int(TOTAL_TIMEOUT),
        "fetch_redirects": MAX_REDIRECTS,
        "small_body_mib": SMALL_BODY // MiB,
        "max_body_mib": MAX_BODY // MiB,
        "big_bodies": BIG_BODIES,
        "big_wait_seconds": f"{BIG_WAIT_SECONDS:g}",
        "login_hours": SESSION_SECONDS // 3600,
        "login_seconds": NONCE_SECONDS,
        "sorts": CLAIM_SORTS,
        "evidence_page": EVIDENCE_PAGE_CHARS,
        "depth": MAX_DEPTH,
        "tags": MAX_TAGS,
        "tag_chars": MAX_TAG_CHARS,
        "body_containers": MAX_CONTAINERS,
        "body_values": MAX_VALUES,
        "content_containers": MAX_CONTENT_CONTAINERS,
        "content_values": MAX_CONTENT_VALUES,
        "head_seconds": f"{settings.head_seconds:g}",
        "body_seconds": f"{settings.body_seconds:g}",
        "body_min_rate": f"{settings.body_min_rate:,}" if settings.body_min_rate else "",
        "per_address": settings.max_connections_per_address,
        "max_exports": settings.max_exports,
        "head_kib": MAX_HEAD_BYTES // 1024,
        "rate_address": _rates(rates.address),
        "rate_key": _rates(rates.key),
        "rate_fetch": _rates(rates.fetch),
        "rate_login": _rates(rates.login),
        "rate_read": _rates(rates.read),
        "neg_items_per_unit": NEG_ITEMS_PER_UNIT,
        "neg_kib_per_unit": NEG_BYTES_PER_UNIT // 1024,
        "auth_minutes": NIP42_SECONDS // 60,
        "relay_message_bytes": relay_limits.MAX_MESSAGE_BYTES,
        "relay_subscriptions": relay_limits.MAX_SUBSCRIPTIONS,
        "relay_filters": relay_limits.MAX_FILTERS,
        "relay_max_limit": relay_limits.MAX_LIMIT,
        "relay_default_limit": relay_limits.DEFAULT_LIMIT,
        "relay_values": FILTER_VALUES,
        "relay_ids": MAX_IDS,
        "relay_listed_ids": MAX_LISTED_IDS,
        "relay_outbox_bytes": relay_limits.OUTBOX_BYTES,
        "relay_behind_seconds": f"{settings.relay_behind_seconds:g}",
        "relay_stall_seconds": f"{relay_limits.STALL_SECONDS:g}",
        "relay_give_way_seconds": f"{relay_limits.GIVE_WAY_SECONDS:g}",
        "relay_reads": relay_limits.MAX_READS,
        "relay_tag_value_chars": MAX_TAG_VALUE_CHARS,
        "relay_idle_seconds": f"{settings.relay_idle_seconds:g}",
        "neg_sessions": relay_limits.MAX_NEG_SESSIONS,
        "neg_records": relay_limits.MAX_NEG_RECORDS,
        "neg_message_bytes": relay_limits.MAX_NEG_MESSAGE_BYTES,
    }


def _rates(items: tuple[RateLimitItem, ...]) -> str:
    """`10 per second and 300 per minute`, or `none`."""
    if not items:
        return "none"
    said = [
        f"{item.amount:,} per {item.GRANULARITY.name}"
        if item.multiples == 1
        else f"{item.amount:,} per {item.multiples} {item.GRANULARITY.name}s"
        for item in items
    ]
    return " and ".join(said)


@cache
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("tms.pages", "templates"),
        autoescape=False,  # Markdown, not HTML: markdown-it escapes what reaches HTML
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )


def markdown(
    base_url: str,
    settings: Settings,
    log_key: str = "<GET /log-key>",
    log_host: str = "<host>",
) -> str:
    """The guide for this server: its address, terms, limits (this server's `settings`), its
    checkpoint key (`log_key`, a C2SP verifier key `<name>+<key ID>+<key>`) and the host its
    logs are named after."""
    terms = current_terms()
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            base=base_url,
            ws_base="ws" + base_url.removeprefix("http"),
            terms=terms,
            limits=limits(settings),
            log_key=log_key,
            log_name=log_key.split("+", 1)[0],
            log_origin=log_host,
        )
    )


class Heading(NamedTuple):
    """A heading of the guide: its level (1 to 6), text, and id on the page."""

    level: int
    text: str
    id: str


def slug(text: str) -> str:
    """The id GitHub gives a heading: lowercase, punctuation dropped (not - or _), spaces to
    hyphens. `Checking the history (transparency log)` is `checking-the-history-transparency-log`,
    what a Markdown reader of /docs.md on GitHub or in an editor also follows."""
    return _NOT_IN_SLUG.sub("", text.strip().lower()).replace(" ", "-")


def _heading_ids(state: StateCore) -> None:
    """A core rule: every heading gets its id, a repeated one a `-1`, `-2` suffix (as GitHub);
    the headings are kept in `state.env` for the table of contents."""
    seen: dict[str, int] = {}
    found: list[Heading] = state.env.setdefault("headings", [])
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "heading_open" or index + 1 >= len(tokens):
            continue
        inline = tokens[index + 1]
        text = "".join(
            child.content
            for child in inline.children or []
            if child.type in ("text", "code_inline")
        )
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchor = base if count == 0 else f"{base}-{count}"
        token.attrSet("id", anchor)
        found.append(Heading(int(token.tag[1]), text, anchor))


@cache
def _renderer() -> MarkdownIt:
    renderer = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    renderer.core.ruler.push("heading_ids", _heading_ids)
    return renderer


def toc(headings: list[Heading]) -> str:
    """The table of contents: the sections (h2) and, nested, their parts (h3), as links."""
    sections: list[tuple[Heading, list[Heading]]] = []
    for heading in headings:
        if heading.level == TOC_LEVELS[0]:
            sections.append((heading, []))
        elif heading.level == TOC_LEVELS[1] and sections:
            sections[-1][1].append(heading)

    def link(heading: Heading) -> str:
        return f'<a href="#{escapeHtml(heading.id)}">{escapeHtml(heading.text)}</a>'

    items = []
    for section, parts in sections:
        inner = "".join(f"<li>{link(part)}</li>" for part in parts)
        items.append(f"<li>{link(section)}{f'<ol>{inner}</ol>' if inner else ''}</li>")
    return (
        '<nav class="toc" aria-labelledby="toc-title"><h2 id="toc-title">Contents</h2>'
        f"<ol>{''.join(items)}</ol></nav>"
    )


def html(
    base_url: str,
    settings: Settings,
    log_key: str = "<GET /log-key>",
    log_host: str = "<host>",
) -> str:
    """The guide as HTML (trusted: our own text, with raw HTML escaped by markdown-it), its
    table of contents after the title and the paragraphs before the first section."""
    env: dict[str, Any] = {}
    renderer = _renderer()
    tokens = renderer.parse(markdown(base_url, settings, log_key, log_host), env)
    rendered: str = renderer.renderer.render(tokens, renderer.options, env)
    contents = toc(env.get("headings", []))
    first_section = rendered.find("<h2")
    if first_section < 0:
        return rendered + contents
    return rendered[:first_section] + contents + rendered[first_section:]


# --- the routes --------------------------------------------------------------------------------


@page
async def guide_page(request: Request) -> Response:
    guide = html(door_of(request).origin(request), request.app.state.settings, *_log(request))
    return await door_of(request).render(request, "docs.html", guide=guide)


async def guide_markdown(request: Request) -> Response:
    guide = markdown(door_of(request).origin(request), request.app.state.settings, *_log(request))
    return Response(guide, media_type="text/markdown; charset=utf-8")


def _log(request: Request) -> tuple[str, str]:
    """The key checkpoints are signed with, and the host their origin names."""
    signer = request.app.state.runtime.ledger.log.signer
    return signer.key.verifier().encode(), signer.host


ROUTES: Final = [
    Route("/docs", guide_page, methods=["GET"], name="guide"),
    Route("/docs.md", guide_markdown, methods=["GET"], name="guide markdown"),
]
