"""NIP-01's messages: what a client may send, parsed within bounds, and what the relay sends.

A client message is parsed once, with the shape checks `tms.nostr.events.loads_bounded` makes
(so a cheap message can never be dear to parse), into one of five kinds. What is wrong with it is
said back in NIP-01's words: a `ProtocolError` becomes a NOTICE, a `Refused` a CLOSED naming the
subscription, each with a machine-readable prefix (`invalid:`, ...) and the number of any limit
passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from tms.errors import shown
from tms.nostr.events import is_hex64, loads_bounded
from tms.nostr.filters import MAX_IDS, MAX_LISTED_IDS, Filter, FilterError, parse_filter
from tms.relay import neg_messages
from tms.relay.limits import MAX_FILTERS, MAX_LIMIT, MAX_MESSAGE_BYTES, MAX_SUBID_CHARS
from tms.relay.neg_messages import NegMessage

MAX_CONTAINERS: Final = 2_000  # arrays and objects in one message: an event has 1,002 at most
MAX_VALUES: Final = MAX_IDS + 1_000  # values in one message, about: a REQ of `MAX_IDS` ids
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class ProtocolError(ValueError):
    """A message the relay cannot take at all: answered with a NOTICE (or an OK, for an EVENT
    whose id can be read)."""

    def __init__(self, message: str, event_id: str | None = None) -> None:
        super().__init__(message)
        self.event_id = event_id


class Refused(ValueError):
    """A REQ or COUNT the relay will not run: answered with CLOSED for its subscription."""

    def __init__(self, sub_id: str, message: str) -> None:
        super().__init__(message)
        self.sub_id = sub_id


@dataclass(frozen=True, slots=True)
class EventMessage:
    event: dict[str, object]
    id: str


@dataclass(frozen=True, slots=True)
class AuthMessage:
    event: object


@dataclass(frozen=True, slots=True)
class ReqMessage:
    sub_id: str
    filters: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class CountMessage:
    sub_id: str
    filters: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class CloseMessage:
    sub_id: str


ClientMessage = EventMessage | AuthMessage | ReqMessage | CountMessage | CloseMessage | NegMessage


def parse(text: str) -> ClientMessage:
    """One client message, or `ProtocolError` / `Refused`."""
    if len(text) > MAX_MESSAGE_BYTES // 4 and _utf8_bytes(text) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"invalid: the message is over this relay's max_message_length, "
            f"{MAX_MESSAGE_BYTES:,} bytes"
        )
    try:
        data = loads_bounded(text, max_containers=MAX_CONTAINERS, max_values=MAX_VALUES)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"invalid: the message is not JSON this relay takes: {exc}") from None
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ProtocolError(
            'invalid: a message is a JSON array whose first element names its type ("EVENT", '
            '"REQ", "CLOSE", "COUNT" or "AUTH")'
        )
    verb = data[0]
    if verb == "EVENT":
        return _event(data)
    if verb == "AUTH":
        if len(data) != 2:
            raise ProtocolError('invalid: AUTH is ["AUTH", <signed kind 22242 event>]')
        return AuthMessage(data[1])
    if verb in ("REQ", "COUNT"):
        return _request(verb, data)
    if verb == "CLOSE":
        if len(data) != 2:
            raise ProtocolError('invalid: CLOSE is ["CLOSE", <subscription id>]')
        return CloseMessage(_sub_id(data[1]))
    if verb in neg_messages.VERBS:  # NIP-77
        return neg_messages.parse(verb, data, _sub_id, ProtocolError)
    raise ProtocolError(
        f"invalid: unknown message type {shown(verb, 32)!r}: this relay takes EVENT, REQ, "
        "CLOSE, COUNT, AUTH, NEG-OPEN, NEG-MSG and NEG-CLOSE"
    )


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _event(data: list[object]) -> EventMessage:
    event = data[1] if len(data) == 2 else None
    event_id = event.get("id") if isinstance(event, dict) else None
    if not is_hex64(event_id):
        raise ProtocolError(
            'invalid: EVENT is ["EVENT", <signed event>], and the event needs its 64-character '
            "hex id"
        )
    assert isinstance(event, dict) and isinstance(event_id, str)
    return EventMessage(event, event_id)


def _request(verb: str, data: list[object]) -> ReqMessage | CountMessage:
    if len(data) < 3:
        raise ProtocolError(f'invalid: {verb} is ["{verb}", <subscription id>, <filter>, ...]')
    sub_id = _sub_id(data[1])
    raw = data[2:]
    if len(raw) > MAX_FILTERS:
        raise Refused(sub_id, f"invalid: {len(raw)} filters; at most {MAX_FILTERS} in one {verb}")
    try:
        most = MAX_IDS if verb == "REQ" else MAX_LISTED_IDS  # a COUNT reads them all at once
        filters = tuple(parse_filter(obj, max_limit=MAX_LIMIT, max_ids=most) for obj in raw)
    except FilterError as exc:
        raise Refused(sub_id, f"invalid: {exc}") from None
    return ReqMessage(sub_id, filters) if verb == "REQ" else CountMessage(sub_id, filters)


def _sub_id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_SUBID_CHARS:
        raise ProtocolError(
            f"invalid: a subscription id is a non-empty string of at most {MAX_SUBID_CHARS} "
            f"characters; got {shown(value, 80)}"
        )
    return shown(value, MAX_SUBID_CHARS)  # sent back as is, so it must be sendable


# --- what the relay sends ----------------------------------------------------------------------


def dumps(value: object) -> str:
    return _ENCODER.encode(value)


def ok(event_id: str, accepted: bool, message: str) -> str:
    return dumps(["OK", event_id, accepted, message])


def event(sub_id: str, event_json: str) -> str:
    """An EVENT for a subscription; the event's JSON is made once and shared by every one."""
    return f'["EVENT",{dumps(sub_id)},{event_json}]'


def eose(sub_id: str) -> str:
    return dumps(["EOSE", sub_id])


def closed(sub_id: str, message: str) -> str:
    return dumps(["CLOSED", sub_id, message])


def notice(message: str) -> str:
    return dumps(["NOTICE", message])


def auth(challenge: str) -> str:
    return dumps(["AUTH", challenge])


def count(sub_id: str, number: int) -> str:
    return dumps(["COUNT", sub_id, {"count": number}])
