"""NIP-77's messages: NEG-OPEN, NEG-MSG and NEG-CLOSE as a client sends them, parsed within
bounds, and NEG-MSG and NEG-ERR as the relay sends them.

Its own module beside `tms.relay.messages`, which hands it the four verbs; it needs nothing of
that module but the subscription id check, handed in, so neither imports the other's parts.
A NEG subscription id is checked as a REQ's is, but lives in a namespace of its own
(`tms.relay.negentropy`). What is wrong after the id is known is a `NegRefused`: answered with
NEG-ERR for that id, as NIP-77 says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tms.nostr.filters import MAX_LISTED_IDS, Filter, FilterError, parse_filter
from tms.relay.limits import MAX_LIMIT, MAX_NEG_MESSAGE_BYTES

VERBS: Final = frozenset({"NEG-OPEN", "NEG-MSG", "NEG-CLOSE"})
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class NegRefused(ValueError):
    """A NEG message the relay will not take: answered with NEG-ERR for its subscription."""

    def __init__(self, sub_id: str, message: str) -> None:
        super().__init__(message)
        self.sub_id = sub_id


@dataclass(frozen=True, slots=True)
class NegOpen:
    sub_id: str
    filter: Filter
    message: bytes


@dataclass(frozen=True, slots=True)
class NegMsg:
    sub_id: str
    message: bytes


@dataclass(frozen=True, slots=True)
class NegClose:
    sub_id: str


NegMessage = NegOpen | NegMsg | NegClose


def parse(
    verb: str,
    data: list[object],
    sub_id: Callable[[object], str],
    invalid: Callable[[str], Exception],
) -> NegMessage:
    """One NEG message (`data[0]` is `verb`); `sub_id` checks a subscription id, `invalid` makes
    the error of a message whose id cannot be known."""
    if verb == "NEG-OPEN":
        if len(data) != 4:
            raise invalid(
                'invalid: NEG-OPEN is ["NEG-OPEN", <subscription id>, <filter>, '
                "<hex Negentropy message>]"
            )
        sid = sub_id(data[1])
        raw = data[2]
        if isinstance(raw, list):  # NDK's sync sends its filter in an array: one is taken
            if len(raw) != 1:
                raise NegRefused(
                    sid, f"invalid: NEG-OPEN takes one filter, not {len(raw)}: sync each alone"
                )
            raw = raw[0]
        try:
            wanted = parse_filter(raw, max_limit=MAX_LIMIT, max_ids=MAX_LISTED_IDS)
        except FilterError as exc:
            raise NegRefused(sid, f"invalid: {exc}") from None
        if wanted.search is not None:
            raise NegRefused(sid, "invalid: NEG-OPEN does not take search (NIP-50)")
        return NegOpen(sid, wanted, _hex(sid, data[3]))
    if verb == "NEG-MSG":
        if len(data) != 3:
            raise invalid('invalid: NEG-MSG is ["NEG-MSG", <subscription id>, <hex message>]')
        sid = sub_id(data[1])
        return NegMsg(sid, _hex(sid, data[2]))
    if len(data) != 2:
        raise invalid('invalid: NEG-CLOSE is ["NEG-CLOSE", <subscription id>]')
    return NegClose(sub_id(data[1]))


def _hex(sub_id: str, value: object) -> bytes:
    if isinstance(value, str) and len(value) // 2 > MAX_NEG_MESSAGE_BYTES:
        raise NegRefused(
            sub_id,
            f"blocked: a Negentropy message of {len(value) // 2:,} bytes is over this relay's "
            f"{MAX_NEG_MESSAGE_BYTES:,}: use a smaller frameSizeLimit",
        )
    if not isinstance(value, str) or len(value) % 2 or not _HEX.issuperset(value):
        raise NegRefused(
            sub_id, "invalid: a Negentropy message is a string of hex digits, two per byte"
        )
    return bytes.fromhex(value)


def neg_msg(sub_id: str, message: bytes) -> str:
    return f'["NEG-MSG",{_ENCODER.encode(sub_id)},"{message.hex()}"]'


def neg_err(sub_id: str, reason: str) -> str:
    return _ENCODER.encode(["NEG-ERR", sub_id, reason])
