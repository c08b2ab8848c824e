"""What a proof's tree prints of a cited event: the `Cited` record the ledger reads for it (its
kind and a few short fields, never a document's text) and the line or two each kind becomes;
and which cited claims are contested. Pure; `tms.rules.proofs` builds the tree from these lines.

A claim is contested when a REBUTS link of its collection points at it or a contradiction of its
collection names it. The ledger reads the first `MAX_DISPUTES` of each (oldest first) with the
claim; a proof lists them in `contested` and marks the claim in its tree. A link is disputed when
a REBUTS link points at it (a proof resting on a claim and its SUPPORTS link rests on that
support): the ledger reads the first `MAX_DISPUTES` of them with the link; a proof lists them in
`disputed_links` and marks the link in its tree. Disputes never change
whether a proof is well formed (SPEC's rules 1-3): they say what a reader should weigh.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from tms.nostr.events import is_hex64
from tms.results import ContestedClaim, DisputedLink
from tms.rules.kinds import kind_name
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, KIND_EVIDENCE, KIND_LINK, EventId

MAX_TEXT_CHARS: Final = 300  # texts (say, claim text, quote, ...) are trimmed to this in the tree
# Characters of each cited text worth reading: `clip` looks at four times its limit, and one
# more tells it the text went on.
CITED_TEXT_CHARS: Final = MAX_TEXT_CHARS * 4 + 1
_SHORT_ID_CHARS: Final = 12
MAX_DISPUTES: Final = 10  # rebutting links, and contradictions, listed per contested claim
MAX_CONTESTED: Final = 500  # contested claims, and disputed links, listed per proof
DISPUTE_REASON_CHARS: Final = 200  # a dispute's reason, ellipsis included
_SPACES = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


@dataclass(frozen=True, slots=True)
class Dispute:
    """A REBUTS link pointing at a claim, or a contradiction naming it: its id and its reason
    (cut to `DISPUTE_REASON_CHARS`)."""

    id: EventId
    reason: str


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
    anchor: tuple[int, int, int] | None = None  # a link's: start, end, occurrences
    reason: str | None = None  # a contradiction's, with how many claims it names
    claims: int | None = None
    rebuts: tuple[Dispute, ...] = ()  # a claim's or a link's disputes, the first MAX_DISPUTES
    contradictions: tuple[Dispute, ...] = ()

    @property
    def contested(self) -> bool:
        return bool(self.rebuts or self.contradictions)


def event_lines(event_id: EventId, event: Cited) -> list[str]:
    """An event of this collection as one or two lines: what a reader needs beside the answer."""
    head = f"{kind_name(event.kind)} {short(event_id)}"
    render = _RENDER.get(event.kind)
    return [head] if render is None else render(head, event)


def _claim_lines(head: str, claim: Cited) -> list[str]:
    mark = "[contested] " if claim.contested else ""
    lines = [f"{head}: {mark}{_text(claim.text) or '(no text)'}"]
    if claim.contested:
        against = [f"rebutted by link {short(d.id)}" for d in claim.rebuts]
        against += [f"in contradiction {short(d.id)}" for d in claim.contradictions]
        lines.append(f"contested: {', '.join(against)}")
    return lines


def _evidence_lines(head: str, evidence: Cited) -> list[str]:
    title = _text(evidence.title) or _text(evidence.url) or "untitled"
    source = _text(evidence.source)
    return [f"{head}: {_dq(title)}" + (f" (source: {source})" if source else "")]


def _link_lines(head: str, link: Cited) -> list[str]:
    relation = _text(link.relation, 20) or "?"
    mark = "[disputed] " if link.rebuts else ""
    lines = [f"{head}: {mark}{_ref_id(link.from_)} {relation} {_ref_id(link.to)}"]
    quote = _text(link.quote)
    if quote:
        where = ""
        if link.anchor is not None:
            start, end, occurrences = link.anchor
            where = f" at characters {start}-{end}"
            if occurrences > 1:
                where += f" (the first of {occurrences} occurrences)"
        lines.append(f"quote: {_dq(quote)}{where}")
    if link.rebuts:
        lines.append(
            f"disputed: {', '.join(f'rebutted by link {short(d.id)}' for d in link.rebuts)}"
        )
    return lines


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


def contested(
    event_ids: Iterable[EventId], events: Mapping[EventId, Cited]
) -> list[ContestedClaim]:
    """The contested claims among `event_ids` (in their order), at most `MAX_CONTESTED`."""
    found: list[ContestedClaim] = []
    for event_id in event_ids:
        event = events.get(event_id)
        if event is None or event.kind != KIND_CLAIM or not event.contested:
            continue
        if len(found) == MAX_CONTESTED:
            break
        found.append(
            {
                "claim": event_id,
                "rebuts": [{"id": d.id, "reason": d.reason} for d in event.rebuts],
                "contradictions": [{"id": d.id, "reason": d.reason} for d in event.contradictions],
            }
        )
    return found


def disputed_links(
    event_ids: Iterable[EventId], events: Mapping[EventId, Cited]
) -> list[DisputedLink]:
    """The disputed links among `event_ids` (in their order), at most `MAX_CONTESTED`."""
    found: list[DisputedLink] = []
    for event_id in event_ids:
        event = events.get(event_id)
        if event is None or event.kind != KIND_LINK or not event.rebuts:
            continue
        if len(found) == MAX_CONTESTED:
            break
        found.append(
            {"link": event_id, "rebuts": [{"id": d.id, "reason": d.reason} for d in event.rebuts]}
        )
    return found


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
