"""A collection's links as W3C Web Annotations (the Web Annotation Data Model, 2017): pure, so
that the HTTP export (`GET /c/<slug>/annotations.jsonld`) and `tms export --format annotations`
write the same document from the same rows.

Each link (kind 4703: a quote from an evidence that SUPPORTS, REBUTS or QUALIFIES a claim, a link
or a contradiction) is one `Annotation`:

- `id`: the link's event id as a NIP-21 URI, `nostr:note1...` (NIP-19's `note` of the id): it
  names the signed event itself, the same on every server and in every mirror, and any Nostr
  library turns it back into the hex id. A server's URL would name one copy, readable only by
  its members, and change with `TMS_BASE_URL`.
- `creator`: the signer as `nostr:npub1...`; `created`: the event's own `created_at` (what its
  signer signed), in ISO 8601, UTC.
- `motivation`: W3C has no motivation saying "this passage supports or rebuts that", so each
  relation takes the nearest of the model's: SUPPORTS `assessing` (the passage is judged to
  bear the claim out), REBUTS `questioning` (it calls the claim into question), QUALIFIES
  `commenting` (a remark that limits the claim). The relation itself stays exact in the signed
  event the annotation carries.
- `body`: what the link points at, as `nostr:note1...`; a claim is a `TextualBody` with its
  text, anything else (a link, a contradiction, an evidence) that id alone. Then the link's
  reason, a `TextualBody` whose purpose is `commenting`.
- `target`: a `SpecificResource` whose `source` is the evidence's URL when it has an absolute
  http(s) one (what annotation tools open and anchor on), else the evidence as
  `nostr:note1...`; its selectors are the link's anchor (`tms.rules.anchors`): a
  `TextQuoteSelector` (`exact`, `prefix`, `suffix`) and a `TextPositionSelector` (`start`,
  `end`, in code points of the evidence text as signed). A link without an anchor yet (stored
  before anchors, not yet back-filled) has only a `TextQuoteSelector` of its quote.
- `nostrEvent`: the link's signed event, every field as signed, a JSON literal (`@json`), so the
  annotation is traced to its event and verified by any Nostr library. Its IRI is NIP-01's
  definition of an event; it is the one term this document adds to the W3C context. A JSON
  literal is JSON-LD 1.1, which the added context declares (`@version`): the NIP-01 `tags`, an
  array of arrays, has no JSON-LD 1.0 form that keeps it as signed.

The annotations are the items of one `AnnotationPage` embedded as the `first` (and `last`) page
of an `AnnotationCollection`, in ledger order, with the collection's `total` at the end, so the
document streams without counting first. An empty collection has no page.

The W3C context (http://www.w3.org/ns/anno.jsonld) ships beside this module (`anno.jsonld`), so
a JSON-LD processor expands the document offline (`context_document`). Its text is the W3C's
published context as the w3c/web-annotation repository holds it (admin/ns/anno.jsonld, November
2016), plus the line `"assessing": "oa:assessing"` the W3C added to the published file in 2021
(w3c/web-annotation#444); whitespace may differ from the bytes served at w3.org, the terms do
not.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files
from typing import Any, Final

from tms.nostr import nip19
from tms.nostr.events import Event

ANNO_CONTEXT: Final = "http://www.w3.org/ns/anno.jsonld"
# The Web Annotation Protocol's media type for a JSON-LD annotation document.
MEDIA_TYPE: Final = f'application/ld+json; profile="{ANNO_CONTEXT}"'
# The term each annotation's signed event goes under, and the IRI it expands to.
NOSTR_EVENT: Final = "nostrEvent"
NOSTR_EVENT_IRI: Final = (
    "https://github.com/nostr-protocol/nips/blob/master/01.md#events-and-signatures"
)
CONTEXT: Final = [
    ANNO_CONTEXT,
    {"@version": 1.1, NOSTR_EVENT: {"@id": NOSTR_EVENT_IRI, "@type": "@json"}},
]
MOTIVATIONS: Final = {"SUPPORTS": "assessing", "REBUTS": "questioning", "QUALIFIES": "commenting"}
REASON_PURPOSE: Final = "commenting"
TEXT_FORMAT: Final = "text/plain"
# An evidence URL that is an absolute http(s) IRI: no spaces, controls, nor the characters an
# IRI may not hold (RFC 3987); any other URL leaves the target's source the evidence's id.
_WEB_IRI: Final = re.compile(r"https?://[^\s<>\"{}|\\^`\x00-\x1f\x7f]+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Selectors:
    """A link's anchor as W3C's selectors say it (`tms.rules.anchors.Anchor`, as stored)."""

    start: int
    end: int
    exact: str
    prefix: str
    suffix: str


@dataclass(frozen=True, slots=True)
class AnnotatedLink:
    """One link as the ledger holds it, with what its annotation names besides: the text of
    the claim it points at (None: it points at another kind), its evidence's URL and its anchor
    (None: not anchored yet)."""

    event: Event
    claim_text: str | None
    evidence_url: str | None
    anchor: Selectors | None


def nostr_uri(event_id: str) -> str:
    """An event id as a NIP-21 URI."""
    return f"nostr:{nip19.note_encode(event_id)}"


# The claims and evidence links point at, and their signers, recur from link to link: each is
# encoded once per process while it recurs (bech32 in Python costs tens of microseconds).
_recurring_uri: Final = lru_cache(maxsize=4096)(nostr_uri)


@lru_cache(maxsize=4096)
def _creator(pubkey: str) -> str:
    return f"nostr:{nip19.npub_encode(pubkey)}"


def created(created_at: int) -> str:
    """A Nostr `created_at` as the model's `created` (xsd:dateTime, UTC, in seconds). Any
    `created_at` an event may carry (0 to 2^53 - 1) is written, past Python's year 9999 too
    (xsd:dateTime takes years of more than four digits): the civil date is computed from the
    day count (the proleptic Gregorian calendar, H. Hinnant's `civil_from_days`)."""
    days, seconds = divmod(created_at, 86_400)
    era, day_of_era = divmod(days + 719_468, 146_097)
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (month <= 2)
    hours, rest = divmod(seconds, 3600)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def source_of(evidence_id: str, url: str | None) -> str:
    """The target's source: the evidence's URL when it is an absolute http(s) IRI, else the
    evidence event as a NIP-21 URI."""
    if url is not None and _WEB_IRI.fullmatch(url):
        return url
    return _recurring_uri(evidence_id)


def annotation(link: AnnotatedLink) -> dict[str, Any]:
    """The link as a W3C `Annotation` (without `@context`: it is an item of a collection,
    whose context it shares)."""
    event = link.event
    content = json.loads(event.content)
    target_id = content["to"]
    claim: dict[str, Any] = {"id": _recurring_uri(target_id)}
    if link.claim_text is not None:
        claim.update(type="TextualBody", value=link.claim_text, format=TEXT_FORMAT)
    reason = {
        "type": "TextualBody",
        "value": content["reason"],
        "format": TEXT_FORMAT,
        "purpose": REASON_PURPOSE,
    }
    return {
        "id": nostr_uri(event.id),
        "type": "Annotation",
        "motivation": MOTIVATIONS[content["relation"]],
        "creator": _creator(event.pubkey),
        "created": created(event.created_at),
        "body": [claim, reason],
        "target": {
            "type": "SpecificResource",
            "source": source_of(content["from"], link.evidence_url),
            "selector": selectors(link.anchor, content["quote"]),
        },
        NOSTR_EVENT: event.to_dict(),
    }


def selectors(anchor: Selectors | None, quote: str) -> list[dict[str, Any]]:
    """The target's selectors: quote and position from the anchor; the quote alone without."""
    if anchor is None:
        return [{"type": "TextQuoteSelector", "exact": quote}]
    by_quote: dict[str, Any] = {"type": "TextQuoteSelector", "exact": anchor.exact}
    if anchor.prefix:
        by_quote["prefix"] = anchor.prefix
    if anchor.suffix:
        by_quote["suffix"] = anchor.suffix
    by_place = {"type": "TextPositionSelector", "start": anchor.start, "end": anchor.end}
    return [by_quote, by_place]


@dataclass(frozen=True, slots=True)
class Collection:
    """An `AnnotationCollection` written piece by piece: `head`, each item (`item`, joined by
    `SEPARATOR`), then `tail`; or `empty` when there is no annotation."""

    id: str  # the collection's IRI: the URL it is served at
    label: str

    SEPARATOR = ",\n"

    @property
    def page_id(self) -> str:
        """The one page's IRI: the collection's, with a fragment (it is embedded, never
        fetched on its own)."""
        return f"{self.id}#page-1"

    def _start(self) -> str:
        top = {"@context": CONTEXT, "id": self.id, "type": "AnnotationCollection"}
        return _dumps({**top, "label": self.label})[:-1]

    def head(self) -> str:
        """Everything before the first item."""
        page = {"id": self.page_id, "type": "AnnotationPage", "partOf": self.id, "startIndex": 0}
        return f'{self._start()},\n"first":{_dumps(page)[:-1]},"items":[\n'

    @staticmethod
    def item(link: AnnotatedLink) -> str:
        return _dumps(annotation(link))

    def tail(self, total: int) -> str:
        """Everything after the last item, `total` the number of items written."""
        return f'\n]}},\n"last":{_dumps(self.page_id)},\n"total":{total}}}\n'

    def empty(self) -> str:
        """The whole document of a collection without links."""
        return f'{self._start()},"total":0}}\n'

    def whole(self, links: list[AnnotatedLink]) -> dict[str, Any]:
        """The whole document as one value (what `head`, the items and `tail` write)."""
        if not links:
            parsed: dict[str, Any] = json.loads(self.empty())
            return parsed
        items = self.SEPARATOR.join(self.item(link) for link in links)
        parsed = json.loads(self.head() + items + self.tail(len(links)))
        return parsed


PATH_TAIL: Final = "annotations.jsonld"  # the collection's URL: <origin>/c/<slug>/ then this


def collection_of(origin: str, slug: str) -> Collection:
    """A collection's document, its IRI the URL it is served at on `origin` (the server's public
    origin: `TMS_BASE_URL`, else the address it listens on), so that one snapshot gives the same
    bytes over HTTP and from `tms export --format annotations`."""
    return Collection(f"{origin}/c/{slug}/{PATH_TAIL}", f"The links of collection {slug}")


async def pieces(collection: Collection, links: AsyncIterator[AnnotatedLink]) -> AsyncIterator[str]:
    """The document in pieces as the links come: the head, each annotation, the tail (or the
    whole empty collection). The caller closes `links`."""
    total = 0
    async for link in links:
        yield collection.head() if total == 0 else Collection.SEPARATOR
        yield collection.item(link)
        total += 1
    yield collection.tail(total) if total else collection.empty()


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@cache
def context_document() -> Mapping[str, Any]:
    """The W3C annotation context as shipped (`anno.jsonld` beside this module): what a JSON-LD
    processor's document loader hands back for `ANNO_CONTEXT`, offline."""
    parsed: dict[str, Any] = json.loads(
        files("tms.rules").joinpath("anno.jsonld").read_text("utf-8")
    )
    return parsed
