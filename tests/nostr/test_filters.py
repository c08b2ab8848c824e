"""NIP-01 filters: parsed within bounds, refused with the field's name, matched as NIP-01 says."""

from __future__ import annotations

import pytest
from factories import MEMBER, OWNER, claim, profile, sign

from tms.nostr.events import Event
from tms.nostr.filters import MAX_VALUES, FilterError, parse_filter


def event_of(wire: dict[str, object]) -> Event:
    return Event.from_dict(wire)


def test_every_condition_must_hold() -> None:
    said = event_of(claim(MEMBER, "rel", "A claim.", created_at=1_000))
    f = parse_filter(
        {"kinds": [4702], "authors": [MEMBER.pubkey], "since": 1_000, "until": 1_000}, max_limit=10
    )
    assert f.matches(said)
    assert not parse_filter({"kinds": [4701]}, max_limit=10).matches(said)
    assert not parse_filter({"authors": [OWNER.pubkey]}, max_limit=10).matches(said)
    assert not parse_filter({"since": 1_001}, max_limit=10).matches(said)
    assert not parse_filter({"until": 999}, max_limit=10).matches(said)
    assert parse_filter({"ids": [said.id]}, max_limit=10).matches(said)
    assert parse_filter({}, max_limit=10).matches(said)


def test_tag_filters_match_only_events_that_carry_the_tag() -> None:
    plain = event_of(claim(MEMBER, "rel", "No tags."))
    tagged = sign(MEMBER, 0, {"name": "m"}, tags=[["p", OWNER.pubkey], ["t", "bots"]])
    by_p = parse_filter({"#p": [OWNER.pubkey]}, max_limit=10)
    assert by_p.matches(tagged) and not by_p.matches(plain)
    assert not parse_filter({"#t": ["people"]}, max_limit=10).matches(tagged)
    assert event_of(profile(MEMBER, "x")).tags == []


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([], "a filter must be a JSON object"),
        ({"ids": "ab"}, "ids must be a list"),
        ({"ids": ["ab"]}, "64-character lowercase hex"),
        ({"authors": [OWNER.pubkey.upper()]}, "64-character lowercase hex"),
        ({"kinds": [1.5]}, "kinds must hold integers"),
        ({"kinds": [True]}, "kinds must hold integers"),
        ({"since": -1}, "since must be a whole number"),
        ({"limit": 11}, "more than this relay's max_limit, 10"),
        ({"#pp": ["x"]}, "unknown filter field '#pp'"),
        ({"#p": [1]}, "#p must be a list of strings"),
        ({"search": ""}, "search must be a non-empty string"),
        ({"kinds": list(range(MAX_VALUES + 1))}, f"at most {MAX_VALUES:,} per filter"),
        ({"color": 1}, "unknown filter field 'color'"),
    ],
)
def test_a_filter_that_cannot_be_honoured_is_refused_by_name(raw: object, words: str) -> None:
    with pytest.raises(FilterError, match=None) as caught:
        parse_filter(raw, max_limit=10)
    assert words in str(caught.value)


def test_empty_lists_and_closed_windows_match_nothing() -> None:
    assert parse_filter({"ids": []}, max_limit=10).empty
    assert parse_filter({"since": 5, "until": 4}, max_limit=10).empty
    assert not parse_filter({"since": 4, "until": 4}, max_limit=10).empty
