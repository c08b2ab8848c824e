"""Pasted ids: every spelling people meet (whole, shortened on a page, NIP-19 from a Nostr
client, one of our pages' addresses) is read as an id, never as claim text; and text that
merely contains hex stays text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import InvalidKey
from tms.nostr import nip19
from tms.rules.references import NotAnId, Reference, looks_like_id, parse_reference

ID = "138e82465439f10b9fa1a2f0d4a4bd7ffc4b3ee1e4a3c8ea3fb1d2e0c8a4f9e1"
AUTHOR = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
# Made by nostr-tools 2.25.2 (nip19.noteEncode, nip19.neventEncode) under Node 20.
NOTE = "note1zw8gy3j588csh8ap5tcdff9a0l7yk0hpuj3u363lk8fwpj9yl8ssxdgm9u"
NEVENT_BARE = "nevent1qqsp8r5zge2rnugtn7s69ux55j7hllzt8ms7fg7gaglmr5hqezj0ncgnk5jp0"
NEVENT_FULL = (  # relays wss://relay.example.com and wss://nos.lol, the author, kind 4702
    "nevent1qvzqqqqjtcpzqln7n3p2jxl77x06j209lksmwtswhsdycy2pvulz09prfkr2mh6wqythwumn8ghj7un9d3shj"
    "tn90psk6urvv5hxxmmdqyxhwumn8ghj7mn0wvhxcmmvqqsp8r5zge2rnugtn7s69ux55j7hllzt8ms7fg7gaglmr5h"
    "qezj0ncgy4pmql"
)


def test_nostr_tools_notes_and_nevents_decode_to_the_id() -> None:
    for text in (NOTE, NEVENT_BARE, NEVENT_FULL, f"nostr:{NOTE}", NOTE.upper()):
        assert nip19.event_id_decode(text) == ID
        assert parse_reference(f"  {text}\n") == Reference(ID)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (NOTE[:-1], "checksum"),
        (nip19.encode("note", bytes(31)), "must hold 32 bytes"),
        (nip19.encode("npub", bytes(32)), "expected a note or an nevent, got a bech32 'npub'"),
        (nip19.encode("nevent", bytes([1, 3, 0x61, 0x62, 0x63])), "no 32-byte event id"),
        (nip19.encode("nevent", bytes([0, 32]) + bytes(31)), "cut short"),
        (nip19.encode("nevent", bytes([0, 32]) + bytes(32) + bytes([2, 3, 1, 2, 3])), "author"),
        (nip19.encode("nevent", bytes([0, 32]) + bytes(32) + bytes([3, 2, 1, 2])), "kind"),
    ],
)
def test_broken_notes_and_nevents_say_why(text: str, words: str) -> None:
    with pytest.raises(InvalidKey, match=words):
        nip19.event_id_decode(text)


@given(st.binary(min_size=32, max_size=32), st.lists(st.binary(max_size=40), max_size=3))
def test_an_nevent_with_unknown_entries_still_names_its_id(
    event_id: bytes, extra: list[bytes]
) -> None:
    data = bytes([0, 32]) + event_id + b"".join(bytes([9, len(e)]) + e for e in extra)
    assert nip19.event_id_decode(nip19.encode("nevent", data)) == event_id.hex()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ID, Reference(ID)),
        (ID.upper(), Reference(ID)),
        ("138e8246…", Reference("138e8246")),
        ("138e82465439f10b…", Reference("138e82465439f10b")),
        ("138e8246...", Reference("138e8246")),
        ("138E8246 …", Reference("138e8246")),
        ("138e…f9e1", Reference("138e", "f9e1")),
        ("1a2b…", Reference("1a2b")),  # four digits with a digit among them
        ("138e8246", Reference("138e8246")),
        ("deadbeef", Reference("deadbeef")),
        (f"https://tms.example/c/field-notes/claims/{ID}", Reference(ID)),
        (f"http://127.0.0.1:8080/c/x/evidence/{ID}?page=2", Reference(ID)),
    ],
)
def test_id_spellings_are_read_as_ids(text: str, expected: Reference) -> None:
    assert parse_reference(text) == expected
    assert looks_like_id(text)


@pytest.mark.parametrize(
    "text",
    [
        "Histamine intolerance results from reduced DAO activity.",
        "2024",
        "cafe",
        "Added",
        "Dead...",
        "facade…",
        "The id 138e8246 names a claim.",
        "...",
        "13…",  # too few digits to be an id
        "1a2…",
        "",
        "   ",
        "0x138e8246",
        "https://example.org/c/x/claims/not-an-id",
    ],
)
def test_text_stays_text(text: str) -> None:
    assert parse_reference(text) is None
    assert not looks_like_id(text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("…f9e1", "too short"),
        (ID + "00", "longer than an event id"),
        (ID[:40] + "…" + ID[:30], "more hex digits than an event id"),
        (NOTE[:-2] + "qq", "not a valid NIP-19"),
    ],
)
def test_ids_that_cannot_name_a_record_are_refused_not_kept_as_text(text: str, words: str) -> None:
    with pytest.raises(NotAnId, match=words):
        parse_reference(text)
    assert looks_like_id(text)


def test_a_reference_matches_the_ids_it_names() -> None:
    assert Reference("138e", "f9e1").matches(ID)
    assert not Reference("138e", "f9e2").matches(ID)
    assert Reference(ID).whole and not Reference("138e").whole
    assert Reference("138e", "f9e1").shown() == "138e…f9e1"
