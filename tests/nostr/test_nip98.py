"""NIP-98 `Authorization: Nostr <base64 event>`: what a client signs passes, and every way of
getting it wrong is an `AuthError` whose message says what to fix. Pure: no server, no database."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from factories import key, nip98_header
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import AuthError
from tms.nostr.events import Event, SecretKey
from tms.nostr.nip98 import MAX_HEADER_BYTES, check_authorization

KEY = key(0x5C)
URL = "https://tms.example.org/c/mcas/export.jsonl"
NOW = 1_796_000_000
NO_SURROGATES = st.characters(exclude_categories=("Cs",))


def auth_event(
    *,
    url: str = URL,
    method: str = "GET",
    created_at: int = NOW,
    kind: int = 27235,
    tags: list[list[str]] | None = None,
    signer: SecretKey = KEY,
) -> Event:
    return signer.sign(
        kind, "", created_at, [["u", url], ["method", method]] if tags is None else tags
    )


def check(header: str | None, *, url: str = URL, method: str = "GET", now: int = NOW) -> str:
    return check_authorization(header, url=url, method=method, now=now)


def refused(header: str | None, **kwargs: Any) -> str:
    with pytest.raises(AuthError) as info:
        check(header, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def encoded(obj: object) -> str:
    return "Nostr " + base64.b64encode(json.dumps(obj).encode()).decode()


# --- accepted ------------------------------------------------------------------------------------


def test_a_signed_event_for_this_url_and_method_names_its_signer() -> None:
    assert check(nip98_header(auth_event())) == KEY.pubkey


@pytest.mark.parametrize("skew", [-60, -1, 0, 1, 60])
def test_created_at_may_be_up_to_60_seconds_either_side(skew: int) -> None:
    assert check(nip98_header(auth_event(created_at=NOW + skew))) == KEY.pubkey


def test_method_and_scheme_are_case_insensitive() -> None:
    header = nip98_header(auth_event(method="get"))
    assert check(header.replace("Nostr ", "nostr ", 1), method="GET") == KEY.pubkey
    assert check(nip98_header(auth_event(method="HEAD")), method="head") == KEY.pubkey


def test_other_tags_and_content_are_ignored() -> None:
    event = KEY.sign(27235, "hello", NOW, [["u", URL], ["method", "GET"], ["payload", "ab"]])
    assert check(nip98_header(event)) == KEY.pubkey


def test_surrounding_whitespace_is_tolerated() -> None:
    assert check(f"  {nip98_header(auth_event())}  ") == KEY.pubkey


# --- refused, one message per mistake ----------------------------------------------------------


@pytest.mark.parametrize("header", [None, "", "   "])
def test_missing_header(header: str | None) -> None:
    assert refused(header) == (
        "missing Authorization header: send `Authorization: Nostr <base64 event>`, the event of "
        "kind 27235 signed for this request's URL and method (NIP-98)"
    )


def test_other_schemes_are_named() -> None:
    assert refused("Bearer abc.def") == (
        "Authorization header must be `Nostr <base64 event>` (NIP-98); its scheme is 'Bearer'"
    )
    message = refused(base64.b64encode(auth_event().to_json().encode()).decode())
    assert message.startswith("Authorization header must be `Nostr <base64 event>` (NIP-98)")
    assert message.endswith("'...")  # the stray token is cut short, not echoed in full


def test_scheme_without_event() -> None:
    assert refused("Nostr") == (
        "Authorization header must be `Nostr <base64 event>`: the event is missing"
    )


@pytest.mark.parametrize("token", ["not base64!", "abc", "é" * 8, "QUJD RA=="])
def test_bad_base64(token: str) -> None:
    assert refused(f"Nostr {token}") == (
        "Authorization header is not `Nostr <base64 event>`: the event is not valid base64"
    )


def test_too_large() -> None:
    header = "Nostr " + "A" * MAX_HEADER_BYTES
    assert refused(header) == f"Authorization header is larger than {MAX_HEADER_BYTES} bytes"


def test_not_json() -> None:
    message = refused("Nostr " + base64.b64encode(b"{not json").decode())
    assert message.startswith("invalid NIP-98 event: event is not valid JSON: ")
    assert refused("Nostr " + base64.b64encode(b"\xff\xfe").decode()).startswith(
        "invalid NIP-98 event: event is not valid JSON: "
    )


def test_bad_envelope() -> None:
    assert refused(encoded([1, 2])) == "invalid NIP-98 event: event must be a JSON object"
    event = auth_event().to_dict()
    del event["sig"]
    assert refused(encoded(event)) == "invalid NIP-98 event: field 'sig' is missing"


def test_tampered_event() -> None:
    event = auth_event().to_dict()
    event["tags"] = [["u", "https://elsewhere.example/"], ["method", "GET"]]
    assert refused(encoded(event)) == (
        "invalid NIP-98 event: id does not match the sha256 of the serialized event "
        "(was content re-serialized after signing?)"
    )


def test_signature_by_another_key() -> None:
    event = auth_event().to_dict()
    event["sig"] = auth_event(signer=key(0x7D)).sig
    assert refused(encoded(event)) == (
        "invalid NIP-98 event: signature does not verify for this pubkey and id"
    )


def test_wrong_kind() -> None:
    assert refused(nip98_header(auth_event(kind=4707))) == (
        "NIP-98 event must be kind 27235, not kind 4707"
    )


@pytest.mark.parametrize("skew", [-61, 61, -10_000])
def test_stale_or_future_created_at(skew: int) -> None:
    assert refused(nip98_header(auth_event(created_at=NOW + skew))) == (
        f"NIP-98 event created_at {NOW + skew} is more than 60s from server time {NOW}: sign a "
        "fresh one for every request, and check the clock"
    )


def test_missing_u_tag() -> None:
    assert refused(nip98_header(auth_event(tags=[["method", "GET"]]))) == (
        f"NIP-98 event has no 'u' tag; it must hold this request's absolute URL, {URL!r}"
    )
    assert refused(nip98_header(auth_event(tags=[["u"], ["method", "GET"]]))) == (
        f"NIP-98 event's 'u' tag has no value; it must hold this request's absolute URL, {URL!r}"
    )


def test_two_u_tags() -> None:
    tags = [["u", URL], ["u", URL], ["method", "GET"]]
    assert refused(nip98_header(auth_event(tags=tags))) == (
        "NIP-98 event has 2 'u' tags; it must have exactly one"
    )


@pytest.mark.parametrize(
    "signed",
    [
        "http://tms.example.org/c/mcas/export.jsonl",  # scheme
        "https://tms.example.org/c/mcas/export.jsonl?x=1",  # query
        "https://tms.example.org/c/mcas/export.jsonl/",  # trailing slash
        "https://TMS.example.org/c/mcas/export.jsonl",  # exact comparison: no normalizing
        "https://tms.example.org/c/other/export.jsonl",  # another collection
    ],
)
def test_u_tag_for_another_url(signed: str) -> None:
    assert refused(nip98_header(auth_event(url=signed))) == (
        f"NIP-98 'u' tag is {signed!r}, but this request's URL is {URL!r}: sign the exact "
        "absolute URL you request, query included"
    )


def test_long_u_tag_is_cut_short_in_the_message() -> None:
    message = refused(nip98_header(auth_event(url="https://x/" + "a" * 5000)))
    assert len(message) < 500


def test_missing_method_tag() -> None:
    assert refused(nip98_header(auth_event(tags=[["u", URL]]))) == (
        "NIP-98 event has no 'method' tag; it must hold this request's method, 'GET'"
    )


def test_method_tag_for_another_method() -> None:
    assert refused(nip98_header(auth_event(method="POST"))) == (
        "NIP-98 'method' tag is 'POST', but this request's method is 'GET'"
    )


# --- nothing but AuthError, whatever arrives ---------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@given(st.text(max_size=300))
def test_any_text_is_refused_with_auth_error(header: str) -> None:
    with pytest.raises(AuthError):
        check(header)


@given(st.binary(max_size=300))
def test_any_base64_payload_is_refused_with_auth_error(payload: bytes) -> None:
    with pytest.raises(AuthError):
        check("Nostr " + base64.b64encode(payload).decode())


@given(json_values)
def test_any_json_is_refused_with_auth_error(value: object) -> None:
    with pytest.raises(AuthError):
        check(encoded(value))


@given(
    envelope=st.fixed_dictionaries(
        {},
        optional={
            name: json_values
            for name in ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
        },
    )
)
def test_any_envelope_is_refused_with_auth_error(envelope: dict[str, Any]) -> None:
    with pytest.raises(AuthError):
        check(encoded(envelope))


@given(
    tags=st.lists(st.lists(st.text(NO_SURROGATES, max_size=30), max_size=3), max_size=4),
    created_at=st.integers(0, 2**53 - 1),
    kind=st.integers(0, 65535),
    url=st.text(max_size=40),
    method=st.text(max_size=8),
)
def test_signed_events_pass_or_fail_cleanly(
    tags: list[list[str]], created_at: int, kind: int, url: str, method: str
) -> None:
    header = nip98_header(KEY.sign(kind, "", created_at, tags))
    with contextlib.suppress(AuthError):
        assert check(header, url=url, method=method) == KEY.pubkey
