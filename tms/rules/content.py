"""What every kind's content is made of: the field types SPEC's table uses (non-blank strings,
slugs, event ids, pubkeys), the strict base of the content models, and the checks every content
string passes before its model sees it (size, JSON shape, what no database text can hold).
Errors come out in SPEC's three phrasings: `unknown fields`, `is missing` and `field '...' is
invalid`, always naming the field. The models themselves and their registry: `tms.rules.kinds`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from tms.errors import InvalidEvent, shown
from tms.nostr.events import Event, is_hex64, loads_bounded
from tms.nostr.keys import is_valid_pubkey
from tms.types import MAX_CONTENT_CHARS, MAX_FUTURE_SECONDS

SLUG_PATTERN: Final = re.compile(r"[a-z0-9_-]{1,64}")
# The shape a content's JSON may have: far beyond any kind's fields (a proof of 1,000 steps in a
# request's args is about 2,000 arrays and objects), far below what makes parsing costly.
MAX_CONTENT_CONTAINERS: Final = 20_000
MAX_CONTENT_VALUES: Final = 200_000


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
Sha256Field = Annotated[str, AfterValidator(_sha256)]
DISTINCT: Final = AfterValidator(_distinct)  # a list naming nothing twice


class Strict(BaseModel):
    """Unknown fields refused, types exact: every kind's content but profiles'."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


def parse_object(name: str, content: str) -> dict[str, Any]:
    """A content string as the JSON object it must be, refused in SPEC's words when it is too
    long, not an object, deeper or wider than any kind needs, or holds what no database text
    can; `name` is the kind's, for the message."""
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidEvent(
            f"field 'content' is invalid: {len(content):,} characters is more than "
            f"{MAX_CONTENT_CHARS:,}; split longer documents",
            "content",
        )
    try:
        obj = loads_bounded(
            content, max_containers=MAX_CONTENT_CONTAINERS, max_values=MAX_CONTENT_VALUES
        )
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
                f"field '{shown(key)}' is invalid in {name} content: {problem}",
                f"content.{shown(key)}",
            )
    return obj


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


_TYPE_WORDS: Final = {
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a JSON object",
    "too_short": "must list at least two distinct claim ids",
}


def translate_error(where: str, exc: ValidationError) -> InvalidEvent:
    """Pydantic's first error in SPEC's phrasing; `where` is what was validated ("claim
    content", "search_claims args")."""
    errors = exc.errors()
    unknown = [shown(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        names = ", ".join(f"'{field}'" for field in unknown[:10])
        return InvalidEvent(f"unknown fields in {where}: {names}", f"content.{unknown[0]}")
    error = errors[0]
    field = shown(error["loc"][0]) if error["loc"] else "content"
    if error["type"] == "missing":
        return InvalidEvent(f"field '{field}' is missing from {where}", f"content.{field}")
    if error["type"] == "literal_error":
        reason = "must be " + str(error.get("ctx", {}).get("expected", "")).replace("'", "")
    elif error["type"] in ("too_long", "string_too_long"):
        # pydantic's "at most 10000 items after validation", as SPEC words a limit
        most = error.get("ctx", {}).get("max_length")
        unit = "characters" if isinstance(error.get("input"), str) else "items"
        reason = f"longer than {most:,} {unit}" if isinstance(most, int) else error["msg"]
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
