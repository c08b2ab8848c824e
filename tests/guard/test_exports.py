"""The export slots and lane (`tms.guard.exports`) on their own: one export at a time per key,
a few in all with a short wait for a turn, slots given back however an export ends, and chunks
made one export at a time, pausing while other requests are served."""

from __future__ import annotations

import asyncio
import time

import pytest

from tms.errors import RateLimited, Refusal
from tms.guard.exports import Exports, ExportsBusy

pytestmark = pytest.mark.anyio

A, B, C = "a" * 64, "b" * 64, "c" * 64


async def test_one_export_at_a_time_per_key() -> None:
    exports = Exports(at_once=4)
    async with exports.slot(A):
        with pytest.raises(RateLimited) as refused:
            async with exports.slot(A):
                pass
        assert refused.value.retry_after >= 1
        assert "already running" in str(refused.value)
        assert refused.value.refusal == Refusal.RATE_LIMITED and refused.value.pubkey == A
        async with exports.slot(B):  # another key is not held up
            pass
    async with exports.slot(A):  # the first one ended: free again
        pass


async def test_past_the_global_limit_an_export_waits_then_is_told_to_come_back() -> None:
    exports = Exports(at_once=2, wait_seconds=0.2)
    async with exports.slot(A), exports.slot(B):
        started = time.monotonic()
        with pytest.raises(ExportsBusy) as busy:
            async with exports.slot(C):
                pass
        assert time.monotonic() - started >= 0.2
        assert busy.value.retry_after >= 1
        assert "2 exports" in str(busy.value)
        assert not exports.running(C)  # its key is free to try again

    # A turn that comes free while it waits is taken.
    exports = Exports(at_once=1, wait_seconds=5)
    order: list[str] = []

    async def first() -> None:
        async with exports.slot(A):
            order.append("a")
            await asyncio.sleep(0.1)

    async def second() -> None:
        await asyncio.sleep(0.01)
        async with exports.slot(B):
            order.append("b")

    await asyncio.gather(first(), second())
    assert order == ["a", "b"]


async def test_a_slot_is_given_back_when_the_export_fails_or_is_cancelled() -> None:
    exports = Exports(at_once=1, wait_seconds=0.1)
    with pytest.raises(ValueError):
        async with exports.slot(A):
            raise ValueError("the export failed")
    task = asyncio.create_task(_hold(exports, A))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with exports.slot(A):  # neither left the key or the slot taken
        assert exports.running(A)
    assert not exports.running(A)


async def _hold(exports: Exports, key: str) -> None:
    async with exports.slot(key):
        await asyncio.sleep(60)


async def test_exports_make_their_chunks_one_at_a_time_and_yield_to_others() -> None:
    exports = Exports(at_once=4)
    inside = 0
    most = 0

    async def chunk() -> None:
        nonlocal inside, most
        async with exports.turn():
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.005)  # a chunk's database round trip
            time.sleep(0.01)  # and the work of making its lines
            inside -= 1

    others_waited: list[float] = []

    async def other_work() -> None:
        """Something else on the loop (a publish): how long each of its turns waited."""
        for _ in range(20):
            asked = time.perf_counter()
            await asyncio.sleep(0)
            others_waited.append(time.perf_counter() - asked)
            time.sleep(0.002)

    await asyncio.gather(*(chunk() for _ in range(12)), other_work())
    assert most == 1  # never two exports' chunks at once
    # The other work waits behind one chunk at most (about 15 ms here), never behind all.
    assert max(others_waited) < 0.1, others_waited


async def test_while_other_requests_are_served_exports_leave_them_the_loop() -> None:
    """A chunk that took 20 ms is followed by a 20 ms pause while another request is being
    served, and by none when the export is alone."""
    exports = Exports(at_once=2)

    async def one_turn() -> float:
        started = time.perf_counter()
        async with exports.turn():
            time.sleep(0.02)  # making the chunk's lines
        return time.perf_counter() - started

    alone = await one_turn()
    with exports.other_request():
        assert exports.others == 1
        shared = await one_turn()
    assert exports.others == 0
    assert alone < 0.035 and shared >= 0.04, (alone, shared)
