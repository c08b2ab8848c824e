"""The submit page's checks on the server: what it looks up before anything is signed, the
nearest passage for a quote that is not in the text, and the refusal of a claim that is an id.

- `parse_lookup` and `answer_lookup` serve POST /c/<slug>/lookup: is this evidence (by the
  sha256 of its exact text, or by URL) already in the collection, does each row's claim text
  already exist there (by `tms.rules.quotes.claim_key`), and which record does each pasted
  id name (`tms.rules.references`). The body is small and bounded: at most `LOOKUP_ROWS` rows,
  each a text of at most `LOOKUP_TEXT_CHARS` characters or the key of a longer one, which the
  page computes with the same normalization (quotes.js) and `crypto.subtle`.
- `Texts` serves POST /quotes/nearest: the passage of the evidence text that reads most like a
  quote that is not in it (`tms.rules.anchors.nearest`, the hint a bot's refused publish
  carries). The page names the text by its sha256; the server keeps the texts it was last
  given or fetched (`MAX_CACHED_CHARS` in all, each with its normalized form once a hint needed
  it: a few times that many bytes), by key and sha256, and asks for the text itself
  only when it does not have it, so a 2,000,000-character text is sent at most once while its
  quotes are edited. Normalizing and aligning run in threads, at most `HINT_THREADS` at once.
- `id_shaped_claim` is the publish door's guard: a claim whose whole text is shaped like an id
  (`138e8246…`, a `note1`) is refused, whoever's page sent it. MCP's publish is unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from tms.errors import shown
from tms.ledger import Found, Lookups, ReadableCollection
from tms.rules.anchors import NEAREST_QUOTE_CHARS, nearest
from tms.rules.publish import short
from tms.rules.quotes import PreparedText, claim_key
from tms.rules.references import NotAnId, Reference, looks_like_id, parse_reference
from tms.types import KIND_CLAIM, MAX_CONTENT_CHARS, Slug

LOOKUP_ROWS: Final = 20  # rows per look-up; the page asks in groups of this many
LOOKUP_TEXT_CHARS: Final = 2000  # a row's text sent as it is; a longer one is sent as its key
LOOKUP_URL_CHARS: Final = 4000  # a longer URL is not looked up
ID_SHAPED_CLAIM_CHARS: Final = 4000  # a claim's content longer than this is no id
HINT_QUOTE_CHARS: Final = 4 * NEAREST_QUOTE_CHARS  # of a quote, sent for a hint
MAX_CACHED_CHARS: Final = 4_000_000  # evidence texts kept for hints, in all (two at the most)
HINT_THREADS: Final = 2
PASSAGE_CHARS: Final = 10_000  # a passage longer than this is shown cut and not offered
_SHA256: Final = re.compile(r"[0-9a-f]{64}")


class BadLookup(ValueError):
    """A look-up or hint body that is not what the page sends; the message says what is."""


# --- the publish door's guard -------------------------------------------------------------------


def id_shaped_claim(events: list[Any]) -> str | None:
    """The refusal for the first claim whose whole text is shaped like an id, or None. Only
    short contents are read (an id-shaped claim is short), so this costs little whatever the
    batch holds; anything malformed is left for the ledger to refuse in its own words."""
    for position, event in enumerate(events):
        if not isinstance(event, dict) or event.get("kind") != KIND_CLAIM:
            continue
        content = event.get("content")
        if not isinstance(content, str) or len(content) > ID_SHAPED_CLAIM_CHARS:
            continue
        try:
            text = json.loads(content).get("text")
        except (ValueError, AttributeError):
            continue
        if isinstance(text, str) and looks_like_id(text):
            event_id = event.get("id")
            where = f"events[{position}]" + (
                f" ({short(event_id)})" if isinstance(event_id, str) else ""
            )
            return (
                f"{where}: the claim's text {json.dumps(shown(text.strip(), 80))} looks like an "
                "event id, not a statement, and a claim is stored forever; to link to an "
                "existing claim, link or contradiction, put its whole id in the link's `to` "
                "(on the submit page, paste it in the claim field and check what it names); "
                "write a new claim as a sentence"
            )
    return None


# --- POST /c/<slug>/lookup ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lookup:
    text_sha256: bytes | None = None
    url: str | None = None
    rows: list[tuple[str, str | bytes]] = field(default_factory=list)  # ("text", t) / ("key", k)


def parse_lookup(body: Any) -> Lookup:
    """The look-up the page asked for: `{"evidence": {"sha256"?, "url"?}?, "rows": [{"text"} |
    {"key"}]?}`."""
    if not isinstance(body, dict) or not set(body) <= {"evidence", "rows"}:
        raise BadLookup('send {"evidence": {"sha256": ..., "url": ...}, "rows": [...]}')
    evidence = body.get("evidence") or {}
    if not isinstance(evidence, dict) or not set(evidence) <= {"sha256", "url"}:
        raise BadLookup('"evidence" is {"sha256": "<64 hex>", "url": "..."}, both optional')
    sha256 = evidence.get("sha256")
    if sha256 is not None and not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
        raise BadLookup('"evidence.sha256" is 64 lowercase hex digits')
    url = evidence.get("url")
    if url is not None and not isinstance(url, str):
        raise BadLookup('"evidence.url" is a string')
    url = url.strip() if url and len(url) <= LOOKUP_URL_CHARS else None
    rows = body.get("rows") or []
    if not isinstance(rows, list) or len(rows) > LOOKUP_ROWS:
        raise BadLookup(f'"rows" is a list of at most {LOOKUP_ROWS} rows')
    parsed: list[tuple[str, str | bytes]] = []
    for i, row in enumerate(rows):
        text, key = (row.get("text"), row.get("key")) if isinstance(row, dict) else (None, None)
        if isinstance(row, dict) and set(row) == {"text"} and isinstance(text, str):
            if len(text) > LOOKUP_TEXT_CHARS:
                raise BadLookup(
                    f"rows[{i}].text is longer than {LOOKUP_TEXT_CHARS} characters: send its key"
                )
            parsed.append(("text", text))
        elif isinstance(row, dict) and set(row) == {"key"} and isinstance(key, str):
            if not _SHA256.fullmatch(key):
                raise BadLookup(f"rows[{i}].key is 64 lowercase hex digits")
            parsed.append(("key", bytes.fromhex(key)))
        else:
            raise BadLookup(f'rows[{i}] is {{"text": "..."}} or {{"key": "<64 hex>"}}')
    return Lookup(bytes.fromhex(sha256) if sha256 else None, url or None, parsed)


async def answer_lookup(
    lookups: Lookups, readable: ReadableCollection, asked: Lookup
) -> dict[str, Any]:
    """What the page shows: the evidence already stored, and for each row either the claims
    with the same text (`"as": "text"`) or what its id names (`"as": "id"`: a `target`, or an
    `error` saying why it names nothing a row may link to)."""
    evidence: list[Any] = []
    if asked.text_sha256 is not None or asked.url:
        evidence = list(await lookups.evidence(readable, asked.text_sha256, asked.url))
    answers: list[dict[str, Any]] = [{} for _ in asked.rows]
    keys: dict[int, bytes] = {}
    refs: dict[int, Reference] = {}
    for i, (how, value) in enumerate(asked.rows):
        if isinstance(value, bytes):
            keys[i] = value
            continue
        assert how == "text"
        try:
            ref = parse_reference(value)
        except NotAnId as exc:
            answers[i] = {"as": "id", "error": str(exc)}
            continue
        if ref is None:
            keys[i] = claim_key(value)
        else:
            refs[i] = ref
    same = await lookups.claims(readable, list(keys.values()))
    for i, key in keys.items():
        answers[i] = {"as": "text", "same": same.get(key, [])}
    named = await lookups.targets(readable, list(refs.values()))
    for (i, ref), found in zip(refs.items(), named, strict=True):
        answers[i] = _target(readable.slug, ref, found)
    return {"evidence": evidence, "rows": answers}


def _target(slug: Slug, ref: Reference, found: list[Found]) -> dict[str, Any]:
    written = ref.shown()
    if not found:
        what = "has the id" if ref.whole else "has an id like"
        return {
            "as": "id",
            "error": f"no claim, link or contradiction of {slug} {what} {written}: copy the "
            "whole id from the record's page, or write the claim as a sentence",
        }
    if len(found) > 1:
        return {
            "as": "id",
            "error": f"{written} is the beginning of more than one record's id in {slug}: "
            "paste more of it, or all of it",
        }
    record = found[0]
    if record["kind"] == "evidence":
        return {
            "as": "id",
            "error": f"{written} is an evidence document of {slug}; a row links this evidence "
            "to a claim, a link or a contradiction",
        }
    return {"as": "id", "target": record}


# --- POST /quotes/nearest -----------------------------------------------------------------------


@dataclass(slots=True)
class _Text:
    text: str
    prepared: PreparedText | None = None


class Texts:
    """Evidence texts a key was last given or fetched, by sha256, for nearest passages."""

    def __init__(self, max_chars: int = MAX_CACHED_CHARS) -> None:
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[str, str], _Text] = OrderedDict()
        self._chars = 0
        self._threads = asyncio.Semaphore(HINT_THREADS)

    async def remember(self, pubkey: str, text: str) -> str:
        """Keep `text` for `pubkey` (a fetched page, which the page will quote from); returns
        its sha256."""
        async with self._threads:
            sha256 = await asyncio.to_thread(text_sha256, text)
        self._keep((pubkey, sha256), _Text(text))
        return sha256

    def has(self, pubkey: str, sha256: str) -> bool:
        return (pubkey, sha256) in self._texts

    async def nearest(
        self, pubkey: str, sha256: str, quote: str, text: str | None
    ) -> dict[str, Any]:
        """`{"need_text": true}` when the text is neither given nor kept; else the passage
        nearest `quote` (`{"nearest": null}` when nothing resembles it)."""
        key = (pubkey, sha256)
        async with self._threads:
            kept = self._texts.get(key)
            if kept is not None:
                self._texts.move_to_end(key)
            elif text is None:
                return {"need_text": True}
            else:
                if await asyncio.to_thread(text_sha256, text) != sha256:
                    raise BadLookup('"sha256" is not the sha256 of "text" (UTF-8)')
                kept = _Text(text)
                self._keep(key, kept)
            return {"nearest": await asyncio.to_thread(_nearest, kept, quote)}

    def _keep(self, key: tuple[str, str], kept: _Text) -> None:
        old = self._texts.pop(key, None)
        if old is not None:
            self._chars -= len(old.text)
        if len(kept.text) > self.max_chars:
            return
        self._texts[key] = kept
        self._chars += len(kept.text)
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= len(dropped.text)


def text_sha256(text: str) -> str:
    """What the page computes with crypto.subtle: sha256 of the text's UTF-8."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _nearest(kept: _Text, quote: str) -> dict[str, Any] | None:
    if kept.prepared is None:
        kept.prepared = PreparedText(kept.text)
    found = nearest(kept.prepared, quote)
    if found is None:
        return None
    passage = kept.text[found.start : found.end]
    return {
        "start": found.start,
        "end": found.end,
        "passage": passage[:PASSAGE_CHARS],
        "cut": len(passage) > PASSAGE_CHARS,
        "similarity": found.similarity,
    }


def parse_hint(body: Any) -> tuple[str, str, str | None]:
    """`{"sha256", "quote", "text"?}` from the page: the text's hash, the quote, the text."""
    if not isinstance(body, dict) or not {"sha256", "quote"} <= set(body) <= {
        "sha256",
        "quote",
        "text",
    }:
        raise BadLookup('send {"sha256": "<64 hex>", "quote": "...", "text": "..." (optional)}')
    sha256, quote, text = body["sha256"], body["quote"], body.get("text")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise BadLookup('"sha256" is 64 lowercase hex digits')
    if not isinstance(quote, str) or len(quote) > HINT_QUOTE_CHARS:
        raise BadLookup(f'"quote" is a string of at most {HINT_QUOTE_CHARS} characters')
    if text is not None and (not isinstance(text, str) or len(text) > MAX_CONTENT_CHARS):
        raise BadLookup(f'"text" is a string of at most {MAX_CONTENT_CHARS:,} characters')
    return sha256, quote, text
