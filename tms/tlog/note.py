"""Signed notes (C2SP `signed-note`), their Ed25519 keys, and the checkpoints they carry (C2SP
`tlog-checkpoint`): the formats the transparency-log tools of Go's checksum database, Sigstore
and the witness network read, so that a member can check a TMS checkpoint with any of them.

A note is a text ending in a newline, a blank line, then signature lines
`— <key name> base64(key ID || signature)`. The key ID is the first four bytes of
SHA-256(key name || "\\n" || 0x01 || Ed25519 public key). Keys travel in the encodings of
golang.org/x/mod/sumdb/note: a verifier key is `<name>+<key ID hex>+base64(0x01 || public key)`,
a signer key `PRIVATE+KEY+<name>+<key ID hex>+base64(0x01 || seed)`.

Pure: keys enter as text or bytes, and the signing itself is the `cryptography` package's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PrivateFormat, PublicFormat
from cryptography.hazmat.primitives.serialization import NoEncryption as _NoEncryption

from tms.errors import LogError, shown
from tms.rules.content import SLUG_PATTERN
from tms.tlog.merkle import HASH_SIZE

ALG_ED25519: Final = 0x01
SIGNER_PREFIX: Final = "PRIVATE+KEY+"
DASH: Final = "\u2014"  # the em dash that opens every signature line
MAX_NOTE_CHARS: Final = 64 * 1024  # a checkpoint with many cosignatures fits many times over
MAX_SIGNATURES: Final = 100
MAX_TREE_SIZE: Final = 2**63 - 1  # the database keeps sizes in bigint
_SIZE: Final = re.compile(r"0|[1-9][0-9]{0,18}")


def check_key_name(name: str) -> str:
    """Key names are non-empty, printable, and hold neither spaces nor `+` (signed-note)."""
    if not name or "+" in name or any(c.isspace() or not c.isprintable() for c in name):
        raise LogError(
            f"key name {shown(name)!r} is invalid: it must be non-empty, without spaces or '+'"
        )
    return name


def key_id(name: str, public: bytes) -> bytes:
    """The four bytes that, with the name, identify an Ed25519 key in a note."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public).digest()[:4]


def decode_base64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise LogError(f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:  # one spelling per value
        raise LogError(f"{what} is not canonical base64")
    return raw


@dataclass(frozen=True, slots=True)
class NoteVerifier:
    """A public key that notes are checked against: what `GET /log-key` publishes."""

    name: str
    public: bytes  # the 32-byte Ed25519 public key

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public)

    @classmethod
    def parse(cls, text: str) -> NoteVerifier:
        """`<name>+<key ID hex>+base64(0x01 || public key)`, with the key ID checked."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise LogError("a verifier key is <name>+<8 hex digits>+<base64 key>")
        name, id_hex, encoded = parts
        check_key_name(name)
        raw = decode_base64(encoded, "the verifier key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise LogError("the verifier key is not an Ed25519 key (type 0x01, 32 bytes)")
        try:
            Ed25519PublicKey.from_public_bytes(raw[1:])
        except ValueError:
            raise LogError("the verifier key is not a valid Ed25519 public key") from None
        verifier = cls(name, raw[1:])
        if id_hex != verifier.key_id.hex():
            raise LogError("the verifier key's ID does not match its name and key")
        return verifier

    def encode(self) -> str:
        key = base64.b64encode(bytes([ALG_ED25519]) + self.public).decode("ascii")
        return f"{self.name}+{self.key_id.hex()}+{key}"

    def names(self, name: str, signature: bytes) -> bool:
        """Whether a signature line names this key: its name and key ID both."""
        return name == self.name and signature[:4] == self.key_id

    def verifies(self, text: str, signature: bytes) -> bool:
        """Whether `signature` (key ID and Ed25519 signature) is this key's over `text`: the
        one costly step of opening a note, done at most once per key and note."""
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(
                signature[4:], text.encode("utf-8")
            )
        except InvalidSignature:
            return False
        return True

    def open(self, note: str) -> str:
        """The note's text, once a signature by this key is found and verifies; else
        `LogError`. Signatures by other keys are ignored, as the spec says. A note with two
        lines naming this key is refused before either is verified: a key signs a text once,
        and verifying every copy of a line would let a sender buy a hundred verifications
        with one note."""
        text, signatures = split_note(note)
        mine = [signature for name, signature in signatures if self.names(name, signature)]
        if len(mine) > 1:
            raise LogError(f"the note carries {len(mine)} signature lines by {self.name}")
        if not mine:
            raise LogError(f"the note carries no signature by the key {self.encode()}")
        if not self.verifies(text, mine[0]):
            raise LogError(f"the note's signature by {self.name} does not verify")
        return text


class NoteSigner:
    """An Ed25519 key that signs notes under a name. The seed never appears in a repr."""

    __slots__ = ("_key_id", "_private", "name")

    def __init__(self, name: str, private: Ed25519PrivateKey) -> None:
        self.name = check_key_name(name)
        self._private = private
        # Derived once: the public key is a scalar multiplication away, and every checkpoint
        # a publish signs names it.
        self._key_id = self.verifier().key_id

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def parse(cls, text: str) -> NoteSigner:
        """`PRIVATE+KEY+<name>+<key ID hex>+base64(0x01 || 32-byte seed)`."""
        text = text.strip()
        if not text.startswith(SIGNER_PREFIX):
            raise LogError("a log key is PRIVATE+KEY+<name>+<8 hex digits>+<base64 seed>")
        parts = text[len(SIGNER_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise LogError("a log key is PRIVATE+KEY+<name>+<8 hex digits>+<base64 seed>")
        name, id_hex, encoded = parts
        raw = decode_base64(encoded, "the log key")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise LogError("the log key is not an Ed25519 key (type 0x01, 32-byte seed)")
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if id_hex != signer.verifier().key_id.hex():
            raise LogError("the log key's ID does not match its name and key")
        return signer

    def encode(self) -> str:
        seed = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, _NoEncryption())
        key = base64.b64encode(bytes([ALG_ED25519]) + seed).decode("ascii")
        return f"{SIGNER_PREFIX}{self.name}+{self.verifier().key_id.hex()}+{key}"

    def verifier(self) -> NoteVerifier:
        public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return NoteVerifier(self.name, public)

    def sign(self, text: str) -> str:
        """The signed note: `text`, a blank line, and this key's signature line."""
        check_note_text(text)
        signature = self._key_id + self._private.sign(text.encode("utf-8"))
        return f"{text}\n{DASH} {self.name} {base64.b64encode(signature).decode('ascii')}\n"

    def __repr__(self) -> str:
        return f"NoteSigner(name={self.name!r})"


def check_note_text(text: str) -> None:
    if not text.endswith("\n"):
        raise LogError("a note's text ends with a newline")
    if any(c < " " and c != "\n" for c in text):
        raise LogError("a note holds no control characters but newlines")


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """A note's text and its signatures `(key name, key ID || signature)`, or `LogError`."""
    if len(note) > MAX_NOTE_CHARS:
        raise LogError(f"the note is longer than {MAX_NOTE_CHARS:,} characters")
    if not note.endswith("\n"):
        raise LogError("a note ends with a newline")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise LogError("the note has no blank line before its signatures")
    text, lines = note[: cut + 1], note[cut + 2 : -1].split("\n")
    check_note_text(text)
    if len(lines) > MAX_SIGNATURES:
        raise LogError(f"the note has more than {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != DASH:
            raise LogError("a signature line is '— <key name> <base64 signature>'")
        signature = decode_base64(parts[2], "a note's signature")
        if len(signature) < 5:
            raise LogError("a note's signature is too short")
        signatures.append((check_key_name(parts[1]), signature))
    return text, signatures


# --- checkpoints -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's tree head: origin, size and RFC 6962 root (C2SP tlog-checkpoint)."""

    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        """The note text: three lines, no extension lines."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode('ascii')}\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """A checkpoint's note text. Extension lines are opaque, and ignored."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise LogError("a checkpoint is at least three non-empty lines: origin, size, root")
        origin, size, root = lines[:3]
        if not _SIZE.fullmatch(size) or int(size) > MAX_TREE_SIZE:
            raise LogError(f"the checkpoint's tree size {shown(size)!r} is not a number")
        raw = decode_base64(root, "the checkpoint's root hash")
        if len(raw) != HASH_SIZE:
            raise LogError("the checkpoint's root hash is not 32 bytes")
        return cls(origin, int(size), raw)

    def sign(self, signer: NoteSigner) -> str:
        return signer.sign(self.text())


def open_checkpoint(note: str, verifier: NoteVerifier) -> Checkpoint:
    """A checkpoint whose signature by `verifier` holds, or `LogError`."""
    return Checkpoint.parse(verifier.open(note))


THROWAWAY_HOST: Final = "tms.invalid"  # RFC 2606: a name no server has


def log_origin(host: str, slug: str) -> str:
    """A collection's log is named `<host>/c/<slug>`: the schema-less URL prefix its tiles are
    served under, as tlog-tiles recommends."""
    return f"{host}/c/{slug}"


def origin_slug(origin: str) -> str | None:
    """The collection a TMS log origin names, or None if it names none."""
    _, sep, slug = origin.rpartition("/c/")
    return slug if sep and SLUG_PATTERN.fullmatch(slug) else None


@dataclass(frozen=True, slots=True)
class LogSigner:
    """The server's checkpoint key and the host its log origins are named after."""

    key: NoteSigner
    host: str

    @classmethod
    def throwaway(cls) -> LogSigner:
        """A key that lives as long as the object: for tests and for operator commands that
        never publish. A server always signs with its configured key (`tms.config`). Its host
        is `THROWAWAY_HOST`, which the ledger never records as a database's origin."""
        return cls(NoteSigner.generate(THROWAWAY_HOST), THROWAWAY_HOST)

    def origin(self, slug: str) -> str:
        return log_origin(self.host, slug)

    def sign(self, slug: str, size: int, root: bytes) -> str:
        return Checkpoint(self.origin(slug), size, root).sign(self.key)
