"""NIP-19 bech32 encoding of keys (`npub`, `nsec`), and reading a key in any accepted spelling;
reading an event id from a `note` or an `nevent` (what Nostr clients show and share).

Bech32 (BIP-173, not bech32m) as NIP-19 uses it; decoding checks the checksum, the prefix, the
5-to-8-bit padding and the length, so a mistyped key never silently becomes another key. An
`nevent` is TLV entries as nostr-tools reads them: type 0 holds the 32-byte id (required), 1 a
relay, 2 the author (32 bytes), 3 the kind (4 bytes, big-endian); unknown types are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tms.errors import InvalidKey

_CHARSET: Final = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR: Final = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
MAX_LENGTH: Final = 5000  # NIP-19 lifts BIP-173's 90-character cap for TLV entities


def _xor_all(values: Iterable[int]) -> int:
    out = 0
    for value in values:
        out ^= value
    return out


# What the checksum's top five bits add, for each of their 32 values: the generators of their set
# bits XORed (BIP-173's inner loop done once, so that each value costs one look-up).
_TOP: Final = tuple(
    _xor_all(g for i, g in enumerate(_GENERATOR) if (top >> i) & 1) for top in range(32)
)


def _polymod(values: list[int]) -> int:
    chk = 1
    for value in values:
        chk = ((chk & 0x1FFFFFF) << 5 ^ value) ^ _TOP[chk >> 25]
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _convert_bits(data: bytes | list[int], from_bits: int, to_bits: int, pad: bool) -> list[int]:
    acc = 0
    bits = 0
    out: list[int] = []
    maxv = (1 << to_bits) - 1
    for value in data:
        acc = (acc << from_bits) | value
        bits += from_bits
        while bits >= to_bits:
            bits -= to_bits
            out.append((acc >> bits) & maxv)
    if pad:
        if bits:
            out.append((acc << (to_bits - bits)) & maxv)
    elif bits >= from_bits or (acc << (to_bits - bits)) & maxv:
        raise InvalidKey("bech32 data has invalid padding")
    return out


def _five_bit_groups(data: bytes) -> list[int]:
    """`_convert_bits(data, 8, 5, pad=True)`, as one big integer cut into groups (the bit loop
    costs ten times as much, and an export encodes an id per record)."""
    bits = len(data) * 8
    count = -(-bits // 5)
    number = int.from_bytes(data, "big") << (count * 5 - bits)
    return [(number >> shift) & 31 for shift in range(5 * (count - 1), -1, -5)]


def encode(hrp: str, data: bytes) -> str:
    values = _five_bit_groups(data)
    polymod = _polymod([*_hrp_expand(hrp), *values, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[v] for v in values + checksum)


def decode(text: str) -> tuple[str, bytes]:
    """Return (prefix, payload). Mixed case is refused, as BIP-173 requires."""
    if len(text) > MAX_LENGTH:
        raise InvalidKey("bech32 string is too long")
    if text.lower() != text and text.upper() != text:
        raise InvalidKey("bech32 string mixes upper and lower case")
    text = text.lower()
    pos = text.rfind("1")
    if pos < 1 or pos + 7 > len(text):
        raise InvalidKey("not a bech32 string: missing prefix, separator or checksum")
    hrp, rest = text[:pos], text[pos + 1 :]
    if any(not 33 <= ord(c) <= 126 for c in hrp):
        raise InvalidKey("bech32 prefix has invalid characters")
    try:
        values = [_CHARSET.index(c) for c in rest]
    except ValueError:
        raise InvalidKey("bech32 string has a character outside its alphabet") from None
    if _polymod(_hrp_expand(hrp) + values) != 1:
        raise InvalidKey("bech32 checksum is wrong: the key was mistyped or truncated")
    return hrp, bytes(_convert_bits(values[:-6], 5, 8, pad=False))


def _decode_key(text: str, prefix: str) -> bytes:
    hrp, data = decode(text)
    if hrp != prefix:
        raise InvalidKey(f"expected an {prefix}, got a bech32 '{hrp}'")
    if len(data) != 32:
        raise InvalidKey(f"{prefix} must hold 32 bytes, it holds {len(data)}")
    return data


def npub_encode(pubkey_hex: str) -> str:
    return encode("npub", bytes.fromhex(pubkey_hex))


def note_encode(event_id_hex: str) -> str:
    """An event id as NIP-19's `note`, which NIP-21 writes as the URI `nostr:note1...`."""
    return encode("note", bytes.fromhex(event_id_hex))


def nsec_encode(secret: bytes) -> str:
    return encode("nsec", secret)


def npub_decode(npub: str) -> str:
    return _decode_key(npub, "npub").hex()


def nsec_decode(nsec: str) -> bytes:
    return _decode_key(nsec, "nsec")


def _tlv(data: bytes) -> dict[int, list[bytes]]:
    """NIP-19's type-length-value entries, by type."""
    entries: dict[int, list[bytes]] = {}
    at = 0
    while at < len(data):
        if at + 2 > len(data):
            raise InvalidKey("nevent data ends inside an entry")
        kind, size = data[at], data[at + 1]
        value = data[at + 2 : at + 2 + size]
        if len(value) != size:
            raise InvalidKey(f"nevent entry of type {kind} is cut short")
        entries.setdefault(kind, []).append(value)
        at += 2 + size
    return entries


def event_id_decode(text: str) -> str:
    """The hex event id a `note1...` or `nevent1...` names (a `nostr:` prefix allowed, NIP-21);
    InvalidKey says what is wrong with any other string."""
    text = text.strip()
    if text[:6].lower() == "nostr:":
        text = text[6:]
    hrp, data = decode(text)
    if hrp == "note":
        if len(data) != 32:
            raise InvalidKey(f"a note must hold 32 bytes, it holds {len(data)}")
        return data.hex()
    if hrp != "nevent":
        raise InvalidKey(f"expected a note or an nevent, got a bech32 '{hrp}'")
    entries = _tlv(data)
    ids = entries.get(0, [])
    if not ids or len(ids[0]) != 32:
        raise InvalidKey("the nevent holds no 32-byte event id")
    for author in entries.get(2, [])[:1]:
        if len(author) != 32:
            raise InvalidKey("the nevent's author is not 32 bytes")
    for kind in entries.get(3, [])[:1]:
        if len(kind) != 4:
            raise InvalidKey("the nevent's kind is not 4 bytes")
    return ids[0].hex()
