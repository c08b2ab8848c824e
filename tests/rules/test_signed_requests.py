"""Signed requests and tool arguments, pure: each rule's refusal in SPEC's words, and no input
whatever gets past the checks as anything but a clear error."""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, key, signed
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.mcp.tools import TOOLS, Tool, ToolError, parse_args
from tms.rules.requests import RequestError, check_request, request_from_arguments

KEY = key(0x07)
NOW = T0  # the server clock here; every request is signed at T0


def test_a_good_request_gives_its_signed_args() -> None:
    req = signed(KEY, 4707, {"tool": "list_claims", "args": {"collection": "mcas", "limit": 5}})
    checked = check_request(req, "list_claims", NOW + 60)
    assert checked.args == {"collection": "mcas", "limit": 5}
    assert checked.pubkey == KEY.pubkey and checked.id == req["id"]


@pytest.mark.parametrize(
    ("request_obj", "tool", "now", "fragment"),
    [
        (
            signed(KEY, 4707, {"tool": "a", "args": {}}),
            "b",
            NOW,
            "request was signed for tool 'a', not 'b'",
        ),
        (
            signed(KEY, 4707, {"tool": "a", "args": {}}),
            "a",
            NOW + 61,
            "61 s behind server time, more than 60s",
        ),
        (
            signed(KEY, 4707, {"tool": "a", "args": {}}),
            "a",
            NOW - 61,
            "61 s ahead of server time, more than 60s",
        ),
        (
            signed(KEY, 4702, {"tool": "a", "args": {}}),
            "a",
            NOW,
            "a request is kind 4707, not 4702",
        ),
        (
            signed(KEY, 4707, {"tool": "a"}),
            "a",
            NOW,
            "field 'args' is missing from request content",
        ),
        (
            signed(KEY, 4707, {"tool": "a", "args": [], "x": 1}),
            "a",
            NOW,
            "unknown fields in request content",
        ),
        (
            signed(KEY, 4707, {"tool": "a", "args": []}),
            "a",
            NOW,
            "field 'args' is invalid in request content",
        ),
        (signed(KEY, 4707, "not json"), "a", NOW, "field 'content' is invalid"),
        (
            {**signed(KEY, 4707, {"tool": "a", "args": {}}), "sig": "0" * 128},
            "a",
            NOW,
            "signature does not verify",
        ),
        (
            {**signed(KEY, 4707, {"tool": "a", "args": {}}), "content": "{}"},
            "a",
            NOW,
            "id does not match",
        ),
        ("a string", "a", NOW, "request: event must be a JSON object"),
        ({}, "a", NOW, "request: field 'id' is missing"),
    ],
)
def test_each_rule_refuses_in_specs_words(
    request_obj: object, tool: str, now: int, fragment: str
) -> None:
    with pytest.raises(RequestError) as caught:
        check_request(request_obj, tool, now)
    assert fragment in str(caught.value)


def test_arguments_beside_the_request_are_refused_not_ignored() -> None:
    with pytest.raises(RequestError, match="pass the arguments inside its signed content"):
        request_from_arguments("get_links", {"request": {}, "collection": "x"})
    with pytest.raises(RequestError, match="get_links needs a signed `request`"):
        request_from_arguments("get_links", {})
    assert request_from_arguments("get_links", {"request": 1}) == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(obj=json_values, tool=st.sampled_from(sorted(TOOLS)))
def test_no_request_object_gets_through_or_crashes(obj: object, tool: str) -> None:
    with pytest.raises(RequestError):
        check_request(obj, tool, NOW)


def argument_names(tool: Tool) -> list[str]:
    return sorted(field.alias or name for name, field in tool.args.model_fields.items())


ARG_NAMES = sorted({name for tool in TOOLS.values() for name in argument_names(tool)} | {"x"})
EVENT_ID = st.sampled_from(["a" * 64, "0123456789abcdef" * 4])
# A value each argument takes (of some tool), so that random arguments are often accepted.
GOOD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "collection": st.sampled_from(["mcas", "lab-2", "a_b"]),
    "text": st.sampled_from(["DAO", "histamine intolerance"]),
    "limit": st.integers(1, 20),
    "id": EVENT_ID,
    "offset": st.integers(0, 10**6),
    "max_chars": st.integers(1, 2_000_000),
    "sort": st.sampled_from(["recent", "links", "unsupported", "unchallenged", "contested"]),
    "method": st.sampled_from(["vector", "keyword"]),
    "to_id": EVENT_ID,
    "from_id": EVENT_ID,
    "relation": st.sampled_from(["SUPPORTS", "REBUTS", "QUALIFIES"]),
    "ungrounded_only": st.booleans(),
    "source": st.text(max_size=10),
    "claim": EVENT_ID,
    "proof": json_values,
    "url": st.just("https://example.org/"),
    "events": st.lists(json_values, max_size=3),
    "old_size": st.integers(0, 10**6),
    "new_size": st.integers(0, 10**6),
}


def test_good_values_cover_every_argument() -> None:
    assert set(GOOD_VALUES) == set(ARG_NAMES) - {"x"}


@settings(max_examples=300, deadline=None)
@given(tool=st.sampled_from(sorted(TOOLS)), data=st.data())
def test_any_arguments_either_validate_or_get_a_clear_error(tool: str, data: st.DataObject) -> None:
    """Arguments named mostly after the tool's own, sometimes after other tools' or nothing's,
    each with a value that argument takes or with junk."""
    own = st.sampled_from(argument_names(TOOLS[tool]) or ARG_NAMES)
    names = data.draw(st.lists(st.one_of([own] * 4 + [st.sampled_from(ARG_NAMES)]), max_size=5))
    args = {}
    for name in names:
        good = GOOD_VALUES.get(name, json_values)
        args[name] = data.draw(st.one_of([good] * 4 + [json_values]), label=name)
    try:
        parsed = parse_args(TOOLS[tool], args)
    except ToolError as exc:
        message = str(exc)
        assert f"{tool} args" in message
        assert any(p in message for p in ("unknown fields", "is missing", "is invalid"))
    else:
        # Accepted: the tool's own arguments, holding exactly what was sent, nothing added.
        assert isinstance(parsed, TOOLS[tool].args)
        assert parsed.model_dump(by_alias=True, exclude_unset=True) == args


@settings(max_examples=200, deadline=None)
@given(content=json_values)
def test_signed_junk_content_is_refused_cleanly(content: Any) -> None:
    sent = content if not isinstance(content, dict) else {"tool": "t", **content}
    req = signed(KEY, 4707, sent)
    try:
        checked = check_request(req, "t", NOW)
    except RequestError as exc:
        message = str(exc)
        assert message.startswith("request"), message
        words = ("unknown fields", "is missing", "is invalid", "signed for tool")
        assert any(w in message for w in words), message
    else:  # only {"tool": "t", "args": {...}} gets through, giving exactly those args
        assert sent == {"tool": "t", "args": checked.args}
        assert (checked.id, checked.pubkey) == (req["id"], KEY.pubkey)
