"""`tms.mirror.pace`: what a mirror learns of the server's rate limits, from its NIP-11 document
and its refusals, and what it counts each message as spending."""

from __future__ import annotations

import pytest

from tms.mirror.pace import ADDRESS, KEY, MAX_REFUSALS, READ, Pace, Refusing, limits_of

# The document of a relay that states its limits and prices (tms.relay.info, issue 33)
STATED = {
    "limitation": {
        "max_ids_per_filter": 20000,
        "rate_limits": {
            "address": [{"amount": 40, "seconds": 1}, {"amount": 1200, "seconds": 60}],
            "read": [{"amount": 100, "seconds": 1}, {"amount": 3000, "seconds": 60}],
            "read_costs": {"ids_per_unit": 100, "neg_msg_bytes_per_unit": 4096},
        },
    }
}


def test_the_stated_limits_and_prices_are_read() -> None:
    pace = Pace.of(STATED)
    assert sorted(pace.budgets[ADDRESS].buckets) == [1.0, 60.0]
    assert sorted(pace.budgets[READ].buckets) == [1.0, 60.0]
    assert not pace.budgets[KEY].buckets
    assert pace.ids_per_filter == 20000
    req = ["REQ", "s", {"ids": ["0" * 64] * 1000, "limit": 1000}]
    assert pace.costs(req) == {ADDRESS: 1, KEY: 0, READ: 10}
    neg = ["NEG-MSG", "n", "61" * 10000]
    assert pace.costs(neg)[READ] == 1 + 10000 // 4096


def test_a_server_that_states_nothing_is_priced_as_before() -> None:
    pace = Pace.of({"limitation": {}})
    assert all(not budget.buckets for budget in pace.budgets.values())
    req = ["REQ", "s", {"ids": ["0" * 64] * 100, "limit": 100}]
    assert pace.costs(req) == {ADDRESS: 2, KEY: 1, READ: 0}
    assert pace.costs(["CLOSE", "s"]) == {ADDRESS: 1, KEY: 0, READ: 0}


def test_a_refusal_teaches_the_limit_and_the_wait() -> None:
    pace = Pace()
    said = (
        "rate-limited: rate limited: too many requests from this key's reads (at most 3000 per "
        "minute); try again in 7 s"
    )
    assert pace.refused(said) == 7
    assert list(pace.budgets[READ].buckets) == [60.0]
    assert pace.budgets[READ].wait_for(1) > 6
    assert pace.refused('{"error": "... from this address (at most 40 per second) ..."}', "3") == 3
    assert list(pace.budgets[ADDRESS].buckets) == [1.0]
    assert pace.refused("rate-limited: try again in 999999 s") == 120  # never waited for ever


def test_refusals_in_a_row_end_it_and_anything_served_starts_them_again() -> None:
    pace = Pace()
    for _ in range(MAX_REFUSALS):
        pace.refused("rate-limited: slow down")
    pace.served()
    pace.refused("rate-limited: slow down")
    for _ in range(MAX_REFUSALS - 1):
        pace.refused("rate-limited: slow down")
    with pytest.raises(Refusing, match="refused 30 times in a row"):
        pace.refused("rate-limited: slow down")


def test_limits_in_both_notations() -> None:
    assert limits_of("40/second;1200/minute") == [(40, 1.0), (1200, 60.0)]
    assert limits_of("at most 1200 per 2 minutes") == [(1200, 120.0)]
