"""Signed events as the proof checker sees them: what the ledger's `Reads.cited` reads of each
from its typed tables (kind and short fields, texts cut to CITED_TEXT_CHARS), each link's anchor
and each claim's and link's disputes, computed here from the signed events themselves."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tms.nostr.events import Event
from tms.rules.anchors import anchor
from tms.rules.cited import CITED_TEXT_CHARS, DISPUTE_REASON_CHARS, MAX_DISPUTES, Cited, Dispute
from tms.rules.quotes import PreparedText
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, KIND_EVIDENCE, KIND_LINK


def _cut(value: Any) -> Any:
    return value[:CITED_TEXT_CHARS] if isinstance(value, str) else None


def _reason(value: str) -> str:
    return value if len(value) <= DISPUTE_REASON_CHARS else value[: DISPUTE_REASON_CHARS - 1] + "…"


def _content(event: Event) -> dict[str, Any]:
    try:
        content = json.loads(event.content)
    except ValueError:
        return {}
    return content if isinstance(content, dict) else {}


def cited(events: Iterable[Event], collection: Iterable[Event] = ()) -> dict[str, Cited]:
    """The cited `events` as `Reads.cited` returns them. `collection` holds every event of their
    collection, in ledger order: the evidence links are anchored in, and the REBUTS links and
    contradictions that dispute claims and links (none when it is empty)."""
    everything = list(collection)
    texts = {e.id: _content(e).get("text") for e in everything if e.kind == KIND_EVIDENCE}
    rebuts: dict[str, list[Dispute]] = {}
    contradicted: dict[str, list[Dispute]] = {}
    for event in everything:
        content = _content(event)
        if event.kind == KIND_LINK and content.get("relation") == "REBUTS":
            rebuts.setdefault(content["to"], []).append(
                Dispute(event.id, _reason(content["reason"]))
            )
        elif event.kind == KIND_CONTRADICTION:
            for claim in dict.fromkeys(content.get("claims", [])):
                found = Dispute(event.id, _reason(content["reason"]))
                contradicted.setdefault(claim, []).append(found)
    result = {}
    for event in events:
        content = _content(event)
        claims = content.get("claims")
        where = None
        text = texts.get(content.get("from", ""))
        if event.kind == KIND_LINK and isinstance(text, str):
            found_at = anchor(PreparedText(text), content["quote"])
            if found_at is not None:
                where = (found_at.start, found_at.end, found_at.occurrences)
        is_claim = event.kind == KIND_CLAIM
        disputable = is_claim or event.kind == KIND_LINK  # a REBUTS link disputes either
        result[event.id] = Cited(
            event.kind,
            text=_cut(content.get("text")) if event.kind != KIND_EVIDENCE else None,
            title=_cut(content.get("title")),
            url=_cut(content.get("url")),
            source=_cut(content.get("source")),
            relation=_cut(content.get("relation")),
            from_=_cut(content.get("from")),
            to=_cut(content.get("to")),
            quote=_cut(content.get("quote")),
            anchor=where,
            reason=_cut(content.get("reason")),
            claims=len(claims) if event.kind == KIND_CONTRADICTION else None,
            rebuts=tuple(rebuts.get(event.id, [])[:MAX_DISPUTES]) if disputable else (),
            contradictions=tuple(contradicted.get(event.id, [])[:MAX_DISPUTES]) if is_claim else (),
        )
    return result
