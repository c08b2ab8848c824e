"""A postmaster that died and stays a zombie is a dead database to the watch (issue 34 item 7).

In a container whose PID 1 is `uv` (no init), the embedded PostgreSQL's postmaster is adopted by
PID 1 once `pg_ctl` exits, and PID 1 never reaps it: killed or crashed, it stayed a zombie, which
psutil (and so the wheel) reports running, so the watch never restarted it. Here the test's own
process plays that PID 1: it makes itself the child subreaper while the embedded PostgreSQL
starts, so the postmaster is adopted by it, and it reaps nothing until told to. The postmaster
is killed with SIGKILL: the watch reports it stopped and says why it cannot start it again (its
lock file names a process that exists: logged once, after 20 tries, since an init reaps at
once); once reaped, as an init does, the watch starts it again."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from tms.store import embedded
from tms.store.embedded import EmbeddedPostgres, alive

PR_SET_CHILD_SUBREAPER: Final = 36
WAIT_SECONDS: Final = 60

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="child subreapers are Linux's")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@pytest.fixture
def adopted(data_root: Path) -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL whose postmaster this process adopted (and never reaps)."""
    subreaper(True)
    try:
        embedded = EmbeddedPostgres.start(data_root / "adopted")
    finally:
        subreaper(False)
    try:
        yield embedded
    finally:
        embedded._server.cleanup()


def until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not done():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS} s: {what}"
        time.sleep(0.05)


@pytest.mark.anyio
async def test_a_zombie_postmaster_is_restarted_once_reaped(
    adopted: EmbeddedPostgres, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = adopted._server.get_pid()
    assert pid is not None and adopted.running()
    if parent(pid) != os.getpid():
        pytest.skip("the postmaster was not adopted by this process")
    caplog.set_level(logging.INFO, logger="tms.store.embedded")
    monkeypatch.setattr(embedded, "UNREAPED_TRIES", 2)  # said after 2 tries rather than 20
    watch = asyncio.create_task(adopted.supervise())
    try:
        os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(until, "the postmaster is a zombie", lambda: state(pid) == "Z")
        assert not alive(pid) and not adopted.running()  # psutil alone says it runs
        with pytest.raises(embedded.Unreaped, match=f"pid {pid}"):
            adopted.restart()
        await asyncio.to_thread(
            until, "the watch says why it cannot start it", lambda: "a zombie" in caplog.text
        )
        assert "has stopped; restarting it" in caplog.text
        assert f"pid {pid}" in caplog.text and f"pid {os.getpid()}" in caplog.text
        assert state(pid) == "Z"  # still unreaped: nothing was started beside it

        os.waitpid(pid, 0)  # what an init does at once
        await asyncio.to_thread(until, "the watch restarts it", adopted.running)
        again = adopted._server.get_pid()
        assert again is not None and again != pid
        await asyncio.to_thread(until, "it says so", lambda: "is running again" in caplog.text)
    finally:
        watch.cancel()
