"""The NIP-01 envelope: what a signer sends is what verifies, and any tampering is caught."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from factories import key, sign
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import InvalidEvent
from tms.nostr.events import Event, SecretKey, compute_id

KEY = key(0x3B)
unicode_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)
HEX = "0123456789abcdef"


def good() -> dict[str, Any]:
    return sign(KEY, 4702, {"collection": "mcas", "text": "A claim."}).to_dict()


def verified(obj: object) -> Event:
    """What every publish and request does with a client's event: parse it, then verify it."""
    event = Event.from_dict(obj)
    event.verify()
    return event


def rejected(obj: object) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        verified(obj)
    return info.value


@given(content=unicode_text, created_at=st.integers(0, 2**53 - 1), kind=st.integers(0, 65535))
def test_sign_verify_round_trip_through_json_text(content: str, created_at: int, kind: int) -> None:
    event = KEY.sign(kind, content, created_at)
    line = event.to_json()
    assert "\n" not in line.replace("\\n", "")
    again = Event.from_json(line)
    again.verify()
    assert again == event


@pytest.mark.parametrize(
    "content",
    ["🧪👩‍🔬 emoji", "\u2028line\u2029para", "".join(map(chr, range(32))) + "\x7f", "\\\"'"],
)
def test_awkward_content_round_trips(content: str) -> None:
    event = KEY.sign(1, content, 1)
    assert Event.from_json(event.to_json()).content == content
    assert verified(json.loads(event.to_json())) == event


def _flip(text: str, position: int, alphabet: str) -> str:
    old = text[position]
    new = next(c for c in alphabet if c != old)
    return text[:position] + new + text[position + 1 :]


@given(field=st.sampled_from(["id", "sig", "pubkey", "content"]), data=st.data())
def test_any_one_character_change_is_rejected(field: str, data: st.DataObject) -> None:
    obj = good()
    value: str = obj[field]
    position = data.draw(st.integers(0, len(value) - 1))
    alphabet = HEX if field != "content" else 'abcxyz{}" '
    replacement = data.draw(st.sampled_from(alphabet).filter(lambda c: c != value[position]))
    obj[field] = value[:position] + replacement + value[position + 1 :]
    rejected(obj)


@given(delta=st.integers(-(10**6), 10**6).filter(bool))
def test_changed_created_at_is_rejected(delta: int) -> None:
    obj = good()
    obj["created_at"] += delta
    assert "id does not match" in str(rejected(obj))


def test_tampered_signature_names_sig() -> None:
    obj = good()
    obj["sig"] = _flip(obj["sig"], 5, HEX)
    error = rejected(obj)
    assert str(error).startswith("signature does not verify")
    assert error.field == "sig"


def test_signature_of_another_key_does_not_verify() -> None:
    other = sign(SecretKey.generate(), 4702, {"collection": "mcas", "text": "A claim."}).to_dict()
    obj = good()
    obj["sig"] = other["sig"]
    assert "signature does not verify" in str(rejected(obj))


def test_resorted_content_is_an_id_mismatch() -> None:
    obj = good()
    obj["content"] = json.dumps(json.loads(obj["content"]), indent=1)
    error = rejected(obj)
    assert "id does not match" in str(error)
    assert error.field == "id"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda o: o.pop("sig"), "sig", "field 'sig' is missing"),
        (lambda o: o.pop("tags"), "tags", "field 'tags' is missing"),
        (lambda o: o.update(extra=1), "extra", "unknown fields in event: 'extra'"),
        (lambda o: o.update(created_at=1.0), "created_at", "field 'created_at' is invalid"),
        (lambda o: o.update(created_at=True), "created_at", "field 'created_at' is invalid"),
        (lambda o: o.update(created_at="1"), "created_at", "field 'created_at' is invalid"),
        (lambda o: o.update(created_at=-1), "created_at", "field 'created_at' is invalid"),
        (lambda o: o.update(created_at=2**53), "created_at", "field 'created_at' is invalid"),
        (lambda o: o.update(kind=4702.0), "kind", "field 'kind' is invalid"),
        (lambda o: o.update(kind=False), "kind", "field 'kind' is invalid"),
        (lambda o: o.update(kind=70000), "kind", "field 'kind' is invalid"),
        (lambda o: o.update(id=o["id"].upper()), "id", "field 'id' is invalid"),
        (lambda o: o.update(pubkey=o["pubkey"].upper()), "pubkey", "field 'pubkey' is invalid"),
        (lambda o: o.update(sig=o["sig"].upper()), "sig", "field 'sig' is invalid"),
        (lambda o: o.update(id=o["id"][:-1]), "id", "64 lowercase hex"),
        (lambda o: o.update(sig=o["sig"] + "00"), "sig", "128 lowercase hex"),
        (lambda o: o.update(pubkey=None), "pubkey", "field 'pubkey' is invalid"),
        (lambda o: o.update(content={"a": 1}), "content", "field 'content' is invalid"),
        (lambda o: o.update(content="\ud800"), "content", "lone UTF-16 surrogate"),
        (lambda o: o.update(tags="[]"), "tags", "field 'tags' is invalid"),
        (lambda o: o.update(tags=[["p", 1]]), "tags", "field 'tags' is invalid"),
        (lambda o: o.update(tags=[["p", "\udfff"]]), "tags", "lone UTF-16 surrogate"),
    ],
)
def test_envelope_errors_name_the_field(change: Any, field: str, words: str) -> None:
    obj = good()
    change(obj)
    error = rejected(obj)
    assert words in str(error)
    assert error.field == field
    assert field in str(error)


def test_pubkey_off_the_curve_is_named() -> None:
    obj = good()
    obj["pubkey"] = "0" * 64  # x = 0 is not on secp256k1
    obj["id"] = compute_id(obj["pubkey"], obj["created_at"], obj["kind"], [], obj["content"])
    error = rejected(obj)
    assert error.field == "pubkey"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[]", "event must be a JSON object"),
        ("not json", "event is not valid JSON"),
        ('{"id": 1, "id": 2}', "duplicate key 'id'"),
        ('{"created_at": NaN}', "NaN is not valid JSON"),
        ('"\\ud800"', "event must be a JSON object"),
    ],
)
def test_unparseable_text_is_one_clear_error(text: str, words: str) -> None:
    with pytest.raises(InvalidEvent, match=words):
        Event.from_json(text)


def test_lone_surrogate_arriving_as_json_escape_is_rejected() -> None:
    obj = good()
    text = json.dumps(obj).replace(json.dumps(obj["content"]), '"\\ud83e"')
    with pytest.raises(InvalidEvent, match="lone UTF-16 surrogate"):
        Event.from_json(text)


def test_signing_refuses_lone_surrogates() -> None:
    with pytest.raises(InvalidEvent, match="lone UTF-16 surrogate"):
        KEY.sign(1, "a\udc00", 1)


def test_signatures_use_fresh_randomness() -> None:
    first, second = KEY.sign(1, "same", 1), KEY.sign(1, "same", 1)
    assert first.id == second.id
    assert first.sig != second.sig


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    )
)
def test_arbitrary_json_never_escapes_as_another_error(obj: object) -> None:
    with contextlib.suppress(InvalidEvent):
        verified(obj)


def test_secret_key_repr_does_not_leak_the_secret() -> None:
    assert KEY.secret.hex() not in repr(KEY)
