"""NIP-19 keys: what we encode others decode, and a mistyped key is never another key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import InvalidKey
from tms.nostr import nip19
from tms.nostr.keys import parse_pubkey, parse_secret

# The examples printed in NIP-19 itself.
NIP19_PUBKEY = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
NIP19_NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
NIP19_SECRET = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
NIP19_NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"


def test_nip19_examples() -> None:
    assert nip19.npub_encode(NIP19_PUBKEY) == NIP19_NPUB
    assert nip19.npub_decode(NIP19_NPUB) == NIP19_PUBKEY
    assert nip19.nsec_encode(bytes.fromhex(NIP19_SECRET)) == NIP19_NSEC
    assert nip19.nsec_decode(NIP19_NSEC).hex() == NIP19_SECRET


@given(st.binary(min_size=32, max_size=32))
def test_round_trip(data: bytes) -> None:
    assert nip19.nsec_decode(nip19.nsec_encode(data)) == data
    assert nip19.npub_decode(nip19.npub_encode(data.hex())) == data.hex()
    assert nip19.npub_decode(nip19.npub_encode(data.hex()).upper()) == data.hex()


@given(st.binary(max_size=80))
def test_five_bit_groups_are_bip173s(data: bytes) -> None:
    assert nip19._five_bit_groups(data) == nip19._convert_bits(data, 8, 5, pad=True)


# NIP-21's example of an event's URI.
NIP21_NOTE = "nostr:note1fntxtkcy9pjwucqwa9mddn7v03wwwsu9j330jj350nvhpky2tuaspk6nqc"


@given(st.binary(min_size=32, max_size=32))
def test_an_event_id_as_a_note_and_back(data: bytes) -> None:
    assert nip19.event_id_decode(nip19.note_encode(data.hex())) == data.hex()
    event_id = nip19.event_id_decode(NIP21_NOTE)
    assert f"nostr:{nip19.note_encode(event_id)}" == NIP21_NOTE


@given(position=st.integers(5, len(NIP19_NPUB) - 1), data=st.data())
def test_any_single_typo_fails_the_checksum(position: int, data: st.DataObject) -> None:
    old = NIP19_NPUB[position]
    new = data.draw(st.sampled_from("qpzry9x8gf2tvdw0s3jn54khce6mua7l").filter(lambda c: c != old))
    with pytest.raises(InvalidKey, match="checksum"):
        nip19.npub_decode(NIP19_NPUB[:position] + new + NIP19_NPUB[position + 1 :])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (NIP19_NPUB[:-1], "checksum"),
        (NIP19_NPUB[:5] + NIP19_NPUB[5:].upper(), "mixes upper and lower case"),
        ("npub1" + "b" * 58, "outside its alphabet"),
        ("npub", "missing prefix, separator or checksum"),
        (nip19.encode("npub", bytes(31)), "must hold 32 bytes"),
        (NIP19_NSEC, "expected an npub, got a bech32 'nsec'"),
    ],
)
def test_bad_npubs_say_why(text: str, words: str) -> None:
    with pytest.raises(InvalidKey, match=words):
        nip19.npub_decode(text)


def test_parse_pubkey_accepts_npub_and_hex() -> None:
    assert parse_pubkey(NIP19_NPUB) == NIP19_PUBKEY
    assert parse_pubkey(f"  {NIP19_PUBKEY.upper()}\n") == NIP19_PUBKEY
    with pytest.raises(InvalidKey, match="not a point on secp256k1"):
        parse_pubkey("0" * 64)
    with pytest.raises(InvalidKey, match="expected an npub or 64 hex"):
        parse_pubkey("alice")


def test_parse_secret_never_echoes_the_secret() -> None:
    assert parse_secret(NIP19_NSEC).pubkey == NIP19_PUBKEY
    assert parse_secret(NIP19_SECRET).pubkey == NIP19_PUBKEY
    for bad in (NIP19_SECRET[:-2], "0" * 64, NIP19_NSEC[:-1] + "x"):
        with pytest.raises(InvalidKey) as info:
            parse_secret(bad)
        assert NIP19_SECRET[:16] not in str(info.value)
