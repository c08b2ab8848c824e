"""Where a quote sits in its evidence: the span of the original text that a normalized match
covers, so that a page can mark it.

`tms.rules.quotes` decides whether a quote is found (normalize both texts, then test substring
containment); this module answers the question a reader asks next, *where*. It normalizes the
evidence exactly as `quotes.normalize` does (a test holds them equal on random text), while
remembering which original character each normalized one came from.

Most text maps one to one: a run of characters whose case folding is a single character that
normalization leaves alone (ASCII letters, most letters of most scripts), with single spaces
between them, normalizes to a run of the same length. Such runs are kept as one segment each,
so a 2,000,000-character document costs a few thousand segments, not two million entries; only
the characters normalization changes (whitespace runs, curly quotes, dashes, soft hyphens, ß
and other expanding folds) are mapped one by one.

`casefold_table` is the case folding of this Python, character by character, which the pages'
JavaScript uses to normalize exactly as the server does (JavaScript has no casefold).
"""

from __future__ import annotations

import bisect
import re
import sys
from functools import cache
from typing import Final

from tms.rules.quotes import CHARACTER_MAP, WHITESPACE, normalize

__all__ = ["QuoteIndex", "Span", "casefold_table"]

Span = tuple[int, int]  # [start, end) in the original text, in code points

_MAPPED: Final = frozenset(CHARACTER_MAP) | frozenset(WHITESPACE)


@cache
def casefold_table() -> dict[str, str]:
    """Every character whose case folding differs from itself, with its folding."""
    table: dict[str, str] = {}
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        folded = char.casefold()
        if folded != char:
            table[char] = folded
    return table


@cache
def _special_class() -> str:
    """A regex character class of the characters that do not normalize one to one."""
    special = set(_MAPPED)
    for char, folded in casefold_table().items():
        if len(folded) != 1 or folded in _MAPPED:
            special.add(char)
    points = sorted(ord(c) for c in special)
    ranges: list[str] = []
    start = previous = points[0]
    for point in [*points[1:], -1]:
        if point == previous + 1:
            previous = point
            continue
        ranges.append(
            re.escape(chr(start))
            if start == previous
            else f"{re.escape(chr(start))}-{re.escape(chr(previous))}"
        )
        start = previous = point
    return "".join(ranges)


@cache
def _run_pattern() -> re.Pattern[str]:
    """A run that normalizes one to one: plain characters, with single spaces between them
    (a single space after a plain character is kept as it is)."""
    plain = f"[^{_special_class()}]"
    return re.compile(f"{plain}(?:{plain}| (?={plain}))*")


class QuoteIndex:
    """An evidence text normalized once, with the way back to the original positions."""

    __slots__ = ("_linear", "_norm_starts", "_orig_starts", "normalized")

    def __init__(self, text: str) -> None:
        pieces: list[str] = []
        norm_starts: list[int] = []  # where each segment starts in the normalized text
        orig_starts: list[int] = []  # and in the original
        linear: list[bool] = []  # a run (one to one) or one character's output
        size = 0
        last_space = True  # at the start, as after a space: leading spaces are dropped
        position = 0
        match = _run_pattern().match
        while position < len(text):
            run = match(text, position)
            if run is not None:
                chunk = run.group().casefold()
                norm_starts.append(size)
                orig_starts.append(position)
                linear.append(True)
                pieces.append(chunk)
                size += len(chunk)
                last_space = False
                position = run.end()
                continue
            out = []
            for folded in text[position].casefold():
                for char in CHARACTER_MAP.get(folded, folded):
                    if char == " ":
                        if last_space:
                            continue
                        last_space = True
                    else:
                        last_space = False
                    out.append(char)
            if out:
                norm_starts.append(size)
                orig_starts.append(position)
                linear.append(False)
                pieces.append("".join(out))
                size += len(out)
            position += 1
        if pieces and pieces[-1].endswith(" "):  # a trailing space is trimmed
            pieces[-1] = pieces[-1][:-1]
            if not pieces[-1]:
                for column in (pieces, norm_starts, orig_starts, linear):
                    column.pop()
        self.normalized = "".join(pieces)
        self._norm_starts = norm_starts
        self._orig_starts = orig_starts
        self._linear = linear

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self.normalized)} normalized characters>"

    def find(self, quote: str) -> Span | None:
        """The original span of the quote's first normalized occurrence, or None when it is
        not found (or is empty once normalized). The span starts at the character that gave
        the first matched one and ends after the one that gave the last."""
        needle = normalize(quote)
        if not needle:
            return None
        at = self.normalized.find(needle)
        if at < 0:
            return None
        return self._origin(at), self._origin(at + len(needle) - 1) + 1

    def _origin(self, position: int) -> int:
        segment = bisect.bisect_right(self._norm_starts, position) - 1
        start = self._orig_starts[segment]
        if self._linear[segment]:
            return start + position - self._norm_starts[segment]
        return start
