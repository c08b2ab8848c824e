"""NIP-42 authentication of a client to a relay: `["AUTH", <kind 22242 event>]` answering the
relay's challenge.

Pure, like `tms.nostr.nip98`: the caller passes the event as the client sent it, the challenge
it was given, this relay's URL and the server's clock; the answer is the signer's key or an
`AuthError` saying what to fix. The checks (https://github.com/nostr-protocol/nips/blob/master/42.md):
a valid NIP-01 envelope whose id and signature verify, kind 22242, `created_at` within
`MAX_AGE_SECONDS` of server time, exactly one `challenge` tag equal to the challenge, and
exactly one `relay` tag naming this relay. Relay URLs are compared after the normalisation
clients apply (nostr-tools' `normalizeURL`: http(s) as ws(s), lower-case scheme and host, no
default port, no trailing slash, slashes collapsed), so `ws://Host:80/c/x/` names `ws://host/c/x`.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from tms.errors import AuthError, InvalidEvent, Refusal, shown
from tms.nostr.events import Event
from tms.types import PubKey

KIND_CLIENT_AUTH: Final = 22242
MAX_AGE_SECONDS: Final = 600  # NIP-42: "the current time (e.g. within ~10 minutes)"
_SCHEMES: Final = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
_DEFAULT_PORTS: Final = {"ws": 80, "wss": 443}
_SLASHES: Final = re.compile(r"/+")


def normalize_relay_url(url: str) -> str | None:
    """The URL as a relay is named, or None for text that is no ws(s) or http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        scheme = _SCHEMES.get(parts.scheme.lower())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if scheme is None or not host:
        return None
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = _SLASHES.sub("/", parts.path).rstrip("/")
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def check_auth(obj: object, *, challenge: str, relay_url: str, now: int) -> PubKey:
    """The key that signed `obj` for this challenge on this relay, or `AuthError`."""
    try:
        event = Event.from_dict(obj)
        event.verify()
    except InvalidEvent as exc:
        raise AuthError(f"invalid: {exc}").refused_as(
            exc.refusal if exc.refusal is Refusal.BAD_SIGNATURE else Refusal.UNAUTHENTICATED
        ) from None
    if event.kind != KIND_CLIENT_AUTH:
        raise AuthError(f"invalid: an AUTH event must be kind {KIND_CLIENT_AUTH}, not {event.kind}")
    if abs(now - event.created_at) > MAX_AGE_SECONDS:
        raise AuthError(
            f"invalid: created_at {event.created_at} is more than {MAX_AGE_SECONDS} s from server "
            f"time {now}: sign a fresh AUTH event, and check the clock"
        ).refused_as(Refusal.STALE)
    if _one_tag(event, "challenge") != challenge:
        raise AuthError(
            "invalid: the challenge tag is not the challenge this connection was sent; answer "
            "the latest AUTH message of this connection"
        ).refused_as(Refusal.REPLAY)
    named = _one_tag(event, "relay")
    if normalize_relay_url(named) != normalize_relay_url(relay_url):
        raise AuthError(
            f"invalid: the relay tag is {shown(named, 200)}, but this relay is {relay_url}"
        )
    return event.pubkey


def _one_tag(event: Event, name: str) -> str:
    values = [tag[1] for tag in event.tags if len(tag) > 1 and tag[0] == name]
    if len(values) != 1:
        raise AuthError(
            f"invalid: an AUTH event needs exactly one '{name}' tag with a value; it has "
            f"{len(values)}"
        )
    return values[0]
