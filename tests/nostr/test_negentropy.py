"""Negentropy protocol V1 (tms.nostr.negentropy) against the protocol document's rules: the wire
encoding, fingerprints, both roles reconciling random sets to the exact difference, every
message within frameSizeLimit, and bad messages refused with NegentropyError only."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tms.nostr.negentropy import (
    INFINITY,
    Initiator,
    Items,
    NegentropyError,
    Responder,
    fingerprint_of,
    insertion_points,
    item_order,
    varint,
)


def reconcile(
    ours: Items, theirs: Items, frame: int = 0
) -> tuple[set[bytes], set[bytes], list[bytes]]:
    """Run both roles to the end: what the initiator has, what it needs, every message."""
    initiator, responder = Initiator(ours, frame), Responder(theirs, frame)
    message: bytes | None = initiator.initiate()
    sent: list[bytes] = []
    have: set[bytes] = set()
    need: set[bytes] = set()
    for _ in range(10_000):
        if message is None:
            return have, need, sent
        sent.append(message)
        reply = responder.respond(message)
        sent.append(reply)
        message, has, needs = initiator.reconcile(reply)
        have.update(has)
        need.update(needs)
    raise AssertionError("no end to the reconciliation")


def test_varints_are_base_128_most_significant_first() -> None:
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(128) == b"\x81\x00"
    assert varint(300) == b"\x82\x2c"
    assert varint(2**64 - 1) == b"\x81" + b"\xff" * 8 + b"\x7f"


def test_a_fingerprint_is_sha256_of_the_id_sum_and_the_count() -> None:
    ids = [os.urandom(32) for _ in range(1000)]
    items = Items.of((i % 7, item_id) for i, item_id in enumerate(ids))
    total = sum(int.from_bytes(i, "little") for i in ids) % 2**256
    expected = hashlib.sha256(total.to_bytes(32, "little") + varint(1000)).digest()[:16]
    assert items.fingerprint(0, len(items)) == expected
    assert fingerprint_of(total, 1000) == expected
    for lo, hi in [(0, 0), (3, 900), (255, 513), (1, 999), (600, 600)]:  # across the blocks
        part = sum(int.from_bytes(items.id(i), "little") for i in range(lo, hi))
        assert items.fingerprint(lo, hi) == fingerprint_of(part, hi - lo)


def test_an_empty_initiator_asks_for_every_id_in_one_range() -> None:
    # version 0x61, bound infinity (timestamp 0, no prefix), IdList, no ids
    assert Initiator(Items.of([])).initiate() == bytes.fromhex("6100000200")


def test_a_responder_answers_another_version_with_its_own_only() -> None:
    assert Responder(Items.of([])).respond(b"\x62\x00\x00\x02\x00") == b"\x61"
    with pytest.raises(NegentropyError, match="V2"):
        Initiator(Items.of([])).reconcile(b"\x62")
    with pytest.raises(NegentropyError, match="first byte"):
        Responder(Items.of([])).respond(b"\x10")


def test_items_are_sorted_by_timestamp_then_id_and_deduplicated() -> None:
    a, b, c = b"\x01" * 32, b"\x02" * 32, b"\xff" * 32
    items = Items.of([(5, c), (5, a), (1, c), (5, b), (5, a)])
    assert [(items.timestamp(i), items.id(i)) for i in range(len(items))] == [
        (1, c),
        (5, a),
        (5, b),
        (5, c),
    ]


def test_a_large_set_splits_into_16_fingerprinted_buckets() -> None:
    items = Items.of((i, os.urandom(32)) for i in range(100))
    message = Initiator(items).initiate()
    assert message[0] == 0x61
    # the version, then 16 ranges of a bound (a 1-byte timestamp delta, no prefix: the
    # timestamps differ; the last one infinity, 0), mode 1 and 16 bytes of fingerprint
    assert len(message) == 1 + 16 * (2 + 1 + 16)
    assert message[-19:-17] == b"\x00\x00" and message[-17] == 1
    assert message[-16:] == items.fingerprint(94, 100)


def _ids(draw_prefixes: int) -> st.SearchStrategy[bytes]:
    """Ids that often share long prefixes, so the bounds need them."""
    return st.tuples(st.integers(0, draw_prefixes), st.binary(min_size=32, max_size=32)).map(
        lambda pair: bytes([pair[0]]) * 20 + pair[1][20:] if pair[0] else pair[1]
    )


_ITEMS = st.lists(st.tuples(st.integers(0, 20), _ids(3)), max_size=400, unique_by=lambda p: p[1])


@settings(max_examples=60, deadline=None)
@given(
    common=_ITEMS,
    only_ours=_ITEMS,
    only_theirs=_ITEMS,
    frame=st.sampled_from([0, 4096, 5000]),
)
def test_two_random_sets_converge_to_their_exact_difference(
    common: list[tuple[int, bytes]],
    only_ours: list[tuple[int, bytes]],
    only_theirs: list[tuple[int, bytes]],
    frame: int,
) -> None:
    mine = {i for _, i in common}
    only_ours = [p for p in only_ours if p[1] not in mine]
    mine |= {i for _, i in only_ours}
    only_theirs = [p for p in only_theirs if p[1] not in mine]
    ours = Items.of(common + only_ours)
    theirs = Items.of(common + only_theirs)
    have, need, sent = reconcile(ours, theirs, frame)
    assert have == {i for _, i in only_ours}
    assert need == {i for _, i in only_theirs}
    if frame:
        assert all(len(m) <= frame for m in sent)


def test_a_frame_size_limit_spreads_a_big_answer_over_rounds() -> None:
    theirs = Items.of((i // 3, os.urandom(32)) for i in range(5000))
    have, need, sent = reconcile(Items.of([]), theirs, 4096)
    assert not have and len(need) == 5000
    assert max(len(m) for m in sent) <= 4096
    assert len(sent) > 2 * (5000 * 32 // 4096)
    with pytest.raises(ValueError, match="4,096"):
        Responder(theirs, 1000)


def test_ten_differences_in_a_hundred_thousand_cost_a_few_rounds_and_kilobytes() -> None:
    pairs = [(1_700_000_000 + i // 10, os.urandom(32)) for i in range(100_000)]
    extra = [(1_700_000_000 + i * 997, os.urandom(32)) for i in range(10)]
    have, need, sent = reconcile(Items.of(pairs), Items.of(pairs + extra), 60_000)
    assert not have and need == {i for _, i in extra}
    assert len(sent) <= 12
    assert sum(len(m) for m in sent) < 40_000


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=200), initiator=st.booleans())
def test_any_bytes_are_answered_or_refused_with_negentropy_error(
    garbage: bytes, initiator: bool
) -> None:
    items = Items.of((i, bytes([i]) * 32) for i in range(40))
    try:
        if initiator:
            Initiator(items).reconcile(garbage)
        else:
            Responder(items, 4096).respond(garbage)
    except NegentropyError:
        pass


def test_an_id_list_longer_than_its_message_is_refused_before_any_work() -> None:
    with pytest.raises(NegentropyError, match="longer than the message"):
        Responder(Items.of([])).respond(b"\x61\x00\x00\x02" + varint(10**9))


def test_a_timestamp_past_64_bits_is_refused() -> None:
    with pytest.raises(NegentropyError):
        Responder(Items.of([])).respond(b"\x61" + (varint(INFINITY) + b"\x00\x00") * 2)


_PAIRS = st.lists(
    st.tuples(st.integers(0, 5), st.binary(min_size=32, max_size=32)),
    max_size=60,
    unique_by=lambda p: p[1],
)


def _arrays(pairs: list[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    ts = np.array([t for t, _ in pairs], dtype=np.uint64)
    ids = np.frombuffer(b"".join(i for _, i in pairs), dtype=np.uint8).reshape(len(pairs), 32)
    return ts, ids


@given(_PAIRS)
def test_item_order_sorts_by_timestamp_then_id(pairs: list[tuple[int, bytes]]) -> None:
    ts, ids = _arrays(pairs)
    order = item_order(ts, ids)
    ranked = pairs if order is None else [pairs[k] for k in order.tolist()]
    assert ranked == sorted(pairs)
    assert (order is None) == (pairs == sorted(pairs))


@given(_PAIRS, _PAIRS)
def test_insertion_points_keep_a_sorted_list_sorted(
    base: list[tuple[int, bytes]], added: list[tuple[int, bytes]]
) -> None:
    """A few items merged into a kept list (tms.ledger.read.negentropy_items) by np.insert at these
    points: the result is the sorted union, ties on the timestamp ordered by id."""
    base = sorted(base)
    added = sorted(p for p in added if p not in base)
    ts, ids = _arrays(base)
    new_ts, new_ids = _arrays(added)
    points = insertion_points(ts, ids, new_ts, new_ids)
    merged_ts = np.insert(ts, points, new_ts)
    merged_ids = np.insert(ids, points, new_ids, axis=0)
    merged = [(int(t), merged_ids[k].tobytes()) for k, t in enumerate(merged_ts.tolist())]
    assert merged == sorted(base + added)
    assert item_order(merged_ts, merged_ids) is None


def test_items_of_hex_columns_are_the_items_of_their_pairs() -> None:
    """A mirror builds its items from two columns (`Items.of_hex`): the same set as pairs."""
    ids = [os.urandom(32) for _ in range(300)]
    stamps = [1_700_000_000 + (n * 7919) % 50 for n in range(300)]
    columns = Items.of_hex(stamps, [i.hex() for i in ids])
    pairs = Items.of(zip(stamps, ids, strict=True))
    assert np.array_equal(columns.timestamps, pairs.timestamps)
    assert np.array_equal(columns.ids, pairs.ids)
    with pytest.raises(ValueError):
        Items.of_hex([1], ["ab"])
