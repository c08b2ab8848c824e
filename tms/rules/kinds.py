"""Content schemas, one strict pydantic model per kind, as SPEC.md's table defines them.

`validate_content` turns pydantic's errors into the three phrasings users are told to look for:
`unknown fields`, `is missing` and `field '...' is invalid`, always naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from tms.errors import InvalidEvent
from tms.nostr.events import Event, is_hex64, loads_strict
from tms.nostr.keys import is_valid_pubkey
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    KIND_MEMBERS,
    KIND_NAMES,
    KIND_PROFILE,
    KIND_REQUEST,
    KIND_TERMS,
    MAX_CONTENT_CHARS,
    MAX_FUTURE_SECONDS,
)

SLUG_PATTERN: Final = re.compile(r"[a-z0-9_-]{1,64}")


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


def _slug(value: str) -> str:
    if not SLUG_PATTERN.fullmatch(value):
        raise PydanticCustomError("slug", "must be 1 to 64 lowercase letters, digits, '-' or '_'")
    return value


def _event_id(value: str) -> str:
    if not is_hex64(value):
        raise PydanticCustomError("event_id", "must be an event id (64 lowercase hex characters)")
    return value


def _sha256(value: str) -> str:
    if not is_hex64(value):
        raise PydanticCustomError(
            "sha256", "must be 64 lowercase hex characters (the sha256 in GET /terms)"
        )
    return value


def _pubkey(value: str) -> str:
    if not is_valid_pubkey(value):
        raise PydanticCustomError(
            "pubkey", "must be a public key (64 lowercase hex characters, a point on secp256k1)"
        )
    return value


def _distinct(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise PydanticCustomError("distinct", "must not list the same id twice")
    return values


NonBlank = Annotated[str, AfterValidator(_not_blank)]
CollectionSlug = Annotated[str, AfterValidator(_slug)]
EventIdField = Annotated[str, AfterValidator(_event_id)]
PubKeyField = Annotated[str, AfterValidator(_pubkey)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class Profile(BaseModel):
    """Kind 0. Other Nostr clients add their own fields, so unknown ones are kept, not refused."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: NonBlank
    about: str | None = None
    picture: str | None = None


class Evidence(_Strict):
    collection: CollectionSlug
    text: NonBlank
    url: str | None = None
    title: str | None = None
    source: str | None = None


class Claim(_Strict):
    collection: CollectionSlug
    text: NonBlank


class Link(_Strict):
    collection: CollectionSlug
    from_: EventIdField = Field(alias="from")
    to: EventIdField
    relation: Literal["SUPPORTS", "REBUTS", "QUALIFIES"]
    quote: NonBlank
    reason: NonBlank


class Contradiction(_Strict):
    collection: CollectionSlug
    claims: Annotated[list[EventIdField], Field(min_length=2), AfterValidator(_distinct)]
    reason: NonBlank


class Members(_Strict):
    collection: CollectionSlug
    members: Annotated[list[PubKeyField], AfterValidator(_distinct)]


class Terms(_Strict):
    version: NonBlank
    sha256: Annotated[str, AfterValidator(_sha256)]


class Request(_Strict):
    tool: NonBlank
    args: dict[str, Any]


Content = Profile | Evidence | Claim | Link | Contradiction | Members | Terms | Request

SCHEMAS: Final[dict[int, type[Content]]] = {
    KIND_PROFILE: Profile,
    KIND_EVIDENCE: Evidence,
    KIND_CLAIM: Claim,
    KIND_LINK: Link,
    KIND_CONTRADICTION: Contradiction,
    KIND_MEMBERS: Members,
    KIND_TERMS: Terms,
    KIND_REQUEST: Request,
}

_TYPE_WORDS: Final = {
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a JSON object",
    "too_short": "must list at least two distinct claim ids",
}
_KNOWN_KINDS: Final = "0 (profile) or 4701-4707"


def validate_content(event: Event) -> Content:
    """Check an event's kind, tags and content against SPEC's table; return the typed content."""
    name = KIND_NAMES.get(event.kind)
    schema = SCHEMAS.get(event.kind)
    if name is None or schema is None:
        raise InvalidEvent(
            f"field 'kind' is invalid: {event.kind} is not a TMS kind ({_KNOWN_KINDS})", "kind"
        )
    if event.kind != KIND_PROFILE and event.tags:
        raise InvalidEvent(f"tags must be [] on a {name} event; only profiles carry tags", "tags")
    return parse_content(event.kind, event.content)


def parse_content(kind: int, content: str) -> Content:
    """Parse a content string for a known kind (`validate_content` checks the kind first)."""
    name = KIND_NAMES[kind]
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidEvent(
            f"field 'content' is invalid: {len(content):,} characters is more than "
            f"{MAX_CONTENT_CHARS:,}; split longer documents",
            "content",
        )
    try:
        obj = loads_strict(content)
    except (ValueError, RecursionError) as exc:
        raise InvalidEvent(
            f"field 'content' is invalid: not a JSON object serialized as a string ({exc})",
            "content",
        ) from None
    if not isinstance(obj, dict):
        raise InvalidEvent(
            "field 'content' is invalid: must be a JSON object serialized as a string", "content"
        )
    for key, value in obj.items():
        problem = _unstorable(key) or _unstorable(value)
        if problem:
            raise InvalidEvent(
                f"field '{key}' is invalid in {name} content: {problem}", f"content.{key}"
            )
    try:
        return SCHEMAS[kind].model_validate(obj)
    except ValidationError as exc:
        raise translate_error(f"{name} content", exc) from None


def _unstorable(value: object) -> str | None:
    """What JSON escapes can smuggle into a decoded string that no database text can hold:
    `\\u0000`, and `\\ud800` without its pair (which is not Unicode at all)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "contains U+0000 (NUL), which cannot be stored"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "contains a lone UTF-16 surrogate"
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def translate_error(where: str, exc: ValidationError) -> InvalidEvent:
    """Pydantic's first error in SPEC's phrasing; `where` is what was validated ("claim
    content", "search_claims args")."""
    errors = exc.errors()
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        names = ", ".join(f"'{field}'" for field in unknown)
        return InvalidEvent(f"unknown fields in {where}: {names}", f"content.{unknown[0]}")
    error = errors[0]
    field = str(error["loc"][0]) if error["loc"] else "content"
    if error["type"] == "missing":
        return InvalidEvent(f"field '{field}' is missing from {where}", f"content.{field}")
    if error["type"] == "literal_error":
        reason = "must be " + str(error.get("ctx", {}).get("expected", "")).replace("'", "")
    else:
        reason = _TYPE_WORDS.get(error["type"], error["msg"])
    if len(error["loc"]) > 1 and isinstance(error["loc"][1], int):
        reason = f"item {error['loc'][1] + 1} {reason}"
    return InvalidEvent(f"field '{field}' is invalid in {where}: {reason}", f"content.{field}")


def check_created_at(event: Event, now: int) -> None:
    """A stored event may be at most 15 minutes ahead of the server's clock: a replaceable event
    signed far in the future by a skewed clock would otherwise win every later update."""
    if event.created_at > now + MAX_FUTURE_SECONDS:
        raise InvalidEvent(
            f"field 'created_at' is invalid: {event.created_at - now} s ahead of server time "
            f"(at most {MAX_FUTURE_SECONDS} s allowed); check the signer's clock",
            "created_at",
        )
