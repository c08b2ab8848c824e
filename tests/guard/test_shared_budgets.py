"""The budgets and connection counts the workers of `tms serve --workers N` share
(`tms.guard.shared`): a client's budget is the same however its calls spread over the workers,
and a worker that dies takes its connection counts with it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.errors import RateLimited
from tms.guard.rates import RateLimits, Throttle, parse_rates
from tms.guard.shared import SharedCounts, SharedStorage

# Windows of an hour: a call's outcome then depends on the calls before it, not on the clock.
LIMITS = RateLimits(
    address=parse_rates("TMS_RATE_ADDRESS", "7/hour;12/day"),
    read=parse_rates("TMS_RATE_READ", "20/hour"),
)
WORKERS = 3
_fresh = itertools.count()


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("shared") / "counts"
    SharedCounts(path, create=True).close()
    yield path


async def _spent(throttle: Throttle, budget: str, who: str, cost: int) -> bool:
    try:
        if budget == "address":
            await throttle.address(who, cost)
        else:
            await throttle.read(who, cost)
    except RateLimited:
        return False
    return True


@given(
    calls=st.lists(
        st.tuples(
            st.integers(0, WORKERS - 1),  # the worker the call reaches
            st.sampled_from(["address", "read"]),
            st.integers(1, 6),  # its cost
        ),
        max_size=40,
    )
)
def test_a_clients_budget_is_the_same_with_one_or_n_workers(
    table: Path, calls: list[tuple[int, str, int]]
) -> None:
    """Each call's outcome, passed or refused, is the same whichever worker it reaches (each
    worker its own handle on the table, as a process has) as with one process alone."""
    who = f"10.0.0.{next(_fresh)}"  # a client no other example has spent
    alone = Throttle(LIMITS)
    handles = [SharedCounts(table) for _ in range(WORKERS)]
    workers = [Throttle(LIMITS, SharedStorage(handle)) for handle in handles]

    async def run() -> tuple[list[bool], list[bool]]:
        one = [await _spent(alone, budget, who, cost) for _, budget, cost in calls]
        many = [await _spent(workers[n], budget, who, cost) for n, budget, cost in calls]
        return one, many

    try:
        one, many = asyncio.run(run())
    finally:
        for handle in handles:
            handle.close()
    assert many == one


def test_concurrent_workers_never_spend_past_the_budget(tmp_path: Path) -> None:
    """Processes racing on one budget: exactly its amount passes."""
    import multiprocessing

    path = tmp_path / "counts"
    SharedCounts(path, create=True).close()
    context = multiprocessing.get_context("fork")
    with context.Pool(4) as pool:
        passed = sum(pool.map(_spend_many, [str(path)] * 4))
    assert passed == 12


def _spend_many(path: str) -> int:
    handle = SharedCounts(Path(path))
    throttle = Throttle(
        RateLimits(address=parse_rates("TMS_RATE_ADDRESS", "12/hour")), SharedStorage(handle)
    )

    async def run() -> int:
        return sum([await _spent(throttle, "address", "192.0.2.9", 1) for _ in range(10)])

    try:
        return asyncio.run(run())
    finally:
        handle.close()


def test_a_dead_workers_connections_are_forgotten(tmp_path: Path) -> None:
    counts = SharedCounts(tmp_path / "counts", create=True)
    try:
        for owner in (0, 1, 1):
            counts.add("address/192.0.2.1", 1, owner=owner)
        assert counts.total("address/192.0.2.1") == 3
        assert counts.total("address/192.0.2.1", besides=0) == 2
        assert counts.forget_owner(1) == 1
        assert counts.total("address/192.0.2.1") == 1
        counts.add("address/192.0.2.1", -1, owner=0)
        assert counts.total("address/192.0.2.1") == 0
    finally:
        counts.close()


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "put", "clear", "get", "total"]),
            st.integers(0, 40),  # the name
            st.integers(-1, 3),  # the owner (-1: the budgets')
            st.integers(-3, 5),  # an amount or value
        ),
        max_size=60,
    )
)
def test_the_table_keeps_what_a_dictionary_would(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int, int]]
) -> None:
    """Each name's count per owner, as a dictionary holds them (no window expires here and no
    neighbourhood fills): names found by their hash's bytes, wherever they sit."""
    counts = SharedCounts(tmp_path_factory.mktemp("table") / "counts", create=True)
    model: dict[tuple[str, int], int] = {}
    try:
        for op, number, owner, amount in ops:
            name = f"name/{number}"
            if op == "add":
                after = max(0, model.get((name, owner), 0) + amount)
                assert counts.add(name, amount, owner=owner) == after
                model[(name, owner)] = after
            elif op == "put" and owner != -1:
                counts.put(name, amount, owner=owner)
                model[(name, owner)] = max(0, amount)
            elif op == "clear":
                counts.clear(name, owner)
                model.pop((name, owner), None)
            elif op == "get":
                assert counts.get(name, owner)[0] == model.get((name, owner), 0)
            elif op == "total":
                expected = sum(n for (k, o), n in model.items() if k == name and o != -1)
                assert counts.total(name) == expected
    finally:
        counts.close()
