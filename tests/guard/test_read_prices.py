"""What a relay read spends (`read_cost`, issue 26 items 5 and 12; issue 33 items 1 and 7): an
everyday one-filter REQ one unit, as before; a REQ by its filters and values, a filter of ids by
its pages of ids; a COUNT more; a NEG-OPEN by the items its list holds, a NEG-MSG by its bytes;
reads spend the key's read budget, whatever address they come from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import RateLimited
from tms.guard.rates import (
    COUNT_UNITS,
    RateLimits,
    Throttle,
    neg_msg_cost,
    neg_open_cost,
    parse_rates,
    read_cost,
)
from tms.nostr.filters import Filter, parse_filter

AUTHORS = [f"{n:064x}" for n in range(1000)]
IDS = [f"{n:064x}" for n in range(20_000)]


def filters(*raw: dict[str, object]) -> list[Filter]:
    return [parse_filter(r, max_limit=1000) for r in raw]


def test_prices() -> None:
    assert read_cost(filters({"kinds": [4702], "limit": 50})) == 1
    assert read_cost(filters({"authors": AUTHORS[:99]})) == 1
    assert read_cost(filters({"authors": AUTHORS})) == 11
    assert read_cost(filters(*[{"authors": AUTHORS}] * 10)) == 110
    assert read_cost(filters({"#p": AUTHORS[:500], "ids": AUTHORS[:500]})) == 10
    assert read_cost(filters({}), count=True) == COUNT_UNITS
    assert read_cost(filters({}, {}), count=True) == 2 * COUNT_UNITS
    assert read_cost([]) == 1


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=10))
def test_more_values_never_cost_less(sizes: list[int]) -> None:
    raw = [{"authors": AUTHORS[:n]} if n else {} for n in sizes]
    cost = read_cost(filters(*raw))
    assert cost >= len(sizes)
    assert read_cost(filters(*raw, {"authors": AUTHORS})) > cost
    assert read_cost(filters(*raw), count=True) > cost


@pytest.mark.anyio
async def test_a_big_read_spends_more_and_is_slowed_not_barred() -> None:
    throttle = Throttle(RateLimits(address=parse_rates("TMS_RATE_ADDRESS", "100/minute")))
    for _ in range(5):
        await throttle.address("192.0.2.1")
    with pytest.raises(RateLimited):  # 110 units, capped to the minute's 100: 5 already spent
        await throttle.address("192.0.2.1", 110)
    await throttle.address("192.0.2.1")  # a refused call spent nothing
    await throttle.address("192.0.2.2", 110)  # alone, it passes: capped, never barred for good
    with pytest.raises(RateLimited):
        await throttle.address("192.0.2.2")


def test_ids_cost_their_pages_not_their_messages() -> None:
    """Issue 33: `tms mirror`'s REQs of 100 ids cost one unit each, as one page of a stored
    answer does; a REQ of 3,000 ids costs what 30 of them cost, never more per row."""
    assert read_cost(filters({"ids": IDS[:100], "limit": 100})) == 1
    assert read_cost(filters({"ids": IDS[:101]})) == 2
    assert read_cost(filters({"ids": IDS[:3000]})) == 30
    assert read_cost(filters(*[{"ids": IDS[:100]}] * 10)) == 10
    assert read_cost(filters({"ids": IDS[:100]}), count=True) == COUNT_UNITS


@given(st.integers(0, 2_000_000), st.integers(0, 2_000_000))
def test_a_list_of_more_items_never_costs_less(few: int, more: int) -> None:
    few, more = sorted((few, more))
    assert 1 <= neg_open_cost(few) <= neg_open_cost(more)
    assert neg_open_cost(60_000) > 50 * neg_open_cost(100)
    assert 1 <= neg_msg_cost(few) <= neg_msg_cost(more)
    assert neg_msg_cost(1024 * 1024) > 200 * neg_msg_cost(100)


@pytest.mark.anyio
async def test_reads_spend_the_keys_budget_from_every_address() -> None:
    """The read budget is the key's: one key's reads from twenty addresses spend one budget
    (the address budget, one unit a message, is each address's)."""
    throttle = Throttle(RateLimits(read=parse_rates("TMS_RATE_READ", "100/minute")))
    await throttle.read("a" * 64, neg_open_cost(60_000))  # 61 units
    with pytest.raises(RateLimited, match="this key's reads"):
        await throttle.read("a" * 64, neg_open_cost(60_000))
    await throttle.read("b" * 64, neg_open_cost(60_000))  # another key: its own budget
