"""A plugin's failures in the log: one line each, and the same failure repeated summed up.

A broken after-commit hook fails on every committed batch, and a broken policy on every batch
asked; a traceback each (about 60 lines) buried the log. So a failure is one line, naming the
plugin, the seam and the error's one-line text; further failures of the same plugin and seam
within `WINDOW_SECONDS` of that line are counted, not logged, and said in one line when the
window ends (or at `flush`, when the server stops): "plugin X: its after-commit hook failed 57
more times in the last 60 s: <the last message>". The first failure of each window also logs
its traceback at DEBUG, for an operator who turns that on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tms.errors import one_line

WINDOW_SECONDS: Final = 60.0
MESSAGE_CHARS: Final = 300  # of the error's text, in a log line


@dataclass(slots=True)
class _Spell:
    started: float
    more: int = 0  # failures since the line that opened the spell
    last: str = ""
    timer: asyncio.TimerHandle | None = None


class Repeats:
    """One logger's plugin failures, each (plugin, seam) summed up apart from the others."""

    def __init__(
        self,
        log: logging.Logger,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._window = window
        self._clock = clock
        self._spells: dict[tuple[str, str], _Spell] = {}

    def failed(
        self, plugin: str, seam: str, error: BaseException | str, level: int = logging.ERROR
    ) -> None:
        """`plugin`'s `seam` (e.g. "after-commit hook") failed with `error` (an exception, or
        what to say instead): one line now, or counted into the spell already logged."""
        text = error if isinstance(error, str) else _described(error)
        key = (plugin, seam)
        now = self._clock()
        spell = self._spells.get(key)
        if spell is not None and now < spell.started + self._window:
            spell.more += 1
            spell.last = text
            if spell.timer is None:
                spell.timer = _later(self._window - (now - spell.started), self._end, key)
            return
        if spell is not None:
            self._summed(key, spell, now)
        self._spells[key] = _Spell(now)
        self._log.log(level, "plugin %s: its %s failed: %s", plugin, seam, text)
        if isinstance(error, BaseException):
            self._log.debug("plugin %s: its %s failed", plugin, seam, exc_info=error)

    def flush(self) -> None:
        """Say every spell's count now (the server stops)."""
        now = self._clock()
        for key, spell in list(self._spells.items()):
            self._summed(key, spell, now)
        self._spells.clear()

    def _end(self, key: tuple[str, str]) -> None:
        spell = self._spells.pop(key, None)
        if spell is not None:
            self._summed(key, spell, self._clock())

    def _summed(self, key: tuple[str, str], spell: _Spell, now: float) -> None:
        if spell.timer is not None:
            spell.timer.cancel()
            spell.timer = None
        if spell.more:
            seconds = min(self._window, max(1, math.ceil(now - spell.started)))
            self._log.warning(
                "plugin %s: its %s failed %d more times in the last %g s: %s",
                *key,
                spell.more,
                seconds,
                spell.last,
            )
            spell.more = 0


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {one_line(error, MESSAGE_CHARS)}"


def _later(
    seconds: float, callback: Callable[[tuple[str, str]], None], key: tuple[str, str]
) -> asyncio.TimerHandle | None:
    """A timer on the running loop, if there is one (a spell not ended by one ends at the next
    failure after it, or at `flush`)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(max(0.0, seconds), callback, key)
