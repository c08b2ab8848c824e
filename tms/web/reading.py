"""What the reading pages show of quotes: each quote in its evidence's text (marked spans, a
quote in context) and what each link points at. The handlers are in `tms.web.pages`."""

from __future__ import annotations

import itertools
from typing import Any, Final, NamedTuple
from urllib.parse import quote

from tms.ledger.access import ReadableCollection
from tms.ledger.reads import Reads
from tms.results import LinkInfo
from tms.rules.spans import QuoteIndex
from tms.types import KIND_CLAIM, KIND_EVIDENCE, KIND_LINK

CONTEXT_CHARS: Final = 240  # evidence shown either side of a quote on a claim page


class Target(NamedTuple):
    """What a link on the evidence page points at: its kind, words to show, and the page
    that shows it (None when no page does)."""

    kind: str
    words: str
    href: str | None


async def link_targets(
    readable: ReadableCollection, links: list[LinkInfo], reads: Reads
) -> dict[str, Target]:
    """What each link points at, and where a page shows it: a claim or an evidence has its
    own page, a link is shown on its claim's page, a contradiction on no page of its own
    (only its words are given). A target outside the collection is simply absent."""
    cited = await reads.cited(readable, {found["to"] for found in links})
    inner = {c.to for c in cited.values() if c.kind == KIND_LINK and c.to is not None}
    below = await reads.cited(readable, inner - cited.keys()) if inner else {}
    kinds = {i: c.kind for i, c in (below | cited).items()}
    base = f"/c/{quote(readable.slug)}"
    targets: dict[str, Target] = {}
    for target_id, c in cited.items():
        if c.kind == KIND_CLAIM:
            targets[target_id] = Target("claim", c.text or "", f"{base}/claims/{target_id}")
        elif c.kind == KIND_EVIDENCE:
            title = c.title or "Untitled document"
            targets[target_id] = Target("evidence", title, f"{base}/evidence/{target_id}")
        elif c.kind == KIND_LINK:
            shown = c.to is not None and kinds.get(c.to) == KIND_CLAIM
            href = f"{base}/claims/{c.to}#link-{target_id}" if shown else None
            words = f"{c.relation or ''} link: “{c.quote or ''}”"
            targets[target_id] = Target("link", words, href)
        else:
            targets[target_id] = Target("contradiction", c.reason or "", None)
    return targets


def in_context(source: dict[str, Any], quote: str) -> dict[str, str] | None:
    """The quote in its evidence: some text before, the matched span, some after."""
    index: QuoteIndex | None = source.get("index")
    span = index.find(quote) if index is not None else None
    if span is None:
        return None
    text: str = source["text"]
    start, end = span
    before_start = max(0, start - CONTEXT_CHARS)
    after_end = min(len(text), end + CONTEXT_CHARS)
    return {
        "before": ("…" if before_start > 0 else "") + text[before_start:start],
        "quote": text[start:end],
        "after": text[end:after_end] + ("…" if after_end < len(text) else ""),
    }


def marked(window: str, offset: int, spans: list[tuple[int, int, str]]) -> list[dict[str, Any]]:
    """The window cut into pieces, each either plain or inside one or more quoted spans (with
    the ids of the links quoting it), for the template to escape and mark."""
    end = offset + len(window)
    cuts = {offset, end}
    for start, stop, _ in spans:
        if stop > offset and start < end:
            cuts.update((max(start, offset), min(stop, end)))
    points = sorted(cuts)
    segments: list[dict[str, Any]] = []
    for left, right in itertools.pairwise(points):
        links = [link for start, stop, link in spans if start <= left and right <= stop]
        segments.append({"text": window[left - offset : right - offset], "links": links})
    return segments
