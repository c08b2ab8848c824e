"""The threads NIP-77's work runs on: building and sealing a session's list, and answering its
messages, are CPU work that must not hold the event loop, nor share asyncio's default pool with
what else runs there (request bodies parsed, quotes anchored, the log tree extended): a 1 MiB
NEG-MSG costs about a second of CPU, and a few of them once queued ahead of every publish's
anchoring. A small pool of their own bounds what reconciliation takes of the machine at once
(`RECONCILERS` threads, whatever the number of sessions); the rest wait their turn here."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

RECONCILERS: Final = 2  # threads for NIP-77's work in one process
P = ParamSpec("P")
T = TypeVar("T")

_POOL: Final = ThreadPoolExecutor(max_workers=RECONCILERS, thread_name_prefix="tms-negentropy")


async def reconciling(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on NIP-77's own threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))


def pool() -> ThreadPoolExecutor:
    """The pool itself (for a test that it is bounded and not asyncio's default)."""
    return _POOL
