"""Signed events as the proof checker sees them: what the ledger's `Reads.cited` reads of each
from its typed tables (kind and short fields, texts cut to CITED_TEXT_CHARS)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tms.nostr.events import Event
from tms.rules.cited import CITED_TEXT_CHARS, Cited
from tms.types import KIND_CONTRADICTION


def _cut(value: Any) -> Any:
    return value[:CITED_TEXT_CHARS] if isinstance(value, str) else None


def cited(events: Iterable[Event]) -> dict[str, Cited]:
    found = {}
    for event in events:
        content = json.loads(event.content)
        claims = content.get("claims")
        found[event.id] = Cited(
            event.kind,
            text=_cut(content.get("text")) if event.kind != 4701 else None,
            title=_cut(content.get("title")),
            url=_cut(content.get("url")),
            source=_cut(content.get("source")),
            relation=_cut(content.get("relation")),
            from_=_cut(content.get("from")),
            to=_cut(content.get("to")),
            quote=_cut(content.get("quote")),
            reason=_cut(content.get("reason")),
            claims=len(claims) if event.kind == KIND_CONTRADICTION else None,
        )
    return found
