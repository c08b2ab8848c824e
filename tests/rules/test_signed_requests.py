"""Signed requests and tool arguments, pure: each rule's refusal in SPEC's words, and no input
whatever gets past the checks as anything but a clear error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.mcp.tools import TOOLS, ToolError, parse_args
from tms.nostr.events import SecretKey
from tms.rules.requests import RequestError, check_request, request_from_arguments

KEY = SecretKey(b"\x07" * 32)
NOW = 1_800_000_000


def signed(content: Any, created_at: int = NOW, kind: int = 4707) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content, separators=(",", ":"))
    return KEY.sign(kind, text, created_at).to_dict()


def test_a_good_request_gives_its_signed_args() -> None:
    req = signed({"tool": "list_claims", "args": {"collection": "mcas", "limit": 5}})
    checked = check_request(req, "list_claims", NOW + 60)
    assert checked.args == {"collection": "mcas", "limit": 5}
    assert checked.pubkey == KEY.pubkey and checked.id == req["id"]


@pytest.mark.parametrize(
    ("request_obj", "tool", "now", "fragment"),
    [
        (signed({"tool": "a", "args": {}}), "b", NOW, "request was signed for tool 'a', not 'b'"),
        (
            signed({"tool": "a", "args": {}}),
            "a",
            NOW + 61,
            "61 s behind server time, more than 60s",
        ),
        (
            signed({"tool": "a", "args": {}}),
            "a",
            NOW - 61,
            "61 s ahead of server time, more than 60s",
        ),
        (
            signed({"tool": "a", "args": {}}, kind=4702),
            "a",
            NOW,
            "a request is kind 4707, not 4702",
        ),
        (signed({"tool": "a"}), "a", NOW, "field 'args' is missing from request content"),
        (signed({"tool": "a", "args": [], "x": 1}), "a", NOW, "unknown fields in request content"),
        (signed({"tool": "a", "args": []}), "a", NOW, "field 'args' is invalid in request content"),
        (signed("not json"), "a", NOW, "field 'content' is invalid"),
        (
            {**signed({"tool": "a", "args": {}}), "sig": "0" * 128},
            "a",
            NOW,
            "signature does not verify",
        ),
        ({**signed({"tool": "a", "args": {}}), "content": "{}"}, "a", NOW, "id does not match"),
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


@settings(max_examples=300, deadline=None)
@given(
    args=st.dictionaries(
        st.sampled_from(
            [
                "collection",
                "text",
                "limit",
                "id",
                "offset",
                "max_chars",
                "sort",
                "method",
                "to_id",
                "relation",
                "ungrounded_only",
                "source",
                "claim",
                "proof",
                "url",
                "events",
                "x",
            ]
        ),
        json_values,
        max_size=5,
    ),
    tool=st.sampled_from(sorted(TOOLS)),
)
def test_any_arguments_either_validate_or_get_a_clear_error(
    args: dict[str, Any], tool: str
) -> None:
    try:
        parsed = parse_args(TOOLS[tool], args)
    except ToolError as exc:
        message = str(exc)
        assert f"{tool} args" in message
        assert any(p in message for p in ("unknown fields", "is missing", "is invalid"))
    else:
        assert parsed is not None


@settings(max_examples=200, deadline=None)
@given(content=json_values)
def test_signed_junk_content_is_refused_cleanly(content: Any) -> None:
    req = signed(content if not isinstance(content, dict) else {"tool": "t", **content})
    try:
        checked = check_request(req, "t", NOW)
    except RequestError as exc:
        assert str(exc)
    else:
        assert isinstance(checked.args, dict)
