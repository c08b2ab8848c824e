"""Rate limits as the `limits` library keeps them: each budget counts on its own, a refused
call is not counted, and the refusal says when to come back (no server: the Throttle alone)."""

from __future__ import annotations

import pytest

from tms.config import Settings
from tms.errors import ConfigError, RateLimited, Refusal
from tms.guard.rates import RateLimits, Throttle, budget_of, parse_rates

pytestmark = pytest.mark.anyio

A = "a" * 64
B = "b" * 64


def throttle(**budgets: str) -> Throttle:
    return Throttle(RateLimits(**{name: parse_rates(name, text) for name, text in budgets.items()}))


async def test_a_key_over_its_budget_is_told_when_to_come_back() -> None:
    limits = throttle(key="3/minute")
    for _ in range(3):
        await limits.key(A)
    with pytest.raises(RateLimited) as refused:
        await limits.key(A)
    message = str(refused.value)
    assert message.startswith(
        "rate limited: too many requests from this key (at most 3 per minute)"
    )
    assert f"try again in {refused.value.retry_after} s" in message
    assert 1 <= refused.value.retry_after <= 60
    assert refused.value.refusal is Refusal.RATE_LIMITED and refused.value.pubkey == A


async def test_budgets_are_apart_per_key_and_per_kind() -> None:
    limits = throttle(key="1/minute", fetch="1/minute", login="1/minute", address="1/minute")
    await limits.key(A)
    await limits.key(B)  # another key: its own budget
    await limits.fetch(A)  # fetches have their own
    await limits.login(A)
    await limits.address("192.0.2.1")
    await limits.address("192.0.2.2")
    for spend in (limits.key(A), limits.fetch(A), limits.login(A), limits.address("192.0.2.1")):
        with pytest.raises(RateLimited):
            await spend


async def test_every_limit_of_a_budget_counts_and_refusals_cost_nothing() -> None:
    limits = throttle(key="2/second;3/minute")
    await limits.key(A)
    await limits.key(A)
    with pytest.raises(RateLimited, match="at most 2 per second"):
        await limits.key(A)  # refused: not counted against the minute
    limits_minute = throttle(key="5/second;2/minute")
    await limits_minute.key(A)
    await limits_minute.key(A)
    with pytest.raises(RateLimited, match="at most 2 per minute"):
        await limits_minute.key(A)


async def test_a_batch_costs_each_of_its_keys_once() -> None:
    limits = throttle(key="2/minute")
    await limits.keys([A, A, A, B])  # one call each
    await limits.keys([A, B])
    with pytest.raises(RateLimited):
        await limits.keys([B])


async def test_off_means_no_limit() -> None:
    limits = Throttle()
    for _ in range(1000):
        await limits.key(A)
        await limits.address("192.0.2.1")


def test_ipv6_clients_count_by_their_64() -> None:
    assert budget_of("2001:db8:1:2:3:4:5:6") == budget_of("2001:db8:1:2:ffff::1")
    assert budget_of("2001:db8:1:3::1") != budget_of("2001:db8:1:2::1")
    assert budget_of("::ffff:192.0.2.1") == budget_of("192.0.2.1") == "192.0.2.1"
    assert budget_of("testclient") == "testclient"


def test_settings_take_the_libraries_notation_or_off() -> None:
    settings = Settings.from_env(
        {"TMS_RATE_ADDRESS": "off", "TMS_RATE_KEY": "2 per 5 seconds", "TMS_RATE_LOGIN": "1/hour"}
    )
    assert settings.rates.address == ()
    assert [str(item) for item in settings.rates.key] == ["2 per 5 second"]
    assert settings.rates.fetch == RateLimits.defaults().fetch
    with pytest.raises(ConfigError, match="TMS_RATE_KEY must be rate limits"):
        Settings.from_env({"TMS_RATE_KEY": "lots"})


async def test_the_message_spells_out_multiples() -> None:
    limits = throttle(key="1 per 5 seconds")
    await limits.key(A)
    with pytest.raises(RateLimited, match=r"at most 1 per 5 seconds\); try again in [1-5] s"):
        await limits.key(A)
