"""Links as W3C Web Annotations (`tms.rules.annotations`): the document expands offline with
the W3C context shipped in the package (pyld, whose document loader here serves that file and
nothing else), has what the Web Annotation Data Model requires, places quotes with emoji and
combining marks at their code points, and carries each link's signed event, which verifies."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from factories import MEMBER, OWNER, sign
from offline_jsonld import AS, DCTERMS, OA, RDF_VALUE, XSD, expand

from tms.nostr import nip19
from tms.nostr.events import MAX_CREATED_AT, Event
from tms.rules.anchors import anchor
from tms.rules.annotations import (
    ANNO_CONTEXT,
    MOTIVATIONS,
    NOSTR_EVENT_IRI,
    AnnotatedLink,
    Collection,
    Selectors,
    collection_of,
    context_document,
    created,
    pieces,
)
from tms.rules.quotes import PreparedText

ORIGIN = "https://tms.example"

# A composed é (e + U+0301), emoji outside the BMP (two UTF-16 units, four UTF-8 bytes, one code
# point each) and a flag of two regional indicators, all before the quote and inside it.
TEXT = (
    "Cafe\u0301 \U0001f9ea trial \U0001f1ea\U0001f1fa: serum DAO activity fell by 30 % "
    "in patients with histamine intolerance (\u2764\ufe0f n\u0303=12), after which symptoms "
    "eased."
)
QUOTE = "DAO activity fell by 30 % in patients with histamine intolerance (\u2764\ufe0f n\u0303=12)"


def linked(
    relation: str = "SUPPORTS",
    *,
    claim_text: str | None = "DAO deficiency causes histamine intolerance.",
    url: str | None = "https://example.org/hit",
    anchored: bool = True,
) -> AnnotatedLink:
    doc = sign(MEMBER, 4701, {"collection": "lab", "text": TEXT})
    said = sign(MEMBER, 4702, {"collection": "lab", "text": "DAO deficiency causes it."})
    content = {"collection": "lab", "from": doc.id, "to": said.id, "relation": relation,
               "quote": QUOTE, "reason": "Lower DAO came with the intolerance."}  # fmt: skip
    event = sign(OWNER, 4703, content, created_at=1_792_454_400)
    found = anchor(PreparedText(TEXT), QUOTE)
    assert found is not None
    selectors = Selectors(found.start, found.end, found.exact, found.prefix, found.suffix)
    return AnnotatedLink(event, claim_text, url, selectors if anchored else None)


def whole(*links: AnnotatedLink) -> dict[str, Any]:
    return collection_of(ORIGIN, "lab").whole(list(links))


def test_the_shipped_context_is_the_w3cs() -> None:
    """The file is the W3C's published context (its terms pinned by hash), `assessing` included
    (added to the published file in 2021), and the wheel ships it as package data."""
    terms = context_document()["@context"]
    assert terms["oa"] == OA
    motivations = {"assessing", "bookmarking", "classifying", "commenting", "describing",
                   "editing", "highlighting", "identifying", "linking", "moderating",
                   "questioning", "replying", "tagging"}  # fmt: skip
    assert {term for term, iri in terms.items() if iri == f"oa:{term}"} >= motivations
    assert set(MOTIVATIONS.values()) <= motivations
    canonical = json.dumps(terms, sort_keys=True, separators=(",", ":")).encode()
    assert hashlib.sha256(canonical).hexdigest() == (
        "8c0fb4c431ad2f613e69ec2c86d63485d7ead3a47e870a39183785246bf80081"
    )


def test_an_annotation_expands_offline_to_the_w3c_model() -> None:
    link = linked()
    [collection] = expand(whole(link))
    assert collection["@id"] == f"{ORIGIN}/c/lab/annotations.jsonld"
    assert collection["@type"] == [f"{AS}OrderedCollection"]
    assert collection[f"{AS}totalItems"] == [{"@value": 1, "@type": f"{XSD}nonNegativeInteger"}]
    [page] = collection[f"{AS}first"]
    assert page["@type"] == [f"{AS}OrderedCollectionPage"]
    [items] = page[f"{AS}items"]
    [annotation] = items["@list"]
    assert annotation["@id"] == f"nostr:{nip19.note_encode(link.event.id)}"
    assert annotation["@type"] == [f"{OA}Annotation"]
    assert annotation[f"{OA}motivatedBy"] == [{"@id": f"{OA}assessing"}]
    assert annotation[f"{DCTERMS}creator"] == [{"@id": f"nostr:{nip19.npub_encode(OWNER.pubkey)}"}]
    assert annotation[f"{DCTERMS}created"] == [
        {"@value": "2026-10-20T00:00:00Z", "@type": f"{XSD}dateTime"}
    ]
    claim, reason = sorted(annotation[f"{OA}hasBody"], key=lambda body: "@id" not in body)
    assert claim["@type"] == [f"{OA}TextualBody"]
    assert claim[RDF_VALUE] == [{"@value": "DAO deficiency causes histamine intolerance."}]
    assert reason[f"{OA}hasPurpose"] == [{"@id": f"{OA}commenting"}]
    assert reason[RDF_VALUE] == [{"@value": "Lower DAO came with the intolerance."}]
    [target] = annotation[f"{OA}hasTarget"]
    assert target["@type"] == [f"{OA}SpecificResource"]
    assert target[f"{OA}hasSource"] == [{"@id": "https://example.org/hit"}]
    by_type = {s["@type"][0]: s for s in target[f"{OA}hasSelector"]}
    quote = by_type[f"{OA}TextQuoteSelector"]
    assert quote[f"{OA}exact"] == [{"@value": QUOTE}]
    assert quote[f"{OA}prefix"][0]["@value"].endswith("serum ")
    assert quote[f"{OA}suffix"][0]["@value"].startswith(", after which")
    place = by_type[f"{OA}TextPositionSelector"]
    start = int(place[f"{OA}start"][0]["@value"])
    end = int(place[f"{OA}end"][0]["@value"])
    assert TEXT[start:end] == QUOTE
    # The signed event survives expansion as a JSON literal, and verifies as it is.
    [signed] = annotation[NOSTR_EVENT_IRI]
    assert signed["@type"] == "@json"
    assert signed["@value"] == link.event.to_dict()
    Event.from_dict(signed["@value"]).verify()


def test_positions_count_code_points() -> None:
    """Not UTF-16 units (JavaScript's string indices) nor UTF-8 bytes: the emoji, the flag's
    two regional indicators and the combining marks before the quote count one each."""
    annotation = whole(linked())["first"]["items"][0]
    quote, place = annotation["target"]["selector"]
    before = "Cafe\u0301 \U0001f9ea trial \U0001f1ea\U0001f1fa: serum "
    assert place == {"type": "TextPositionSelector", "start": len(before),
                     "end": len(before) + len(QUOTE)}  # fmt: skip
    assert len(before) == 24  # code points; JavaScript's UTF-16 indices would say 27
    assert len(before.encode("utf-16-le")) // 2 == 27
    assert quote == {"type": "TextQuoteSelector", "exact": QUOTE, "prefix": before,
                     "suffix": ", after which symptoms eased."}  # fmt: skip


def test_what_the_model_requires_is_there() -> None:
    """The Web Annotation Data Model's MUSTs (sections 3.1, 3.2, 4.2, 5.1, 5.2), on every
    relation, target and anchor this export writes."""
    links = [linked(relation) for relation in MOTIVATIONS] + [
        linked(claim_text=None, url="not a url", anchored=False)
    ]
    document = whole(*links)
    assert ANNO_CONTEXT in document["@context"]
    assert document["type"] == "AnnotationCollection"
    assert document["id"].startswith("https://")
    assert document["total"] == len(links)
    page = document["first"]
    assert document["last"] == page["id"] and page["id"].startswith(document["id"] + "#")
    assert (page["type"], page["partOf"], page["startIndex"]) == ("AnnotationPage",
                                                                  document["id"], 0)  # fmt: skip
    for annotation in page["items"]:
        assert annotation["id"].startswith("nostr:note1")  # an IRI, one per annotation
        assert annotation["type"] == "Annotation"
        assert annotation["target"]  # 3.1: at least one target
        assert "bodyValue" not in annotation  # 3.2.5: never with body
        for body in annotation["body"]:
            assert "id" in body or body["type"] == "TextualBody"  # 3.2.1 / 3.2.4
            if body.get("type") == "TextualBody":
                assert isinstance(body["value"], str)
        target = annotation["target"]
        assert target["type"] == "SpecificResource" and target["source"]  # 4: one source
        for selector in target["selector"]:
            if selector["type"] == "TextQuoteSelector":
                assert isinstance(selector["exact"], str) and selector["exact"]  # 4.2.4
            else:
                assert selector["type"] == "TextPositionSelector"  # 4.2.5
                assert 0 <= selector["start"] <= selector["end"]
    assert [a["motivation"] for a in page["items"]] == [
        "assessing", "questioning", "commenting", "assessing",
    ]  # fmt: skip
    assert expand(document)  # and it all expands


def test_a_target_without_a_web_url_or_an_anchor_says_what_it_knows() -> None:
    link = linked(claim_text=None, url="ftp://example.org/x", anchored=False)
    annotation = whole(link)["first"]["items"][0]
    content = json.loads(link.event.content)
    assert annotation["target"] == {
        "type": "SpecificResource",
        "source": f"nostr:{nip19.note_encode(content['from'])}",
        "selector": [{"type": "TextQuoteSelector", "exact": QUOTE}],
    }
    assert annotation["body"][0] == {"id": f"nostr:{nip19.note_encode(content['to'])}"}
    assert nip19.event_id_decode(annotation["id"]) == link.event.id


def test_created_is_any_signed_time_in_utc() -> None:
    """Every `created_at` an event may carry, past Python's year 9999 as well (a link signed so
    would otherwise break the download in its middle)."""
    for when in (0, 59, 951_782_400, 1_792_454_400, 4_102_444_800, 253_402_300_799):
        expected = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert created(when) == expected
    assert created(253_402_300_800) == "10000-01-01T00:00:00Z"
    assert created(MAX_CREATED_AT) == "285428751-11-12T07:36:31Z"
    far = linked()
    event = sign(OWNER, 4703, json.loads(far.event.content), created_at=MAX_CREATED_AT)
    annotation = whole(AnnotatedLink(event, None, None, None))["first"]["items"][0]
    assert annotation["created"] == "285428751-11-12T07:36:31Z"
    assert expand(whole(AnnotatedLink(event, None, None, None)))


def test_an_empty_collection_has_no_page() -> None:
    document = whole()
    assert document == {"@context": document["@context"], "id": f"{ORIGIN}/c/lab/annotations"
                        ".jsonld", "type": "AnnotationCollection",
                        "label": "The links of collection lab", "total": 0}  # fmt: skip
    assert expand(document)[0][f"{AS}totalItems"]


@pytest.mark.anyio
async def test_the_streamed_pieces_are_the_whole_document() -> None:
    links = [linked(relation) for relation in MOTIVATIONS]

    async def each() -> AsyncIterator[AnnotatedLink]:
        for link in links:
            yield link

    collection: Collection = collection_of(ORIGIN, "lab")
    text = "".join([piece async for piece in pieces(collection, each())])
    assert json.loads(text) == collection.whole(links)
    assert text.endswith("}\n")
