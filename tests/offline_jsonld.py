"""JSON-LD expansion with no network: pyld with a document loader that serves the W3C annotation
context shipped in the package (`tms.rules.annotations.context_document`) for its URL and refuses
anything else, so a test proves the shipped file is all a processor needs."""

from __future__ import annotations

from typing import Any, Final

from pyld import jsonld

from tms.rules.annotations import ANNO_CONTEXT, context_document

OA: Final = "http://www.w3.org/ns/oa#"
AS: Final = "http://www.w3.org/ns/activitystreams#"
DCTERMS: Final = "http://purl.org/dc/terms/"
RDF_VALUE: Final = "http://www.w3.org/1999/02/22-rdf-syntax-ns#value"
XSD: Final = "http://www.w3.org/2001/XMLSchema#"


def loader(url: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The shipped W3C context for its URL; anything else refused."""
    if url != ANNO_CONTEXT:
        raise AssertionError(f"the expansion asked for {url}: only the shipped context is offline")
    return {
        "contentType": "application/ld+json",
        "contextUrl": None,
        "documentUrl": url,
        "document": context_document(),
    }


def expand(document: dict[str, Any]) -> list[dict[str, Any]]:
    expanded: list[dict[str, Any]] = jsonld.expand(document, {"documentLoader": loader})
    return expanded
