"""What a relay read spends of its address's budget (`read_cost`, issue 26 items 5 and 12): an
everyday one-filter REQ one unit, as before; a REQ by its filters and values; a COUNT more."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import RateLimited
from tms.guard.rates import COUNT_UNITS, RateLimits, Throttle, parse_rates, read_cost
from tms.nostr.filters import Filter, parse_filter

AUTHORS = [f"{n:064x}" for n in range(1000)]


def filters(*raw: dict[str, object]) -> list[Filter]:
    return [parse_filter(r, max_limit=1000) for r in raw]


def test_prices() -> None:
    assert read_cost(filters({"kinds": [4702], "limit": 50})) == 1
    assert read_cost(filters({"authors": AUTHORS[:99]})) == 1
    assert read_cost(filters({"authors": AUTHORS})) == 11
    assert read_cost(filters(*[{"authors": AUTHORS}] * 10)) == 110
    assert read_cost(filters({"#p": AUTHORS[:500], "ids": AUTHORS[:500]})) == 11
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
