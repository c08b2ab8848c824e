"""Witness cosignatures (C2SP `tlog-cosignature`, the Ed25519 `cosignature/v1` type): a
witness's timestamped statement that a checkpoint is the largest consistent tree it has seen of
that log, in the note-signature form that checkpoint readers already parse.

A cosignature line is `— <witness name> base64(key ID || u64 timestamp || Ed25519 signature)`;
the key ID is the first four bytes of SHA-256(name || "\\n" || 0x04 || public key), and the
signed message is `cosignature/v1\\ntime <timestamp>\\n` followed by the checkpoint's note
text. The 0x04 type byte keeps a witness key from ever being mistaken for a log key (0x01, in
`tms.tlog.note`), so a log cannot cosign its own checkpoints by reusing its key.

Pure: keys enter as text or bytes, and the signing itself is the `cryptography` package's.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PrivateFormat, PublicFormat
from cryptography.hazmat.primitives.serialization import NoEncryption as _NoEncryption

from tms.errors import LogError
from tms.tlog.note import DASH, SIGNER_PREFIX, check_key_name, check_note_text, decode_base64

ALG_COSIGNATURE_V1: Final = 0x04
HEADER: Final = "cosignature/v1\n"
MAX_TIMESTAMP: Final = 2**63 - 1
SIGNATURE_BYTES: Final = 4 + 8 + 64  # key ID, timestamp, Ed25519 signature


def cosigner_key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public).digest()[:4]


def signed_message(text: str, timestamp: int) -> bytes:
    """What a v1 cosignature signs: the header line, the time line, then the note text."""
    return f"{HEADER}time {timestamp}\n{text}".encode()


@dataclass(frozen=True, slots=True)
class Cosignature:
    """One verified cosignature: who signed, when (POSIX seconds), and its note line."""

    name: str
    timestamp: int
    line: str  # `— <name> <base64>`, without the newline


@dataclass(frozen=True, slots=True)
class CosignerVerifier:
    """A witness's public key, as a policy file or `GET /witness/key` gives it."""

    name: str
    public: bytes

    @property
    def key_id(self) -> bytes:
        return cosigner_key_id(self.name, self.public)

    @classmethod
    def parse(cls, text: str) -> CosignerVerifier:
        """`<name>+<key ID hex>+base64(0x04 || public key)`, with the key ID checked."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise LogError("a witness key is <name>+<8 hex digits>+<base64 key>")
        name, id_hex, encoded = parts
        check_key_name(name)
        raw = decode_base64(encoded, "the witness key")
        if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
            raise LogError(
                "the witness key is not an Ed25519 cosignature/v1 key (type 0x04, 32 bytes)"
            )
        try:
            Ed25519PublicKey.from_public_bytes(raw[1:])
        except ValueError:
            raise LogError("the witness key is not a valid Ed25519 public key") from None
        verifier = cls(name, raw[1:])
        if id_hex != verifier.key_id.hex():
            raise LogError("the witness key's ID does not match its name and key")
        return verifier

    def encode(self) -> str:
        key = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public).decode("ascii")
        return f"{self.name}+{self.key_id.hex()}+{key}"

    def find(self, text: str, signatures: list[tuple[str, bytes]]) -> Cosignature | None:
        """This witness's cosignature among a note's signatures, once it verifies; None when
        the note carries none by this key (other lines are ignored, as the spec says); a
        `LogError` naming the witness when one claims to be its and does not verify."""
        public = Ed25519PublicKey.from_public_bytes(self.public)
        for name, signature in signatures:
            if name != self.name or signature[:4] != self.key_id:
                continue
            if len(signature) != SIGNATURE_BYTES:
                raise LogError(f"the cosignature by witness {self.name} is not 76 bytes")
            (timestamp,) = struct.unpack(">Q", signature[4:12])
            if timestamp > MAX_TIMESTAMP:
                raise LogError(f"the cosignature by witness {self.name} has an invalid time")
            try:
                public.verify(signature[12:], signed_message(text, timestamp))
            except InvalidSignature:
                raise LogError(f"the cosignature by witness {self.name} does not verify") from None
            line = f"{DASH} {name} {base64.b64encode(signature).decode('ascii')}"
            return Cosignature(name, timestamp, line)
        return None


class CosignerKey:
    """A witness's Ed25519 key. The seed never appears in a repr."""

    __slots__ = ("_private", "name")

    def __init__(self, name: str, private: Ed25519PrivateKey) -> None:
        self.name = check_key_name(name)
        self._private = private

    @classmethod
    def generate(cls, name: str) -> CosignerKey:
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def parse(cls, text: str) -> CosignerKey:
        """`PRIVATE+KEY+<name>+<key ID hex>+base64(0x04 || 32-byte seed)`."""
        text = text.strip()
        parts = text[len(SIGNER_PREFIX) :].split("+", 2)
        if not text.startswith(SIGNER_PREFIX) or len(parts) != 3:
            raise LogError("a witness key is PRIVATE+KEY+<name>+<8 hex digits>+<base64 seed>")
        name, id_hex, encoded = parts
        raw = decode_base64(encoded, "the witness key")
        if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
            raise LogError("the witness key is not a cosignature/v1 key (type 0x04, 32 bytes)")
        key = cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if id_hex != key.verifier().key_id.hex():
            raise LogError("the witness key's ID does not match its name and key")
        return key

    def encode(self) -> str:
        seed = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, _NoEncryption())
        key = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + seed).decode("ascii")
        return f"{SIGNER_PREFIX}{self.name}+{self.verifier().key_id.hex()}+{key}"

    def verifier(self) -> CosignerVerifier:
        public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return CosignerVerifier(self.name, public)

    def cosign(self, text: str, timestamp: int) -> str:
        """The cosignature line (newline-terminated) over a checkpoint's note text."""
        check_note_text(text)
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise LogError("a cosignature's time is a POSIX timestamp below 2**63")
        signature = self._private.sign(signed_message(text, timestamp))
        raw = self.verifier().key_id + struct.pack(">Q", timestamp) + signature
        return f"{DASH} {self.name} {base64.b64encode(raw).decode('ascii')}\n"

    def __repr__(self) -> str:
        return f"CosignerKey(name={self.name!r})"
