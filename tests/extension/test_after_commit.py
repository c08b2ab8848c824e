"""After-commit hooks: each committed batch handed to every hook in commit order, off the
caller's path; a full queue drops and counts rather than waits; a hook that raises or hangs is
logged and counted, never raised into the caller; stopping drains within its grace."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import REGISTRY

from tms.extension import AfterCommit, Committed, Door, Origin
from tms.plugins.hooks import AfterCommitHooks

pytestmark = pytest.mark.anyio

ORIGIN = Origin(Door.MCP, address="127.0.0.1")


def committed(number: int) -> Committed:
    return Committed((f"{number:064x}",), ("mcas",), ORIGIN)


def batches(plugin: str, outcome: str) -> float:
    labels = {"plugin": plugin, "outcome": outcome}
    return REGISTRY.get_sample_value("tms_plugin_hook_batches_total", labels) or 0.0


def failures(plugin: str, cause: str) -> float:
    labels = {"plugin": plugin, "seam": "after_commit", "cause": cause}
    return REGISTRY.get_sample_value("tms_plugin_failures_total", labels) or 0.0


async def test_batches_reach_every_hook_in_commit_order() -> None:
    seen: dict[str, list[Committed]] = {"one": [], "two": []}

    def recorder(name: str) -> AfterCommit:
        async def hook(batch: Committed) -> None:
            await asyncio.sleep(0)
            seen[name].append(batch)

        return hook

    hooks = AfterCommitHooks(
        [("one", recorder("one")), ("two", recorder("two"))], queue=100, seconds=1
    )
    done = batches("one", "done")
    hooks.submit(committed(0))  # before start: queued
    await hooks.start()
    for number in range(1, 20):
        hooks.submit(committed(number))
    await hooks.stop()
    expected = [committed(number) for number in range(20)]
    assert seen == {"one": expected, "two": expected}
    assert batches("one", "done") == done + 20


async def test_a_full_queue_drops_and_counts_without_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Committed] = []

    async def hook(batch: Committed) -> None:
        seen.append(batch)

    hooks = AfterCommitHooks([("full", hook)], queue=2, seconds=1)
    dropped = batches("full", "dropped")
    clock = time.monotonic()
    with caplog.at_level(logging.WARNING, "tms.extension"):
        for number in range(5):  # no worker yet: two fit
            hooks.submit(committed(number))
    assert time.monotonic() - clock < 0.5
    assert batches("full", "dropped") == dropped + 3
    assert caplog.text.count("after-commit queue is full") == 1  # said once per spell
    await hooks.start()
    await hooks.stop()
    assert seen == [committed(0), committed(1)]
    assert "has room again; 3 batches were dropped" in caplog.text


async def test_a_hook_that_raises_or_hangs_is_counted_and_the_rest_still_delivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[int] = []

    async def moody(batch: Committed) -> None:
        number = int(batch.ids[0], 16)
        if number == 1:
            raise RuntimeError("webhook down")
        if number == 2:
            await asyncio.sleep(30)
        seen.append(number)

    raised, timed_out = failures("moody", "raised"), failures("moody", "timeout")
    failed = batches("moody", "failed")
    hooks = AfterCommitHooks([("moody", moody)], queue=10, seconds=0.1)
    await hooks.start()
    with caplog.at_level(logging.WARNING, "tms.extension"):
        for number in range(4):
            hooks.submit(committed(number))
        await hooks.stop()
    assert seen == [0, 3]
    assert (failures("moody", "raised"), failures("moody", "timeout")) == (
        raised + 1,
        timed_out + 1,
    )
    assert batches("moody", "failed") == failed + 2
    assert "webhook down" in caplog.text and "did not finish within 0.1 s" in caplog.text


async def test_stopping_gives_the_queue_its_grace_then_drops_the_rest() -> None:
    async def slow(batch: Committed) -> None:
        await asyncio.sleep(0.2)

    hooks = AfterCommitHooks([("slow", slow)], queue=10, seconds=5)
    dropped = batches("slow", "dropped")
    await hooks.start()
    for number in range(5):
        hooks.submit(committed(number))
    clock = time.monotonic()
    await hooks.stop(grace=0.3)
    assert time.monotonic() - clock < 1
    # one or two delivered within the grace, the one under way and those queued dropped
    assert batches("slow", "dropped") - dropped >= 3
    hooks.submit(committed(9))  # after stop: dropped, counted, no error
    assert batches("slow", "dropped") - dropped >= 4


async def test_a_hook_failing_on_every_batch_is_one_line_then_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a traceback per batch: the first failure in one line (plugin, hook, the error's
    text), the other 49 summed up in one more when the spell ends (here: at stop)."""

    async def down(batch: Committed) -> None:
        raise ConnectionError(f"webhook down\n(batch {int(batch.ids[0], 16)})")

    hooks = AfterCommitHooks([("down", down)], queue=100, seconds=5)
    await hooks.start()
    with caplog.at_level(logging.INFO, "tms.extension"):
        for number in range(50):
            hooks.submit(committed(number))
        await hooks.stop()
    lines = [line for record in caplog.records for line in record.getMessage().splitlines()]
    first, summed = lines  # and nothing else
    assert (
        first
        == "plugin down: its after-commit hook failed: ConnectionError: webhook down (batch 0)"
    )
    assert summed.startswith("plugin down: its after-commit hook failed 49 more times in the last ")
    assert summed.endswith(" s: ConnectionError: webhook down (batch 49)")
    assert not any(record.exc_info for record in caplog.records)
