"""NIP-98 HTTP authentication: `Authorization: Nostr <base64 of a signed kind 27235 event>`.

Pure: the caller passes the header, the URL and method of the request it is serving, and the
server's clock; the answer is the signer's public key or an `AuthError` whose message says, in
one line, what to fix. Nothing here imports the web framework or the database.

The checks, in order (https://github.com/nostr-protocol/nips/blob/master/98.md):
  1. a header, of bounded size, of the form `Nostr <token>` (the scheme is case-insensitive);
  2. the token is base64 of a JSON event with a valid NIP-01 envelope;
  3. its id commits to its fields and its signature verifies (`Event.verify`);
  4. its kind is 27235;
  5. its `created_at` is within 60 seconds of server time, either way;
  6. exactly one `u` tag, equal to the request's absolute URL (query included), byte for byte;
  7. exactly one `method` tag, equal to the request's method (case-insensitive).

The event's content is not read (NIP-98 says it should be empty), and there is no `payload` tag
check: the routes that accept NIP-98 are GETs without a body. A header can be replayed within its
60 seconds, against the same URL and method only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Final

from tms.errors import AuthError, InvalidEvent, Refusal
from tms.nostr.events import Event
from tms.types import PubKey

KIND_HTTP_AUTH: Final = 27235
MAX_AGE_SECONDS: Final = 60
MAX_HEADER_BYTES: Final = 16 * 1024
SCHEME: Final = "Nostr"
_SHOWN_CHARS: Final = 200  # how much of a client's value an error message repeats


def check_authorization(header: str | None, *, url: str, method: str, now: int) -> PubKey:
    """The pubkey that signed `header` for this `method` on this `url`, or `AuthError`."""
    return authorization(header, url=url, method=method, now=now).pubkey


def authorization(
    header: str | None, *, url: str, method: str, now: int, body: bytes | None = None
) -> Event:
    """The event `header` carries, checked for this `method` on this `url` (steps 1 to 7); with
    `body`, also its `payload` tag: the hex SHA-256 of `body`, as NIP-98 says a request with a
    body signs it (NIP-86's calls: the signature then covers exactly that call)."""
    # 1. The header's shape.
    if header is None or not header.strip():
        raise AuthError(
            "missing Authorization header: send `Authorization: Nostr <base64 event>`, the event "
            f"of kind {KIND_HTTP_AUTH} signed for this request's URL and method (NIP-98)"
        )
    if len(header) > MAX_HEADER_BYTES:
        raise AuthError(f"Authorization header is larger than {MAX_HEADER_BYTES} bytes")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != SCHEME.lower():
        raise AuthError(
            "Authorization header must be `Nostr <base64 event>` (NIP-98); its scheme is "
            f"{_show(scheme, 20)}"
        )
    if not token:
        raise AuthError("Authorization header must be `Nostr <base64 event>`: the event is missing")

    # 2. The token: base64, then a NIP-01 envelope.
    try:
        raw = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        raise AuthError(
            "Authorization header is not `Nostr <base64 event>`: the event is not valid base64"
        ) from None
    try:
        event = Event.from_json(raw)
        # 3. The id and the signature.
        event.verify()
    except InvalidEvent as exc:
        raise AuthError(f"invalid NIP-98 event: {exc}").refused_as(
            exc.refusal if exc.refusal is Refusal.BAD_SIGNATURE else Refusal.UNAUTHENTICATED
        ) from None

    # 4. The kind.
    if event.kind != KIND_HTTP_AUTH:
        raise AuthError(f"NIP-98 event must be kind {KIND_HTTP_AUTH}, not kind {event.kind}")

    # 5. The time.
    if abs(now - event.created_at) > MAX_AGE_SECONDS:
        raise AuthError(
            f"NIP-98 event created_at {event.created_at} is more than {MAX_AGE_SECONDS}s from "
            f"server time {now}: sign a fresh one for every request, and check the clock"
        ).refused_as(Refusal.STALE)

    # 6. The URL, exactly as this server sees it.
    signed_url = _one_tag(event, "u", f"this request's absolute URL, {url!r}")
    if signed_url != url:
        raise AuthError(
            f"NIP-98 'u' tag is {_show(signed_url)}, but this request's URL is {url!r}: sign "
            "the exact absolute URL you request, query included"
        )

    # 7. The method.
    signed_method = _one_tag(event, "method", f"this request's method, {method.upper()!r}")
    if signed_method.upper() != method.upper():
        raise AuthError(
            f"NIP-98 'method' tag is {_show(signed_method)}, but this request's method is "
            f"{method.upper()!r}"
        )

    # 8. The body, when the request has one.
    if body is not None:
        payload = _one_tag(event, "payload", "the hex SHA-256 of this request's body")
        if payload != hashlib.sha256(body).hexdigest():
            raise AuthError(
                "NIP-98 'payload' tag is not the SHA-256 of this request's body: sign the "
                "exact bytes you send"
            )
    return event


def _one_tag(event: Event, name: str, expected: str) -> str:
    values = [tag[1] if len(tag) > 1 else None for tag in event.tags if tag and tag[0] == name]
    if not values:
        raise AuthError(f"NIP-98 event has no {name!r} tag; it must hold {expected}")
    if len(values) > 1:
        raise AuthError(f"NIP-98 event has {len(values)} {name!r} tags; it must have exactly one")
    value = values[0]
    if value is None:
        raise AuthError(f"NIP-98 event's {name!r} tag has no value; it must hold {expected}")
    return value


def _show(value: str, limit: int = _SHOWN_CHARS) -> str:
    """A client's value, quoted on one line and cut short, for an error message."""
    if len(value) > limit:
        return f"{value[:limit]!r}..."
    return repr(value)
