"""What the reading pages show of quotes: the marked spans of an evidence page's window and what
each link points at. The handlers are in `tms.web.pages`; a quote in its context comes ready
from the ledger (`tms.ledger.excerpts`), read from its stored anchor."""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple
from urllib.parse import quote

from tms.ledger.access import ReadableCollection
from tms.ledger.excerpts import ShownLink
from tms.ledger.reads import Reads
from tms.types import KIND_CLAIM, KIND_EVIDENCE, KIND_LINK


class Target(NamedTuple):
    """What a link on the evidence page points at: its kind, words to show (a link's are its
    quote, shown as a quote by the page, never wrapped in quotation marks of ours: a quote's
    own would show doubled), and the page that shows it (None when no page does)."""

    kind: str
    words: str
    href: str | None


async def link_targets(
    readable: ReadableCollection, links: list[ShownLink], reads: Reads
) -> dict[str, Target]:
    """What each link points at, and where a page shows it: a claim or an evidence has its
    own page, a link is shown on its claim's page, a contradiction on no page of its own
    (only its words are given). A target outside the collection is simply absent."""
    cited = await reads.cited(readable, {found.to_id for found in links})
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
            targets[target_id] = Target("link", c.quote or "", href)
        else:
            targets[target_id] = Target("contradiction", c.reason or "", None)
    return targets


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
