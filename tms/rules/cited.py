"""What a proof's tree prints of a cited event: the `Cited` record the ledger reads for it (its
kind and a few short fields, never a document's text) and the line or two each kind becomes.
Pure; `tms.rules.proofs` builds the tree from these lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tms.nostr.events import is_hex64
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, KIND_EVIDENCE, KIND_LINK, KIND_NAMES, EventId

MAX_TEXT_CHARS: Final = 300  # texts (say, claim text, quote, ...) are trimmed to this in the tree
# Characters of each cited text worth reading: `clip` looks at four times its limit, and one
# more tells it the text went on.
CITED_TEXT_CHARS: Final = MAX_TEXT_CHARS * 4 + 1
_SHORT_ID_CHARS: Final = 12
_SPACES = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


@dataclass(frozen=True, slots=True)
class Cited:
    """What the tree prints of a cited event: its kind and the fields of its line. Texts may
    arrive cut to `CITED_TEXT_CHARS`, since the tree shows no more of them."""

    kind: int
    text: str | None = None  # a claim's
    title: str | None = None  # an evidence's, with its url and source
    url: str | None = None
    source: str | None = None
    relation: str | None = None  # a link's, with its ends and quote
    from_: str | None = None
    to: str | None = None
    quote: str | None = None
    reason: str | None = None  # a contradiction's, with how many claims it names
    claims: int | None = None


def event_lines(event_id: EventId, event: Cited) -> list[str]:
    """An event of this collection as one or two lines: what a reader needs beside the answer."""
    head = f"{KIND_NAMES.get(event.kind, f'kind {event.kind}')} {short(event_id)}"
    render = _RENDER.get(event.kind)
    return [head] if render is None else render(head, event)


def _claim_lines(head: str, claim: Cited) -> list[str]:
    return [f"{head}: {_text(claim.text) or '(no text)'}"]


def _evidence_lines(head: str, evidence: Cited) -> list[str]:
    title = _text(evidence.title) or _text(evidence.url) or "untitled"
    source = _text(evidence.source)
    return [f"{head}: {_dq(title)}" + (f" (source: {source})" if source else "")]


def _link_lines(head: str, link: Cited) -> list[str]:
    relation = _text(link.relation, 20) or "?"
    line = f"{head}: {_ref_id(link.from_)} {relation} {_ref_id(link.to)}"
    quote = _text(link.quote)
    return [line, f"quote: {_dq(quote)}"] if quote else [line]


def _contradiction_lines(head: str, contradiction: Cited) -> list[str]:
    count = f"{contradiction.claims} claims" if contradiction.claims is not None else "claims"
    return [f"{head} ({count}): {_text(contradiction.reason) or '(no reason)'}"]


# How each kind is printed in the tree; other kinds (a member list) show their head only.
_RENDER: Final[dict[int, Callable[[str, Cited], list[str]]]] = {
    KIND_CLAIM: _claim_lines,
    KIND_EVIDENCE: _evidence_lines,
    KIND_LINK: _link_lines,
    KIND_CONTRADICTION: _contradiction_lines,
}


def _text(value: str | None, limit: int = MAX_TEXT_CHARS) -> str:
    return clip(value, limit) if value else ""


def _ref_id(value: str | None) -> str:
    return short(value) if value is not None and is_hex64(value) else "?"


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """One line, at most `limit` characters (plus an ellipsis when cut)."""
    flat = _SPACES.sub(" ", text[: limit * 4]).strip()
    if len(flat) <= limit and len(text) <= limit * 4:
        return flat
    return flat[:limit].rstrip() + "…"


def short(event_id: str) -> str:
    return event_id[:_SHORT_ID_CHARS] + "…"


def _dq(text: str) -> str:
    return f'"{text}"'
