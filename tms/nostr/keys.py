"""Reading keys as people paste them: `npub`/`nsec` (NIP-19) or 64 hex characters."""

from __future__ import annotations

from coincurve import PublicKeyXOnly

from tms.errors import InvalidKey
from tms.nostr import nip19
from tms.nostr.events import SecretKey, is_hex64
from tms.types import PubKey


def parse_pubkey(text: str) -> PubKey:
    """An npub or hex public key, checked to be a point on the curve, as lowercase hex."""
    text = text.strip()
    if text.lower().startswith("npub1"):
        pubkey = nip19.npub_decode(text)
    elif is_hex64(text.lower()):
        pubkey = text.lower()
    else:
        raise InvalidKey(
            f"not a public key: expected an npub or 64 hex characters, got {text!r:.80}"
        )
    if not is_valid_pubkey(pubkey):
        raise InvalidKey(f"not a public key: {pubkey} is not a point on secp256k1")
    return pubkey


def is_valid_pubkey(pubkey: str) -> bool:
    if not is_hex64(pubkey):
        return False
    try:
        PublicKeyXOnly(bytes.fromhex(pubkey))
    except ValueError:
        return False
    return True


def parse_secret(text: str) -> SecretKey:
    """An nsec or 64 hex characters. Error messages never echo the secret."""
    text = text.strip()
    if text.lower().startswith("nsec1"):
        return SecretKey(nip19.nsec_decode(text))
    if is_hex64(text.lower()):
        return SecretKey(bytes.fromhex(text))
    raise InvalidKey("not a secret key: expected an nsec or 64 hex characters")
