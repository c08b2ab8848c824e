"""NIP-01 filters: parsed within bounds, refused with the field's name, matched as NIP-01 says."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import pytest
from factories import MEMBER, OWNER, claim, profile, sign
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.nostr.events import Event
from tms.nostr.filters import (
    MAX_IDS,
    MAX_TAG_VALUE_CHARS,
    MAX_VALUES,
    VALUE_OVERHEAD,
    FilterError,
    id_pages,
    parse_filter,
)
from tms.relay.limits import MAX_MESSAGE_BYTES, OUTBOX_BYTES
from tms.relay.messages import ReqMessage, parse
from tms.relay.reading import Sent


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


def test_ids_have_a_cap_of_their_own_and_may_ask_for_as_many_as_they_name() -> None:
    """Issue 33: NDK fetches what NIP-77 said it lacks with one filter of every id (6,007 once
    met `at most 1,000 per filter`): ids go up to `MAX_IDS`, beside 1,000 other values, and such
    a filter's `limit` may be as large as its ids, never larger."""
    ids = [f"{n:064x}" for n in range(MAX_IDS + 1)]
    wanted = parse_filter({"ids": ids[:6007], "limit": 6007, "kinds": [4702]}, max_limit=1000)
    assert wanted.ids is not None and len(wanted.ids) == 6007
    with pytest.raises(FilterError, match=f"ids has {MAX_IDS + 1:,} values; at most {MAX_IDS:,}"):
        parse_filter({"ids": ids}, max_limit=1000)
    with pytest.raises(FilterError, match="limit 6008 is more than this relay's max_limit, 1000"):
        parse_filter({"ids": ids[:6007], "limit": 6008}, max_limit=1000)
    with pytest.raises(FilterError, match="limit 1001 is more"):
        parse_filter({"kinds": [4702], "limit": 1001}, max_limit=1000)


def test_a_message_of_ids_is_held_compactly_within_a_connections_budget() -> None:
    """Issue 33: NDK catching up a member more than 20,000 events behind sends them all in one
    filter, which met `at most 20,000 per filter`. A REQ of as many ids as a relay message
    holds (200,000: 13.4 MB of JSON) is taken, and its filter holds 32 bytes an id, within a
    connection's 8 MiB budget (as strings in a set: about 30 MB); it is read 100 ids at a time,
    in order, matched like any filter; the ids of what its answer sent are packed alike."""
    ids = [hashlib.sha256(str(n).encode()).hexdigest() for n in range(MAX_IDS)]
    text = json.dumps(["REQ", "catchup", {"ids": ids}])
    assert len(text) < MAX_MESSAGE_BYTES
    tracemalloc.start()
    try:
        message = parse(text)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert isinstance(message, ReqMessage)
    (wanted,) = message.filters
    assert wanted.ids is not None and len(wanted.ids) == MAX_IDS
    assert held < 7 * 1024 * 1024, f"{held:,} bytes held"
    assert wanted.size < OUTBOX_BYTES
    assert ids[123] in wanted.ids and "f" * 64 not in wanted.ids and 7 not in wanted.ids
    pages = id_pages(wanted.ids, 100)
    first, second = next(pages), next(pages)
    ordered = sorted(ids)
    assert first == frozenset(ordered[:100]) and second == frozenset(ordered[100:200])
    assert sum(len(page) for page in pages) == MAX_IDS - 200
    said = event_of(claim(MEMBER, "rel", "A claim.", created_at=1_000))
    assert not wanted.matches(said)
    assert parse_filter({"ids": [said.id, *ids[:2000]]}, max_limit=10).matches(said)
    sent = Sent()
    for event_id in ordered[:10_000]:
        sent.add(event_id)
    assert all(event_id in sent for event_id in ordered[:10_000:97])
    assert ordered[10_000] not in sent
    with pytest.raises(FilterError, match="ids must hold 64-character lowercase hex"):
        parse_filter({"ids": [*ids[:5000], ids[0].upper()]}, max_limit=10)
    with pytest.raises(FilterError, match="a filter of more than 20,000 ids is answered whole"):
        parse_filter({"ids": ids[:30_000], "limit": 500}, max_limit=1000)


def test_a_filter_is_capped_as_a_whole_not_only_list_by_list() -> None:
    """52 tag fields of 1,000 values each once made one filter of 52,000 values (issue 26)."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    wide = {f"#{letter}": [f"v{n}" for n in range(MAX_VALUES // 4)] for letter in letters[:5]}
    with pytest.raises(FilterError) as caught:
        parse_filter(wide, max_limit=10)
    assert f"{5 * (MAX_VALUES // 4):,} authors, kinds and tag values in all" in str(caught.value)
    assert f"at most {MAX_VALUES:,} per filter" in str(caught.value)
    with pytest.raises(FilterError, match="at most 1,024 per value"):
        parse_filter({"#t": ["x" * (MAX_TAG_VALUE_CHARS + 1)]}, max_limit=10)
    parse_filter({"#t": ["x" * MAX_TAG_VALUE_CHARS]}, max_limit=10)


@given(
    st.dictionaries(
        st.sampled_from(["#a", "#b", "#e", "#p", "#t", "#Z"]),
        st.lists(st.text(max_size=8), max_size=400),
        max_size=6,
    )
)
@settings(max_examples=60, deadline=None)
def test_any_accepted_filter_holds_at_most_max_values_and_a_bounded_size(
    raw: dict[str, list[str]],
) -> None:
    total = sum(len(values) for values in raw.values())
    try:
        parsed = parse_filter(raw, max_limit=10)
    except FilterError as exc:
        assert total > MAX_VALUES and "per filter" in str(exc)
        return
    held = sum(len(values) for values in parsed.tags.values())
    assert held <= MAX_VALUES
    assert parsed.size <= 512 + MAX_VALUES * (VALUE_OVERHEAD + 4 * MAX_TAG_VALUE_CHARS)
    assert parsed.size >= sum(
        len(value.encode("utf-8", "surrogatepass")) for values in raw.values() for value in values
    )


def test_a_filters_size_counts_bytes_not_characters() -> None:
    """A budget counts bytes: 1,024 characters of a tag value may hold 4 KB."""
    ascii_ = parse_filter({"#t": ["a" * MAX_TAG_VALUE_CHARS]}, max_limit=10)
    wide = parse_filter({"#t": ["\U0001f600" * MAX_TAG_VALUE_CHARS]}, max_limit=10)
    assert wide.size - ascii_.size == 3 * MAX_TAG_VALUE_CHARS
    search = parse_filter({"search": "\u00e9" * 1000}, max_limit=10)
    assert search.size >= 2000


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "ids": st.lists(st.sampled_from(["ab" * 32, "cd" * 32]), max_size=2),
            "kinds": st.lists(st.integers(0, 65535), max_size=3),
            "#e": st.lists(st.text(max_size=4), max_size=3),
            "since": st.integers(0, 2**31),
            "limit": st.integers(0, 10),
            "search": st.text("abc ", min_size=1, max_size=5).filter(str.strip),
        },
    )
)
@settings(max_examples=60, deadline=None)
def test_a_filter_as_a_read_filter_is_shown_it_reads_back_as_itself(raw: dict[str, object]) -> None:
    parsed = parse_filter(raw, max_limit=10)
    shown = parsed.to_dict()
    assert parse_filter(shown, max_limit=10) == parsed
    assert set(shown) == set(raw)
