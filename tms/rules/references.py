"""What a person pastes where a record's id is expected, and which record it can name.

The submit page's claim field takes new claim text or the id of an existing record. Ids reach
people in several spellings: whole (64 hex), shortened on a page (`138e8246…`, `138e…f10b`), as
NIP-19 `note1…`/`nevent1…` strings from Nostr clients, or inside the address of one of our own
pages. Stored as a claim's text, any of them would be junk in an append-only ledger forever, so
anything shaped like an id is read as one: `parse_reference` says which id (or which beginning
of one) it names, or raises `NotAnId` with what is wrong with it; it never falls back to text.

"Shaped like an id": a whole text of at least `MIN_BARE_HEX` hex digits (a bare hex string is
no statement; shorter ones such as "2024" or "cafe" stay text), hex digits around an ellipsis
(`…`, `...`, `..`; eight of them, or four with a digit, so that "Dead..." stays text), a
`note1`/`nevent1` string (a `nostr:` prefix allowed), or an address of a
claim, evidence or link page of this service. Pure: nothing here knows the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tms.errors import InvalidKey
from tms.nostr.nip19 import event_id_decode

ID_CHARS: Final = 64
MIN_BARE_HEX: Final = 8  # a bare hex text this long is an id (or part of one), never a claim
MIN_LOOKUP_HEX: Final = 4  # the shortest beginning of an id that is looked up
MAX_REFERENCE_CHARS: Final = 2000  # longer texts are never read as ids (an nevent is ~200)

_BECH32: Final = re.compile(r"(?:nostr:)?(?:note|nevent)1[0-9a-z]+", re.IGNORECASE)
_SHORTENED: Final = re.compile(r"([0-9a-f]*)\s*(?:…|\.{2,3})\s*([0-9a-f]*)", re.IGNORECASE)
_HEX: Final = re.compile(r"[0-9a-f]+", re.IGNORECASE)
_PAGE: Final = re.compile(
    r"https?://\S+?/c/[a-z0-9_-]{1,64}/(?:claims|evidence|links)/([0-9a-f]{64})/?(?:[?#]\S*)?",
    re.IGNORECASE,
)


class NotAnId(ValueError):
    """A text shaped like an id that names none; the message says why, for the person."""


@dataclass(frozen=True, slots=True)
class Reference:
    """An id, or the beginning (and perhaps the end) of one: lowercase hex."""

    head: str  # the whole id, or its first characters
    tail: str = ""  # its last characters, for an id shortened in the middle

    @property
    def whole(self) -> bool:
        return len(self.head) == ID_CHARS

    def matches(self, event_id: str) -> bool:
        return event_id.startswith(self.head) and event_id.endswith(self.tail)

    def shown(self) -> str:
        """How the person wrote it, more or less: for messages."""
        if self.whole:
            return self.head
        return f"{self.head}…{self.tail}"


def parse_reference(text: str) -> Reference | None:
    """The id `text` names (whole or shortened), or None when it is not shaped like one (then it
    is claim text). `NotAnId` when it is shaped like one but cannot name a record."""
    t = text.strip()
    if not t or len(t) > MAX_REFERENCE_CHARS:
        return None
    if _BECH32.fullmatch(t):
        try:
            return Reference(event_id_decode(t))
        except InvalidKey as exc:
            raise NotAnId(f"{_cut(t)} is not a valid NIP-19 note or nevent: {exc}") from None
    page = _PAGE.fullmatch(t)
    if page:
        return Reference(page.group(1).lower())
    shortened = _SHORTENED.fullmatch(t)
    if shortened and _id_like(shortened.group(1) + shortened.group(2)):
        head, tail = shortened.group(1).lower(), shortened.group(2).lower()
        if len(head) + len(tail) > ID_CHARS:
            raise NotAnId(f"{_cut(t)} has more hex digits than an event id ({ID_CHARS})")
        if len(head) < MIN_LOOKUP_HEX:
            raise NotAnId(
                f"{_cut(t)} is a shortened id whose beginning is too short to find it by: "
                "paste the whole id (the claim page has a Copy button)"
            )
        return Reference(head, tail)
    if _HEX.fullmatch(t) and len(t) >= MIN_BARE_HEX:
        if len(t) > ID_CHARS:
            raise NotAnId(f"{_cut(t)} is {len(t)} hex digits, longer than an event id ({ID_CHARS})")
        return Reference(t.lower())
    return None


def looks_like_id(text: str) -> bool:
    """Whether `text` is shaped like an id (whether or not it names one)."""
    try:
        return parse_reference(text) is not None
    except NotAnId:
        return True


def _id_like(digits: str) -> bool:
    """Hex digits around an ellipsis that read as a shortened id rather than a word cut short
    ("dead…", "Dad..."): eight of them, or four with a digit among them."""
    return len(digits) >= MIN_BARE_HEX or (
        len(digits) >= MIN_LOOKUP_HEX and any(c.isdigit() for c in digits)
    )


def _cut(text: str, size: int = 80) -> str:
    return f'"{text}"' if len(text) <= size else f'"{text[: size - 1]}…"'
