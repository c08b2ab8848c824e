"""NIP-11: the relay information document, `GET` of a relay's URL with
`Accept: application/nostr+json`, readable from any origin (CORS), as NIP-11 asks.

`limitation` states every limit a client needs to send what the relay takes and to pace itself:
NIP-11's own fields where it has one (`max_message_length`, `max_filters`, `max_limit`, ...),
and beside them, under names of our own, the ids a filter may name (`max_ids_per_filter`: a sync
fetches what NIP-77 said it lacks in one filter, up to as many as a message holds; and
`max_listed_ids_per_filter` in a COUNT, a NEG-OPEN, or a REQ with a smaller `limit`, which read
them all at once), NIP-77's bounds, and `rate_limits`: each budget
a relay message spends (`address`: every message; `read`: what a key's reads cost, whatever
address they come from) as `[{"amount", "seconds"}]`, and what each read costs in its units
(`read_costs`), so that a mirror spends no more than its budget refills.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Any, Final

from limits import RateLimitItem

from tms.guard.rates import (
    COUNT_UNITS,
    NEG_BYTES_PER_UNIT,
    NEG_ITEMS_PER_UNIT,
    PAGE_ROWS,
    READ_VALUES_PER_UNIT,
    RateLimits,
    seconds_of,
)
from tms.nostr.filters import MAX_IDS, MAX_LISTED_IDS, MAX_VALUES
from tms.relay.limits import (
    DEFAULT_LIMIT,
    MAX_FILTERS,
    MAX_LIMIT,
    MAX_MESSAGE_BYTES,
    MAX_NEG_MESSAGE_BYTES,
    MAX_NEG_RECORDS,
    MAX_NEG_SESSIONS,
    MAX_SUBID_CHARS,
    MAX_SUBSCRIPTIONS,
)
from tms.types import MAX_CONTENT_CHARS, MAX_FUTURE_SECONDS, PubKey, Slug

MEDIA_TYPE: Final = "application/nostr+json"
SUPPORTED_NIPS: Final = (1, 11, 42, 45, 50, 77)
COLLECTION_NIPS: Final[tuple[int, ...]] = (43,)  # what a collection's relay with a relay key adds
MANAGEMENT_NIP: Final = 86  # listed where it works (`document`'s `management`)
SOFTWARE: Final = "tms"  # the package this relay is; no public URL is claimed for it
CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Allow-Methods": "GET",
}


def wants_info(accept: str | None) -> bool:
    """Whether a GET asks for the NIP-11 document rather than the page: one of its media types
    is NIP-11's exactly (NIP-86's `application/nostr+json+rpc` contains it, and is not it)."""
    if accept is None:
        return False
    return any(part.split(";", 1)[0].strip().lower() == MEDIA_TYPE for part in accept.split(","))


def document(
    slug: Slug | None,
    rates: RateLimits | None = None,
    relay_key: PubKey | None = None,
    *,
    management: bool = False,
    details: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The document of one collection's relay (`slug`) or of the root relay, under the server's
    `rates` (none: no rate limits). It names no member and says nothing of whether the
    collection exists: the same for every slug. `management`: NIP-86 works here (a
    collection's owner manages its members; on the root, operator keys are set), so 86 is
    listed. `details`: the root's name and description the operator set (NIP-86).

    A collection's relay names the server's relay key (`relay_key`, `TMS_RELAY_KEY`) as NIP-11's
    `self`, the key NIP-43's membership events are signed by, and as `pubkey` too: nostr-tools
    and the clients built on it find a relay's group events by the document's `pubkey`. Only
    then does it list NIP-43: a client asks a relay for invites only when it does."""
    rates = rates or RateLimits()
    nips = sorted({*SUPPORTED_NIPS, *((MANAGEMENT_NIP,) if management else ())})
    if slug is None:
        name = (details or {}).get("name", "TMS ledger")
        description = (details or {}).get("description") or (
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
    own: dict[str, str] = {}
    if slug is not None and relay_key is not None:
        nips = sorted(nips + list(COLLECTION_NIPS))
        own = {"pubkey": relay_key, "self": relay_key}
    return {
        "name": name,
        "description": description,
        **own,
        "supported_nips": nips,
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
            "max_ids_per_filter": MAX_IDS,  # a REQ's, answered whole a page at a time
            "max_listed_ids_per_filter": MAX_LISTED_IDS,  # a COUNT's, a NEG-OPEN's, a `limit`'s
            "max_values_per_filter": MAX_VALUES,  # authors, kinds and tag values together
            "max_neg_sessions": MAX_NEG_SESSIONS,
            "max_neg_records": MAX_NEG_RECORDS,
            "max_neg_message_bytes": MAX_NEG_MESSAGE_BYTES,
            "rate_limits": {
                "address": _windows(rates.address),
                "read": _windows(rates.read),
                "read_costs": {
                    "unit_rows": PAGE_ROWS,
                    "req_filter": 1,
                    "count_filter": COUNT_UNITS,
                    "ids_per_unit": PAGE_ROWS,
                    "values_per_unit": READ_VALUES_PER_UNIT,
                    "neg_open": 1,
                    "neg_items_per_unit": NEG_ITEMS_PER_UNIT,
                    "neg_msg": 1,
                    "neg_msg_bytes_per_unit": NEG_BYTES_PER_UNIT,
                },
            },
        },
    }


def _windows(items: tuple[RateLimitItem, ...]) -> list[dict[str, int]]:
    """A budget as NIP-11 readers can use it: at most `amount` units in any `seconds`."""
    return [{"amount": item.amount, "seconds": seconds_of(item)} for item in items]
