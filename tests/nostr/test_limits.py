"""The limits on one event and on any JSON the server reads: nesting, tags, shape. Each is far
beyond anything SPEC's kinds need, and each refusal says which limit in plain words."""

from __future__ import annotations

import json

import pytest
from factories import T0, key

from tms.errors import InvalidEvent
from tms.nostr.events import MAX_DEPTH, MAX_TAG_CHARS, MAX_TAGS, Event, loads_bounded
from tms.rules.kinds import parse_content

BOUNDS = {"max_containers": 50_000, "max_values": 500_000}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_cap_parses_and_one_more_is_refused() -> None:
    assert loads_bounded(nested(MAX_DEPTH), **BOUNDS) is not None
    with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} deep"):
        loads_bounded(nested(MAX_DEPTH + 1), **BOUNDS)
    with pytest.raises(ValueError, match="nested more than"):
        loads_bounded('{"a":' * 100_000, **BOUNDS)  # not even JSON: refused before parsing
    deep_objects = '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match="nested more than"):
        loads_bounded(deep_objects.encode(), **BOUNDS)


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = json.dumps(["[" * 500, {"x": "{" * 500}])
    assert loads_bounded(text, **BOUNDS) == ["[" * 500, {"x": "{" * 500}]


def test_content_nested_too_deep_is_an_invalid_content() -> None:
    content = json.dumps({"name": "deep", "extra": json.loads(nested(MAX_DEPTH))})
    with pytest.raises(InvalidEvent, match=r"field 'content' is invalid: .*nested more than 64"):
        parse_content(0, content)


def envelope(tags: list[list[str]]) -> dict[str, object]:
    return key(0x11).sign(0, '{"name":"p"}', T0, tags).to_dict()


def test_a_profile_may_carry_up_to_the_tag_caps() -> None:
    assert len(Event.from_dict(envelope([["t", "x"]] * MAX_TAGS)).tags) == MAX_TAGS
    room = MAX_TAG_CHARS // 2 - 2
    assert Event.from_dict(envelope([["a" * room], ["b" * room]])).tags


def test_more_tags_or_more_tag_text_is_refused_by_name() -> None:
    with pytest.raises(InvalidEvent, match=r"field 'tags' is invalid: 1,001 tags, more than 1,000"):
        Event.from_dict(envelope([["t", "x"]] * (MAX_TAGS + 1)))
    with pytest.raises(InvalidEvent, match="more than 100,000 characters in all"):
        Event.from_dict(envelope([["a" * 60_000], ["b" * 60_000]]))
    with pytest.raises(InvalidEvent, match="more than 100,000 characters in all"):
        Event.from_dict(envelope([[""] * (MAX_TAG_CHARS + 1)]))  # empty strings count too


def test_an_envelope_read_from_text_is_bounded_the_same_way() -> None:
    event = key(0x11).sign(0, '{"name":"p"}', T0, [["t", "x"]] * MAX_TAGS)
    assert Event.from_json(event.to_json()).tags == event.tags
    too_deep = event.to_json().replace('"tags":[', '"tags":[' + "[" * 70 + "]" * 70 + ",", 1)
    with pytest.raises(InvalidEvent, match="nested more than"):
        Event.from_json(too_deep)
