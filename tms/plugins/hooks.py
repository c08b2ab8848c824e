"""After-commit hooks: each committed batch handed to every enabled hook, off the request path.

The ledger calls `AfterCommitHooks.submit` once a batch's transaction has committed; it only
puts the batch on each hook's queue and returns, so a slow or broken hook never holds up a
publish. Each hook has a queue of its own (`TMS_HOOK_QUEUE` batches) and one worker that calls
it for one batch at a time, in commit order, with a timeout (`TMS_HOOK_TIMEOUT_SECONDS`): one
slow webhook delays only itself. A full queue drops the batch for that hook and counts it
(`tms_plugin_hook_batches_total{outcome="dropped"}`) rather than wait; what a hook raises is
logged in one line and counted, never raised into a request; a hook failing batch after batch
is one line, then one line a minute saying how often (`tms.plugins.repeats`). These are
notifications, not a journal: a batch dropped, or still queued when the server stops (after
`STOP_GRACE_SECONDS` to drain), is not delivered later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Final

from tms.extension import AfterCommit, Committed
from tms.metrics import PLUGIN_FAILURES, PLUGIN_HOOK_BATCHES
from tms.plugins.repeats import Repeats
from tms.plugins.vocabulary import committed_seen
from tms.rules import admission

log = logging.getLogger("tms.extension")  # the name operators filter on, kept from before the move

STOP_GRACE_SECONDS: Final = 5.0
SEAM: Final = "after-commit hook"  # as the log names it
OUTCOMES: Final = ("done", "failed", "dropped")


class _Hook:
    def __init__(
        self, name: str, hook: AfterCommit, size: int, seconds: float, repeats: Repeats
    ) -> None:
        self.name = name
        self.repeats = repeats
        self.hook = hook
        self.seconds = seconds
        self.queue: asyncio.Queue[Committed] = asyncio.Queue(size)
        self.worker: asyncio.Task[None] | None = None
        self.dropping = 0  # batches dropped since the queue last had room, for the log
        self.counted = {outcome: PLUGIN_HOOK_BATCHES.labels(name, outcome) for outcome in OUTCOMES}

    def offer(self, committed: Committed) -> None:
        try:
            self.queue.put_nowait(committed)
        except asyncio.QueueFull:
            if not self.dropping:
                log.warning(
                    "plugin %s: its after-commit queue is full (%d batches): dropping batches "
                    "until it has room",
                    self.name,
                    self.queue.maxsize,
                )
            self.dropping += 1
            self.counted["dropped"].inc()

    async def run(self) -> None:
        while True:
            committed = await self.queue.get()
            try:
                await self._call(committed)
            except asyncio.CancelledError:  # stopped mid-call: not delivered
                self.counted["dropped"].inc()
                raise
            finally:
                self.queue.task_done()
            if self.dropping and self.queue.empty():
                log.warning(
                    "plugin %s: its after-commit queue has room again; %d batches were dropped",
                    self.name,
                    self.dropping,
                )
                self.dropping = 0

    async def _call(self, committed: Committed) -> None:
        deadline = asyncio.timeout(self.seconds)
        try:
            async with deadline:
                await self.hook(committed)
        except TimeoutError as exc:
            if deadline.expired():
                self.repeats.failed(
                    self.name,
                    SEAM,
                    f"it did not finish within {self.seconds:g} s",
                    logging.WARNING,
                )
                self._failed("timeout")
            else:
                self.repeats.failed(self.name, SEAM, exc)
                self._failed("raised")
        except Exception as exc:
            self.repeats.failed(self.name, SEAM, exc)
            self._failed("raised")
        else:
            self.counted["done"].inc()

    def _failed(self, cause: str) -> None:
        PLUGIN_FAILURES.labels(self.name, "after_commit", cause).inc()
        self.counted["failed"].inc()


class AfterCommitHooks:
    """Every enabled after-commit hook, each with its queue and worker. `start` and `stop` run
    in the server's lifespan; `submit` may come before `start` (it queues) and after `stop` (it
    drops and counts)."""

    def __init__(
        self, hooks: Sequence[tuple[str, AfterCommit]], *, queue: int, seconds: float
    ) -> None:
        self._repeats = Repeats(log)
        self._hooks = [_Hook(name, hook, queue, seconds, self._repeats) for name, hook in hooks]
        self._stopped = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(hook.name for hook in self._hooks)

    def submit(self, committed: admission.Committed) -> None:
        """Hand a committed batch to every hook (as the surface's `Committed`, made once for
        them all); never blocks, never raises."""
        if not self._hooks:
            return
        seen = committed_seen(committed)
        for hook in self._hooks:
            if self._stopped:
                hook.counted["dropped"].inc()
            else:
                hook.offer(seen)

    async def start(self) -> None:
        self._stopped = False
        for hook in self._hooks:
            if hook.worker is None:
                hook.worker = asyncio.create_task(hook.run(), name=f"tms-hook-{hook.name}")

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Give the queued batches `grace` seconds in all to be delivered, then stop; what is
        still queued is dropped and counted."""
        self._stopped = True
        running = [hook for hook in self._hooks if hook.worker is not None]
        if running:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await asyncio.gather(*(hook.queue.join() for hook in running))
        for hook in running:
            assert hook.worker is not None
            hook.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hook.worker
            hook.worker = None
        for hook in self._hooks:
            left = hook.queue.qsize()
            if left:
                log.warning(
                    "plugin %s: %d committed batches were not delivered before shutdown",
                    hook.name,
                    left,
                )
                hook.counted["dropped"].inc(left)
            while not hook.queue.empty():
                hook.queue.get_nowait()
                hook.queue.task_done()
        self._repeats.flush()
