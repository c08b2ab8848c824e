"""Signed requests (kind 4707): how a bot proves who is calling a tool, with no bearer token.

The checks, in SPEC's order (single use is the store's job, see `tms.ledger.request_log`):

1. the envelope is NIP-01 and the signature verifies;
2. it is a kind 4707 event whose content is `{"tool": ..., "args": {...}}`;
3. `tool` names the tool being called;
4. `created_at` is within 60 seconds of the server's clock.

The tool's arguments are taken from the signed content only; arguments sent beside the request
are refused rather than ignored, so a caller never believes unsigned input was used.
Pure: the clock comes in as `now`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tms.errors import InvalidEvent, Refusal, RequestError
from tms.nostr.events import Event
from tms.rules.kinds import Request, validate_content
from tms.types import KIND_REQUEST, EventId, PubKey, Sig

REQUEST_WINDOW_SECONDS: Final = 60


@dataclass(frozen=True, slots=True)
class SignedRequest:
    id: EventId
    pubkey: PubKey
    created_at: int
    sig: Sig
    args: dict[str, Any]


def request_from_arguments(tool: str, arguments: Mapping[str, Any]) -> object:
    """The `request` among a tool call's arguments; anything beside it is refused."""
    extra = sorted(name for name in arguments if name != "request")
    if extra:
        names = ", ".join(f"'{name}'" for name in extra)
        raise RequestError(
            f"{tool} takes only a signed `request`, but the call also sent {names}: "
            "pass the arguments inside its signed content (`args`)"
        )
    if "request" not in arguments:
        raise RequestError(
            f"{tool} needs a signed `request`: a kind 4707 event whose content is "
            f'{{"tool": "{tool}", "args": {{...}}}}'
        )
    return arguments["request"]


def check_request(obj: object, tool: str, now: int) -> SignedRequest:
    # 1. envelope and signature
    try:
        event = Event.from_dict(obj)
        event.verify()
    except InvalidEvent as exc:
        raise RequestError(f"request: {exc}").refused_as(exc.refusal) from None
    # 2. kind and content
    if event.kind != KIND_REQUEST:
        raise RequestError(
            f"request: field 'kind' is invalid: a request is kind {KIND_REQUEST}, not {event.kind}"
        )
    try:
        content = validate_content(event)
    except InvalidEvent as exc:
        raise RequestError(f"request: {exc}") from None
    assert isinstance(content, Request)
    # 3. the tool it was signed for
    if content.tool != tool:
        raise RequestError(
            f"request was signed for tool '{_shown(content.tool)}', not '{tool}'; "
            "sign a request naming the tool you call"
        )
    # 4. freshness
    skew = event.created_at - now
    if abs(skew) > REQUEST_WINDOW_SECONDS:
        direction = "ahead of" if skew > 0 else "behind"
        raise RequestError(
            f"request created_at is {abs(skew)} s {direction} server time, more than "
            f"{REQUEST_WINDOW_SECONDS}s from server time: sign a fresh request and check the "
            "signer's clock"
        ).refused_as(Refusal.STALE, event.pubkey)
    return SignedRequest(event.id, event.pubkey, event.created_at, event.sig, dict(content.args))


def _shown(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"
