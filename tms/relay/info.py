"""NIP-11: the relay information document, `GET` of a relay's URL with
`Accept: application/nostr+json`, readable from any origin (CORS), as NIP-11 asks."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, Final

from tms.relay.limits import (
    DEFAULT_LIMIT,
    MAX_FILTERS,
    MAX_LIMIT,
    MAX_MESSAGE_BYTES,
    MAX_SUBID_CHARS,
    MAX_SUBSCRIPTIONS,
)
from tms.types import MAX_CONTENT_CHARS, MAX_FUTURE_SECONDS, Slug

MEDIA_TYPE: Final = "application/nostr+json"
SUPPORTED_NIPS: Final = (1, 11, 42, 45, 50, 77)
SOFTWARE: Final = "tms"  # the package this relay is; no public URL is claimed for it
CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Allow-Methods": "GET",
}


def wants_info(accept: str | None) -> bool:
    """Whether a GET asks for the NIP-11 document rather than the page."""
    return accept is not None and MEDIA_TYPE in accept.lower()


def document(slug: Slug | None) -> dict[str, Any]:
    """The document of one collection's relay (`slug`) or of the root relay. It names no
    member and says nothing of whether the collection exists: the same for every slug."""
    if slug is None:
        name = "TMS ledger"
        description = (
            "A private, append-only evidence ledger: one relay over every collection the "
            "authenticated key may read (NIP-42). Writes are judged by the ledger's rules: "
            "membership, terms, references and verbatim quotes."
        )
    else:
        name = f"TMS collection {slug}"
        description = (
            f"The TMS collection '{slug}' as a relay: its members read it after AUTH (NIP-42); "
            "events are judged by the ledger's rules before they are stored."
        )
    return {
        "name": name,
        "description": description,
        "supported_nips": list(SUPPORTED_NIPS),
        "software": SOFTWARE,
        "version": version("tms"),
        "limitation": {
            "max_message_length": MAX_MESSAGE_BYTES,
            "max_subscriptions": MAX_SUBSCRIPTIONS,
            "max_filters": MAX_FILTERS,
            "max_limit": MAX_LIMIT,
            "default_limit": DEFAULT_LIMIT,
            "max_subid_length": MAX_SUBID_CHARS,
            "max_content_length": MAX_CONTENT_CHARS,
            "auth_required": False,  # NIP-11: AUTH before any action; EVENT needs none here
            "restricted_writes": True,
            "payment_required": False,
            "created_at_upper_limit": MAX_FUTURE_SECONDS,
        },
    }
