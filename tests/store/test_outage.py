"""`tms.store.outage`: however many parts meet the database down, the log gets one line when the
outage starts and one when the database answers again; asyncpg's reconnection warnings (each
with a traceback) are folded in. The server's own outage is in test_supervision.py."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tms.store.outage import ASYNCPG_POOL_LOGGER, Outage

pytestmark = pytest.mark.anyio

LOGGER = "tms.database"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_many_failures_are_one_line_and_the_return_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    outage = Outage()
    outage.failed("the health check", "[Errno 111] Connection refused")
    for where in ("GET /c/x/export.jsonl", "the tool list_collections", "the refusal log"):
        outage.failed(where, ConnectionRefusedError(111, "Connection refused"))
    assert outage.down
    outage.answered()
    outage.answered()  # already over: nothing more
    assert not outage.down
    [down, back] = lines(caplog)
    assert down.startswith(
        "database unavailable, first noticed by the health check: [Errno 111] Connection refused;"
    )
    assert back.startswith("database answers again, after ")
    assert back.endswith(" s unavailable (4 failures met meanwhile)")
    # The next outage is logged again.
    outage.failed("the health check", "gone again")
    assert lines(caplog)[-1].startswith("database unavailable, first noticed by the health check")


async def test_the_probe_logs_the_return_with_no_request_coming(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = ["still down", "still down", None]

    async def probe() -> str | None:
        return answers.pop(0)

    outage = Outage(probe, every=0.01)
    outage.failed("a connection pool reconnecting", "refused")
    for _ in range(200):
        if not outage.down:
            break
        await asyncio.sleep(0.01)
    assert not outage.down and answers == []
    assert lines(caplog)[-1].endswith("(1 failure met meanwhile)")
    await outage.close()


async def test_a_probe_that_raises_is_one_more_failure(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def probe() -> str | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("no route")
        return None

    outage = Outage(probe, every=0.01)
    outage.failed("the health check", "refused")
    for _ in range(200):
        if not outage.down:
            break
        await asyncio.sleep(0.01)
    assert calls == 2 and not outage.down
    await outage.close()


async def test_asyncpgs_reconnection_warnings_are_folded_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage()
    pool_log = logging.getLogger(ASYNCPG_POOL_LOGGER)
    with outage.folding_asyncpg():
        for _ in range(3):
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except ConnectionRefusedError:
                pool_log.warning(
                    "Failed to restore the pool connection floor; retrying", exc_info=True
                )
        pool_log.warning("something else asyncpg says")
    assert outage.down
    assert lines(caplog) == [
        "database unavailable, first noticed by a connection pool reconnecting: [Errno 111] "
        'Connection refused; requests are answered "database unavailable, try again shortly" '
        "and nothing more is logged about it until it answers again",
        "something else asyncpg says",
    ]
    assert not any(r.exc_info for r in caplog.records)
    # Outside the block, asyncpg's logger is left as it was.
    pool_log.warning("Failed to restore the pool connection floor; retrying")
    assert lines(caplog)[-1] == "Failed to restore the pool connection floor; retrying"
