"""The NIP-01 event envelope: parse, identify, verify and sign.

Kept free of content schemas (see `tms.rules.kinds`) so that the hot path of a 1,000-event batch
is a few dictionary look-ups, one sha256 and one BIP-340 verification per event.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _encode_string
from typing import Any, Final

from coincurve import PrivateKey, PublicKeyXOnly

from tms.errors import InvalidEvent, InvalidKey, shown
from tms.types import EventId, Kind, PubKey, Sig

FIELDS: Final = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
# The one field past NIP-01's an envelope may carry: the HTTP body a NIP-98 event (kind 27235)
# authorized, whose SHA-256 its `payload` tag signs (a membership change, docs/architecture.md).
# Nostr libraries verify the seven fields and ignore it. NIP-43's join and leave requests (kinds
# 28934, 28936) carry in it the NIP-42 AUTH event (kind 22242, JSON) by which their signer named
# the collection's relay: what ties a request that names no relay to one collection.
BODY: Final = "body"
KIND_HTTP_AUTH: Final = 27235
BODY_KINDS: Final = frozenset((KIND_HTTP_AUTH, 28934, 28936))
MAX_BODY_CHARS: Final = 4096
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
MAX_CREATED_AT: Final = 2**53 - 1  # beyond this JSON.stringify no longer round-trips integers
MAX_KIND: Final = 65535
MAX_TAGS: Final = 1_000  # tags on one event (only profiles carry any: a handful)
MAX_TAG_CHARS: Final = 100_000  # characters in all of one event's tags
# How deep JSON may nest, in a body, an envelope or a content: a publish body is 6 deep and a
# proof in a request's content 5, while Python's parser gives out near 1,000.
MAX_DEPTH: Final = 64

# Parsing a public key costs about a quarter of a verification; batches mostly come from a few
# authors, so keep the parsed points of recent ones.
_KEY_CACHE: dict[str, PublicKeyXOnly] = {}
_KEY_CACHE_SIZE: Final = 4096
# Built once: `json.dumps` with options constructs a new encoder on every call.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def is_hex64(value: object) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def serialize_for_id(
    pubkey: PubKey, created_at: int, kind: Kind, tags: Sequence[Sequence[str]], content: str
) -> bytes:
    """The NIP-01 commitment `[0,pubkey,created_at,kind,tags,content]`, byte-identical to
    `JSON.stringify` for strings without lone surrogates (which `check_text` rejects first).

    Assembled by hand around the C string encoder: this runs once per event in every batch, and
    a general `json.dumps` of the list costs more than twice as much.
    """
    tag_json = "[]" if not tags else _COMPACT.encode(tags)
    return (
        f"[0,{_encode_string(pubkey)},{int(created_at)},{int(kind)},{tag_json},"
        f"{_encode_string(content)}]"
    ).encode()


def compute_id(
    pubkey: PubKey, created_at: int, kind: Kind, tags: Sequence[Sequence[str]], content: str
) -> EventId:
    return hashlib.sha256(serialize_for_id(pubkey, created_at, kind, tags, content)).hexdigest()


def check_text(value: str, field: str) -> None:
    """Reject lone UTF-16 surrogates: `JSON.stringify` escapes them and we could not agree with
    any JavaScript client on the id, and they are not valid UTF-8 so could never be stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEvent(
            f"field '{field}' is invalid: contains a lone UTF-16 surrogate", field
        ) from None


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key '{key}'")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_STRICT_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
)


def loads_strict(text: str | bytes) -> Any:
    """JSON as RFC 8259 means it: no NaN or Infinity, and no duplicate keys, because two
    parsers that pick different duplicates would read one signed text two ways."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _STRICT_DECODER.decode(text)


_STRUCTURE: Final = re.compile(r'["\[\]{},]')


def loads_bounded(
    text: str | bytes, *, max_containers: int, max_values: int, max_depth: int = MAX_DEPTH
) -> Any:
    """`loads_strict`, after making sure the text holds at most `max_containers` arrays and
    objects, about `max_values` values, and nests at most `max_depth` deep, so its cost is
    bounded by its shape as well as its size: `[[],[],...]` is cheap to send and dear to build
    (two million empty lists from 6 MB), and `[[[[...` deep enough exhausts the parser's stack.

    Counting the characters first is exact enough for almost every text (a bracket or comma in
    a string only overcounts); only a text over the limits by that count (or with more brackets
    than `max_depth`, the only way to nest that deep) is scanned properly, skipping strings in
    C, and refused at the first count past a limit."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    containers = text.count("[") + text.count("{")
    if (
        containers > max_containers
        or text.count(",") > max_values
        or (containers > max_depth and _bracket_depth(text) > max_depth)
    ):
        _check_shape(text, max_containers, max_values, max_depth)
    return _STRICT_DECODER.decode(text)


_NOT_BRACKETS: Final = bytes(set(range(256)) - set(b"[]{}"))
_DEPTH_STEP: Final = [
    {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}.get(b, 0) for b in range(256)
]


def _bracket_depth(text: str) -> int:
    """How deep the brackets nest, counting those inside strings too (so at least the true
    depth), mostly in C: a cheap test before the exact scan."""
    brackets = text.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _check_shape(text: str, max_containers: int, max_values: int, max_depth: int) -> None:
    containers = values = depth = 0
    position = 0
    search = _STRUCTURE.search
    while (found := search(text, position)) is not None:
        char = found.group()
        if char == '"':
            try:
                position = scanstring(text, found.end())[1]
            except ValueError:
                return  # not JSON after all: the parser says where
            continue
        position = found.end()
        if char == ",":
            values += 1
            if values > max_values:
                raise ValueError(f"more than {max_values:,} values")
        elif char in "]}":
            depth -= 1
        else:
            containers += 1
            depth += 1
            if containers > max_containers:
                raise ValueError(f"more than {max_containers:,} arrays and objects")
            if depth > max_depth:
                raise ValueError(f"arrays and objects nested more than {max_depth} deep")


def _public_key(pubkey: PubKey) -> PublicKeyXOnly:
    key = _KEY_CACHE.get(pubkey)
    if key is None:
        try:
            key = PublicKeyXOnly(bytes.fromhex(pubkey))
        except ValueError:
            raise InvalidEvent(
                "field 'pubkey' is invalid: not a point on secp256k1", "pubkey"
            ) from None
        if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:
            _KEY_CACHE.clear()
        _KEY_CACHE[pubkey] = key
    return key


@dataclass(frozen=True, slots=True)
class Event:
    """A signed event exactly as its author sent it. `content` is never re-serialized."""

    id: EventId
    pubkey: PubKey
    created_at: int
    kind: Kind
    tags: list[list[str]]
    content: str
    sig: Sig
    # kind 27235: the request body its `payload` tag hashes; kinds 28934 and 28936 (NIP-43's join
    # and leave): the signer's NIP-42 AUTH event naming the collection's relay
    body: str | None = None

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        try:
            obj = loads_bounded(text, max_containers=MAX_TAGS + 2, max_values=MAX_TAG_CHARS)
        except (ValueError, RecursionError) as exc:
            raise InvalidEvent(f"event is not valid JSON: {exc}") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: object) -> Event:
        """Check the envelope's shape (not its id or signature: see `verify`)."""
        # A parsed JSON object is a dict: asked first, as isinstance of an ABC costs eight times
        # as much, on every event.
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise InvalidEvent("event must be a JSON object")
        try:
            event_id, pubkey, sig = obj["id"], obj["pubkey"], obj["sig"]
            created_at, kind, tags, content = (
                obj["created_at"],
                obj["kind"],
                obj["tags"],
                obj["content"],
            )
        except KeyError:
            missing = next(name for name in FIELDS if name not in obj)
            raise InvalidEvent(f"field '{missing}' is missing", missing) from None
        body = obj.get(BODY) if type(kind) is int and kind in BODY_KINDS else None
        if len(obj) != len(FIELDS) + (body is not None):
            unknown = sorted(shown(name) for name in obj if name not in FIELDS)
            names = ", ".join(f"'{name}'" for name in unknown[:10])
            raise InvalidEvent(f"unknown fields in event: {names}", unknown[0])
        if not is_hex64(event_id):
            raise InvalidEvent(_hex_message("id", 64), "id")
        if not is_hex64(pubkey):
            raise InvalidEvent(_hex_message("pubkey", 64), "pubkey")
        if not (isinstance(sig, str) and _HEX128.fullmatch(sig)):
            raise InvalidEvent(_hex_message("sig", 128), "sig")
        if type(created_at) is not int or not 0 <= created_at <= MAX_CREATED_AT:
            raise InvalidEvent(
                "field 'created_at' is invalid: must be an integer number of seconds "
                f"between 0 and {MAX_CREATED_AT}",
                "created_at",
            )
        if type(kind) is not int or not 0 <= kind <= MAX_KIND:
            raise InvalidEvent(
                f"field 'kind' is invalid: must be an integer between 0 and {MAX_KIND}", "kind"
            )
        if not isinstance(content, str):
            raise InvalidEvent("field 'content' is invalid: must be a string", "content")
        check_text(content, "content")
        if body is not None:
            if not isinstance(body, str) or len(body) > MAX_BODY_CHARS:
                raise InvalidEvent(
                    f"field 'body' is invalid: must be a string of at most {MAX_BODY_CHARS:,} "
                    "characters",
                    "body",
                )
            check_text(body, "body")
        return cls(event_id, pubkey, created_at, kind, _check_tags(tags), content, sig, body)

    def expected_id(self) -> EventId:
        return compute_id(self.pubkey, self.created_at, self.kind, self.tags, self.content)

    def verify(self) -> None:
        """NIP-01 step by step: 1. the id commits to the fields; 2. the signature is the
        pubkey's over that id. Raises `InvalidEvent` naming the field that fails."""
        if self.expected_id() != self.id:
            raise InvalidEvent(
                "id does not match the sha256 of the serialized event "
                "(was content re-serialized after signing?)",
                "id",
            )
        if not _public_key(self.pubkey).verify(bytes.fromhex(self.sig), bytes.fromhex(self.id)):
            raise InvalidEvent("signature does not verify for this pubkey and id", "sig")

    def to_dict(self) -> dict[str, Any]:
        fields = {
            "id": self.id,
            "pubkey": self.pubkey,
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": self.tags,
            "content": self.content,
            "sig": self.sig,
        }
        if self.body is not None:
            fields[BODY] = self.body
        return fields

    def to_json(self) -> str:
        """One line of JSON that any Nostr library verifies: same fields, same content string."""
        return _COMPACT.encode(self.to_dict())


def _hex_message(field: str, length: int) -> str:
    return f"field '{field}' is invalid: must be {length} lowercase hex characters"


def _check_tags(tags: object) -> list[list[str]]:
    if not isinstance(tags, list):
        raise InvalidEvent("field 'tags' is invalid: must be a list of lists of strings", "tags")
    if len(tags) > MAX_TAGS:
        raise InvalidEvent(
            f"field 'tags' is invalid: {len(tags):,} tags, more than {MAX_TAGS:,}", "tags"
        )
    chars = 0
    for tag in tags:
        if not isinstance(tag, list) or not all(isinstance(item, str) for item in tag):
            raise InvalidEvent(
                "field 'tags' is invalid: must be a list of lists of strings", "tags"
            )
        for item in tag:
            chars += len(item) + 1  # an empty string costs a little too
            check_text(item, "tags")
        if chars > MAX_TAG_CHARS:
            raise InvalidEvent(
                f"field 'tags' is invalid: more than {MAX_TAG_CHARS:,} characters in all",
                "tags",
            )
    return tags


class SecretKey:
    """A BIP-340 signing key. Holds the secret and nothing else; never logged or printed."""

    __slots__ = ("_key", "pubkey")

    def __init__(self, secret: bytes) -> None:
        try:
            self._key = PrivateKey(secret)
        except (ValueError, TypeError):
            raise InvalidKey("secret key is not a valid secp256k1 scalar") from None
        self.pubkey: PubKey = PublicKeyXOnly.from_secret(self._key.secret).format().hex()

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(PrivateKey().secret)

    @property
    def secret(self) -> bytes:
        return bytes(self._key.secret)

    def __repr__(self) -> str:
        return f"SecretKey(pubkey={self.pubkey})"

    def sign(
        self,
        kind: Kind,
        content: str,
        created_at: int,
        tags: Sequence[Sequence[str]] = (),
        *,
        aux: bytes | None = None,
    ) -> Event:
        """Sign with fresh auxiliary randomness, as BIP-340 recommends against side channels;
        or with `aux` (32 bytes), for a signer that must sign the same event the same way each
        time (the relay's own views of its members, `tms.rules.member_views`)."""
        tag_list = [list(tag) for tag in tags]
        check_text(content, "content")
        event_id = compute_id(self.pubkey, created_at, kind, tag_list, content)
        randomness = os.urandom(32) if aux is None else aux
        sig = self._key.sign_schnorr(bytes.fromhex(event_id), randomness).hex()
        return Event(event_id, self.pubkey, created_at, kind, tag_list, content, sig)


def compact_json(value: Any) -> str:
    """JSON as `JSON.stringify` writes it: compact, UTF-8. How we serialize content before
    signing, and tags for storage."""
    return _COMPACT.encode(value)
