"""Templates: Jinja2 with autoescaping on every HTML template, so whatever a record holds
(evidence text is untrusted HTML) reaches the page as text. Markdown templates (the docs) are
not HTML and are rendered to HTML by `tms.pages.docs`, which escapes raw HTML itself.

The static files' URLs carry a hash of their content, so a browser never runs a stale script
against a newer page.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from tms.nostr.nip19 import npub_encode

STATIC_DIR: Final = Path(str(files("tms.pages").joinpath("static")))


@lru_cache(maxsize=4096)
def _npub(pubkey: str) -> str:
    """Cached: a page names the same few keys many times (200 links by one author), and
    bech32 in Python costs about 0.1 ms a key."""
    return npub_encode(pubkey)


@lru_cache(maxsize=4096)
def _short_key(pubkey: str) -> str:
    npub = _npub(pubkey)
    return f"{npub[:12]}…{npub[-6:]}"


def _cut(text: object, limit: int = 300) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _thousands(value: object) -> str:
    """A count as every page, script and the CLI write it: 6,000."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def _when(value: object) -> str:
    """An ISO 8601 time or a Unix time, as a reader wants it: minutes, UTC."""
    if isinstance(value, int):
        moment = datetime.fromtimestamp(value, UTC)
    else:
        moment = datetime.fromisoformat(str(value))
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _similarity(distance: object) -> str:
    """A cosine distance (0 to 2) as people read it: 1 - distance, as a percentage. Opposite
    meanings (a distance over 1) show as 0%, not as a negative number."""
    value = 1 - float(distance) if isinstance(distance, int | float) else 0.0
    return f"{round(max(0.0, min(1.0, value)) * 100)}%"


def record_id(event_id: str, slug: str | None = None, dispute: str | None = None) -> Markup:
    """A record's full id with a copy button (static/copy.js) and, given `dispute` (the words of
    the action), a link that opens /submit with a row prefilled to rebut the record. Python,
    not a template macro: a claim page shows 200 of them, and a macro call costs 20 µs each."""
    shown = escape(event_id)
    html = (
        '<div class="record-id"><span class="id-text"><span class="label">Id</span> '
        f'<code class="id full-id">{shown}</code></span> '
        f'<button type="button" class="copy" data-copy="{shown}" '
        f'aria-label="Copy the id {escape(event_id[:8])}…">Copy</button>'
    )
    if dispute is not None and slug is not None:
        target = escape(f"/submit?c={quote(slug)}&to={quote(event_id)}&relation=REBUTS")
        html += f' <a class="dispute" href="{target}">{escape(dispute)}</a>'
    return Markup(html + "</div>")


def _paragraphs(text: object) -> list[str]:
    """A hard-wrapped text (the terms: lines of 100 characters) as its paragraphs, each on one
    line, for the browser to wrap to the window: wrapped again inside a phone's 40 characters,
    the original lines came out long, short, long, short."""
    blocks = str(text or "").replace("\r\n", "\n").split("\n\n")
    return [" ".join(block.split()) for block in blocks if block.strip()]


PROFILE_KINDS: Final = ("human", "agent")  # what the home page's profile forms write first


def _profile_about(about: object) -> tuple[str, str]:
    """A profile's `about` as the home page's forms write it (`human`, or `agent: note`), split
    into the kind and the note, so an edit starts from what is stored. An `about` written
    elsewhere is all note, of a person."""
    text = "" if about is None else str(about)
    kind, colon, note = text.partition(":")
    if kind.strip() in PROFILE_KINDS and (colon or not note):
        return kind.strip(), note.strip()
    return "human", text


def _profile_about_ours(about: object) -> bool:
    """Whether an `about` is as the home page's forms write it (`human`, `agent: note`): an
    edit then writes it so again; any other `about` (a profile from elsewhere) stays as typed."""
    kind, colon, note = str(about or "").partition(":")
    return kind.strip() in PROFILE_KINDS and bool(colon or not note)


def _http_url(url: object) -> str | None:
    """A URL fit for a link: http(s) only, never `javascript:` or `data:`."""
    if isinstance(url, str) and url.lower().startswith(("https://", "http://")):
        return url
    return None


class Renderer:
    def __init__(self) -> None:
        self.env = Environment(
            loader=PackageLoader("tms.pages", "templates"),
            autoescape=lambda name: name is None or not name.endswith(".md"),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        self.env.filters.update(
            npub=_npub,
            shortkey=_short_key,
            cut=_cut,
            thousands=_thousands,
            when=_when,
            http_url=_http_url,
            similarity=_similarity,
            profile_about=_profile_about,
            profile_about_ours=_profile_about_ours,
            paragraphs=_paragraphs,
        )
        versions = {
            path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
            for path in STATIC_DIR.iterdir()
            if path.is_file()
        }
        self.env.globals["static"] = lambda name: f"/static/{name}?v={versions.get(name, '0')}"
        self.env.globals["record_id"] = record_id

    def __call__(self, template: str, context: dict[str, Any]) -> str:
        return self.env.get_template(template).render(context)
