"""Content schemas: SPEC's table, strictly, with the messages users are told to look for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from factories import compact, key, sign
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import InvalidEvent
from tms.rules.content import check_created_at
from tms.rules.kinds import KINDS, Claim, Link, Members, Profile, validate_content

KEY = key(0x4C)
A, B = "a" * 64, "b" * 64
OTHER = key(0x5D).pubkey

VALID: dict[int, dict[str, Any]] = {
    0: {"name": "my-bot", "about": "agent", "picture": "https://x/y.png"},
    4701: {
        "collection": "mcas",
        "text": "Full text.",
        "url": "https://e.org",
        "title": "T",
        "source": "Journal",
    },
    4702: {"collection": "mcas", "text": "A claim."},
    4703: {
        "collection": "mcas",
        "from": A,
        "to": B,
        "relation": "SUPPORTS",
        "quote": "Full",
        "reason": "Because.",
    },
    4704: {"collection": "mcas", "claims": [A, B], "reason": "Cannot both hold."},
    4705: {"collection": "mcas", "members": [KEY.pubkey, OTHER]},
    4706: {"version": "1", "sha256": "ef" * 32},
    4707: {"tool": "search_claims", "args": {"collection": "mcas", "text": "DAO"}},
}
REQUIRED = {
    0: ["name"],
    4701: ["collection", "text"],
    4702: ["collection", "text"],
    4703: ["collection", "from", "to", "relation", "quote", "reason"],
    4704: ["collection", "claims", "reason"],
    4705: ["collection", "members"],
    4706: ["version", "sha256"],
    4707: ["tool", "args"],
}
BLANKABLE = [
    (k, f)
    for k, fields in REQUIRED.items()
    for f in fields
    if isinstance(VALID[k][f], str) and f not in {"collection", "from", "to", "sha256", "relation"}
]


def check(kind: int, content: Any, tags: Sequence[Sequence[str]] = ()) -> Any:
    return validate_content(sign(KEY, kind, content, tags=tags))


def refused(kind: int, content: Any, tags: Sequence[Sequence[str]] = ()) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        check(kind, content, tags)
    return info.value


@pytest.mark.parametrize("kind", sorted(VALID))
def test_valid_content_of_every_kind(kind: int) -> None:
    parsed = check(kind, VALID[kind])
    assert isinstance(parsed, KINDS[kind].model)
    assert parsed.model_dump(by_alias=True, exclude_unset=True) == VALID[kind]  # as signed


def test_parsed_content_is_typed() -> None:
    link = check(4703, VALID[4703])
    assert isinstance(link, Link)
    assert (link.from_, link.to, link.relation) == (A, B, "SUPPORTS")
    assert isinstance(check(4702, VALID[4702]), Claim)
    assert isinstance(check(4705, {"collection": "m", "members": []}), Members)


@pytest.mark.parametrize(("kind", "field"), [(k, f) for k, fs in REQUIRED.items() for f in fs])
def test_missing_field_is_named(kind: int, field: str) -> None:
    content = {k: v for k, v in VALID[kind].items() if k != field}
    error = refused(kind, content)
    assert f"field '{field}' is missing" in str(error)
    assert error.field == f"content.{field}"


@pytest.mark.parametrize("kind", [k for k in sorted(VALID) if k != 0])
def test_unknown_fields_are_rejected(kind: int) -> None:
    error = refused(kind, {**VALID[kind], "confidence": 0.9, "extra": 1})
    assert "unknown fields" in str(error)
    assert "'confidence', 'extra'" in str(error)


def test_profiles_keep_other_clients_fields() -> None:
    profile = check(0, {"name": "n", "display_name": "N", "lud16": "x@y", "nip05": "a@b"})
    assert isinstance(profile, Profile)
    assert profile.model_extra == {"display_name": "N", "lud16": "x@y", "nip05": "a@b"}


@pytest.mark.parametrize(("kind", "field"), BLANKABLE)
@pytest.mark.parametrize("blank", ["", "   ", "\n\t\u3000"])
def test_required_strings_must_not_be_blank(kind: int, field: str, blank: str) -> None:
    error = refused(kind, {**VALID[kind], field: blank})
    assert f"field '{field}' is invalid" in str(error)
    assert "blank" in str(error)


@pytest.mark.parametrize(
    ("kind", "field", "value", "words"),
    [
        (4702, "text", 5, "must be a string"),
        (4702, "text", None, "must be a string"),
        (4701, "title", 3, "must be a string"),
        (4703, "relation", "supports", "SUPPORTS, REBUTS or QUALIFIES"),
        (4703, "relation", "REFUTES", "SUPPORTS, REBUTS or QUALIFIES"),
        (4703, "from", A.upper(), "event id"),
        (4703, "to", "note1xyz", "event id"),
        (4704, "claims", [A], "at least two"),
        (4704, "claims", [A, A], "same id twice"),
        (4704, "claims", [A, "b"], "item 2 must be an event id"),
        (4704, "claims", A, "must be a list"),
        (4705, "members", ["0" * 64], "item 1 must be a public key"),
        (4705, "members", [OTHER, OTHER], "same id twice"),
        (4705, "members", "npub1...", "must be a list"),
        (4706, "sha256", "EF" * 32, "64 lowercase hex"),
        (4707, "args", [], "must be a JSON object"),
    ],
)
def test_invalid_values_name_the_field(kind: int, field: str, value: Any, words: str) -> None:
    error = refused(kind, {**VALID[kind], field: value})
    assert f"field '{field}' is invalid" in str(error)
    assert words in str(error)


@given(st.text(max_size=80))
def test_collection_slugs(slug: str) -> None:
    ok = 1 <= len(slug) <= 64 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-_" for c in slug)
    content = {"collection": slug, "text": "t"}
    if ok:
        check(4702, content)
    else:
        assert "field 'collection' is invalid" in str(refused(4702, content))


@pytest.mark.parametrize("slug", ["mcas", "a", "x" * 64, "long-covid_2024"])
def test_good_slugs(slug: str) -> None:
    check(4702, {"collection": slug, "text": "t"})


@pytest.mark.parametrize("slug", ["", "MCAS", "x" * 65, "a b", "ü", "a/b", "a.b", "a\n"])
def test_bad_slugs(slug: str) -> None:
    assert "field 'collection' is invalid" in str(refused(4702, {"collection": slug, "text": "t"}))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[1, 2]", "must be a JSON object"),
        ('"a claim"', "must be a JSON object"),
        ("not json", "not a JSON object"),
        ('{"collection": "a", "collection": "b", "text": "t"}', "duplicate key 'collection'"),
        ('{"collection": "a", "text": NaN}', "NaN is not valid JSON"),
    ],
)
def test_content_must_be_one_json_object(content: str, words: str) -> None:
    error = refused(4702, content)
    assert "field 'content' is invalid" in str(error)
    assert words in str(error)


def test_content_limit_is_two_million_characters() -> None:
    overhead = len(compact({"collection": "m", "text": ""}))
    check(4701, {"collection": "m", "text": "x" * (2_000_000 - overhead)})
    error = refused(4701, {"collection": "m", "text": "x" * (2_000_001 - overhead)})
    assert "field 'content' is invalid: 2,000,001 characters is more than 2,000,000" in str(error)


def test_unknown_kind_is_refused() -> None:
    assert "field 'kind' is invalid: 1 is not a TMS kind" in str(refused(1, "hello"))


@pytest.mark.parametrize("kind", [k for k in sorted(VALID) if k != 0])
def test_tags_must_be_empty_except_on_profiles(kind: int) -> None:
    error = refused(kind, VALID[kind], tags=[["t", "x"]])
    assert "tags must be []" in str(error)
    assert error.field == "tags"


def test_profiles_may_carry_tags() -> None:
    check(0, VALID[0], tags=[["p", KEY.pubkey], ["t", "nostr"]])


def test_created_at_may_be_at_most_fifteen_minutes_ahead() -> None:
    now = 1_800_000_000
    check_created_at(sign(KEY, 4702, VALID[4702], created_at=now + 900), now)
    check_created_at(sign(KEY, 4702, VALID[4702], created_at=0), now)
    with pytest.raises(InvalidEvent, match="field 'created_at' is invalid: 901 s ahead"):
        check_created_at(sign(KEY, 4702, VALID[4702], created_at=now + 901), now)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(sorted({f for fs in REQUIRED.values() for f in fs} | {"x", "url"}))


@given(
    kind=st.sampled_from(sorted(VALID)),
    content=st.dictionaries(field_names, json_values | st.just(A) | st.just("mcas")),
)
def test_any_content_is_accepted_or_refused_with_invalid_event(kind: int, content: Any) -> None:
    try:
        check(kind, content)
    except InvalidEvent as error:
        message = str(error)
        assert any(w in message for w in ("unknown fields", "is missing", "is invalid"))
        # The error names the field at fault, in its message and in `field`.
        assert error.field is not None
        top, _, name = error.field.partition(".")
        assert top == "content", error.field
        assert f"'{name or 'content'}'" in message, (error.field, message)
