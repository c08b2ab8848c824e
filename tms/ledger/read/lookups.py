"""What the submit page asks before anything is signed: is this evidence already in the
collection, does this claim already exist, and which record does a pasted id name.

In an append-only ledger a duplicate or a junk claim stays forever, so the page asks first:

- evidence by the sha256 of its exact text (UTF-8; the page hashes it with `crypto.subtle`, so
  a 2,000,000-character text never travels for this) or by its URL, through the indexes of
  sql/013;
- claims by their key: sha256 of the text as quote matching normalizes it
  (`tms.rules.quotes.claim_key`), the rule people know from quotes ("case, whitespace, curly
  quotes, dashes... are forgiven"). The keys live in `claim_keys` (sql/013), written by the
  publish that stores each claim and, for claims stored before, at start-up
  (`tms.ledger.write.claim_keys`);
- references (`tms.rules.references`): a whole id, or the beginning of one, among the claims,
  links and contradictions of the collection, which a link may target.

Every answer is limited to one collection that the caller may read (the door checks that), and
cut to a few rows of a few hundred characters each.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, TypedDict

from tms.ledger.access import ReadableCollection
from tms.rules.references import MIN_LOOKUP_HEX, Reference
from tms.store.database import Pool
from tms.types import EventId

log = logging.getLogger(__name__)

SHOWN_CHARS: Final = 300  # of a title, claim, quote or reason in an answer
SAME_SHOWN: Final = 3  # stored records shown per duplicate found


class Found(TypedDict):
    """A stored record, as the submit page shows it."""

    id: EventId
    kind: str  # "claim", "link", "contradiction", "evidence"
    text: str  # a claim's text, a link's quote, a contradiction's reason, an evidence's title
    relation: str | None  # a link's


class SameEvidence(TypedDict):
    id: EventId
    title: str | None
    url: str | None
    chars: int
    same_text: bool
    same_url: bool


# --- the look-ups ------------------------------------------------------------------------------

_SQL_EVIDENCE_BY_TEXT: Final = f"""
    SELECT id, left(title, {SHOWN_CHARS}) AS title, left(url, {SHOWN_CHARS}) AS url, chars,
           true AS same_text, url = $3 AS same_url
    FROM evidence WHERE collection = $1 AND tms_text_sha256(text) = $2
    ORDER BY seq LIMIT {SAME_SHOWN}"""
_SQL_EVIDENCE_BY_URL: Final = f"""
    SELECT id, left(title, {SHOWN_CHARS}) AS title, left(url, {SHOWN_CHARS}) AS url, chars,
           false AS same_text, true AS same_url
    FROM evidence WHERE collection = $1 AND md5(url) = md5($2) AND url = $2
    ORDER BY seq LIMIT {SAME_SHOWN}"""
_SQL_CLAIMS_BY_KEY: Final = f"""
    SELECT u.key, s.id, s.text FROM unnest($2::bytea[]) AS u(key)
    CROSS JOIN LATERAL (
        SELECT c.id, left(c.text, {SHOWN_CHARS}) AS text FROM claim_keys k
        JOIN claims c ON c.id = k.claim_id AND c.collection = k.collection
        WHERE k.collection = $1 AND k.key = u.key
        ORDER BY c.seq LIMIT {SAME_SHOWN}) AS s"""
# The records a link may target, and evidence (to say that it is evidence), by id: $2 and $3
# bound the ids (a whole id: itself and itself; the beginning of one: from it to it followed by
# "g", past every hex digit), $4 is how the id ends ('' for any). The ids are "C"-collated, so
# each table reads one range of its primary key, whatever the plan's parameters.
_SQL_TARGETS: Final = " UNION ALL ".join(
    f"""(SELECT id, '{kind}' AS kind, left({text}, {SHOWN_CHARS}) AS text, {relation} AS relation
        FROM {table}
        WHERE id >= $2::text AND id <= $3::text AND collection = $1
          AND right(id, length($4::text)) = $4::text
        ORDER BY id LIMIT 2)"""
    for table, kind, text, relation in (
        ("claims", "claim", "text", "NULL::text"),
        ("links", "link", "quote", "relation"),
        ("contradictions", "contradiction", "reason", "NULL::text"),
        ("evidence", "evidence", "coalesce(title, url, '')", "NULL::text"),
    )
)


class Lookups:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def evidence(
        self, readable: ReadableCollection, text_sha256: bytes | None, url: str | None
    ) -> list[SameEvidence]:
        """Evidence of the collection whose text has this sha256, or whose URL is this one:
        each once, the same text first."""
        slug = readable.slug
        found: dict[str, SameEvidence] = {}
        if text_sha256 is not None:
            for r in await self.pool.fetch(_SQL_EVIDENCE_BY_TEXT, slug, text_sha256, url):
                found[r["id"]] = _same(r)
        if url:
            for r in await self.pool.fetch(_SQL_EVIDENCE_BY_URL, slug, url):
                if r["id"] in found:
                    found[r["id"]]["same_url"] = True
                else:
                    found[r["id"]] = _same(r)
        return list(found.values())

    async def claims(
        self, readable: ReadableCollection, keys: Sequence[bytes]
    ) -> dict[bytes, list[Found]]:
        """The collection's claims with each key (`claim_key`), oldest first, a few per key."""
        slug = readable.slug
        if not keys:
            return {}
        same: dict[bytes, list[Found]] = {}
        for r in await self.pool.fetch(_SQL_CLAIMS_BY_KEY, slug, list(dict.fromkeys(keys))):
            same.setdefault(bytes(r["key"]), []).append(
                {"id": r["id"], "kind": "claim", "text": r["text"], "relation": None}
            )
        return same

    async def targets(
        self, readable: ReadableCollection, refs: Sequence[Reference]
    ) -> list[list[Found]]:
        """For each reference, the collection's records it may name: none, one, or (for the
        beginning of an id) several, of which at most two per kind are returned, enough to say
        that it is ambiguous."""
        slug = readable.slug
        found: list[list[Found]] = []
        for ref in refs:
            if len(ref.head) < MIN_LOOKUP_HEX:  # never read a range of a whole table
                found.append([])
                continue
            high = ref.head if ref.whole else f"{ref.head}g"
            rows = await self.pool.fetch(_SQL_TARGETS, slug, ref.head, high, ref.tail)
            found.append([_found(r) for r in rows])
        return found


def _found(r: Any) -> Found:
    return {"id": r["id"], "kind": r["kind"], "text": r["text"], "relation": r["relation"]}


def _same(r: Any) -> SameEvidence:
    return {
        "id": r["id"],
        "title": r["title"],
        "url": r["url"],
        "chars": int(r["chars"]),
        "same_text": bool(r["same_text"]),
        "same_url": bool(r["same_url"]),
    }
