"""Where a quote sits in its evidence (an anchor), and, when it is not there, the nearest passage.

Pure. An anchor follows the W3C Web Annotation selectors: `start` and `end` are a
TextPositionSelector, counted in code points of the evidence text as signed (never the normalized
one), and `exact`, `prefix` and `suffix` a TextQuoteSelector; `occurrences` says how many times the
normalized quote occurs in the normalized text (without overlaps, as `str.count` counts). The
anchored passage is the first occurrence that starts and ends on whole characters of the text, so
that `normalize(text[start:end]) == normalize(quote)`; an occurrence that starts or ends inside a
character whose case folding is longer (the second ``s`` of ``ß``) is skipped for the next one,
and when none is whole (a quote ``se`` against ``Straße``), the first is widened to the whole
characters around it. `context_before` and `context_after` are the few hundred characters either
side that a reader sees the quote in (pages show them; they are no selector).

The nearest passage helps a writer whose quote was refused: where the evidence reads most like the
quote, with a similarity between 0 and 1 (rapidfuzz's normalized Indel similarity of the
normalized quote and passage; 1 would have matched). It is a hint, never a match: nothing here
decides what publishing accepts. Its cost is bounded for any text: the quote's first
`NEAREST_QUOTE_CHARS` characters are compared, exact pieces of it (seeds) are looked up in the
normalized text a bounded number of times, and only the few places where most seeds agree are
aligned character by character.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from rapidfuzz.fuzz import partial_ratio_alignment, ratio

from tms.rules.quotes import PreparedText, normalize

CONTEXT_CHARS: Final = 32  # `prefix` and `suffix`, at most
CONTEXT_WINDOW_CHARS: Final = 300  # `context_before` and `context_after`, at most
HINT_CHARS: Final = 200  # the nearest passage's text, at most (ellipsis included)
MIN_SIMILARITY: Final = 0.5  # a passage less like the quote than this is no hint
NEAREST_QUOTE_CHARS: Final = 2_000  # a longer quote is compared by its beginning
_ALIGN_TRIES: Final = 1_000  # occurrences tried for one on whole characters
_WHOLE_TEXT_CHARS: Final = 20_000  # texts up to this long are aligned whole, without seeds
_SEEDS: Final = 8  # pieces of the quote looked up per round
_SEED_HITS: Final = 48  # a piece found more often than this is too common to place the quote
_CANDIDATES: Final = 12  # places aligned character by character
_SNAP_CHARS: Final = 30  # how far from the alignment a passage's ends are looked for
_CLIMB_STEPS: Final = 64  # then one word at a time, at most this many moves
_ROUNDS: Final = 2  # seed lengths tried: the first, then shorter (none found) or longer (common)


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a link's quote sits in its evidence (W3C TextPosition- and TextQuoteSelector),
    and the passage around it that a reader sees (`context_before`, `context_after`: what
    pages show, stored so that they never read the evidence text again)."""

    start: int
    end: int
    exact: str
    prefix: str
    suffix: str
    occurrences: int
    context_before: str
    context_after: str


@dataclass(frozen=True, slots=True)
class Nearest:
    """The passage of an evidence that reads most like a quote that is not in it."""

    start: int
    end: int
    text: str  # at most HINT_CHARS characters of the passage as the evidence has it
    similarity: float  # 0 to 1

    def describe(self) -> str:
        """The hint a refusal carries, on one line."""
        return (
            f"the nearest passage is characters {self.start}-{self.end} of its text "
            f"(similarity {self.similarity:.2f}): {json.dumps(self.text, ensure_ascii=False)}"
        )


@dataclass(frozen=True, slots=True)
class Miss:
    """A quote that is not in its evidence, and the nearest passage once it was looked for
    (`looked`: None then means nothing resembles the quote)."""

    nearest: Nearest | None = None
    looked: bool = False


Verdict = Anchor | Miss  # what publishing learns of each link's quote


def anchor(prepared: PreparedText, quote: str) -> Anchor | None:
    """The quote's anchor in the prepared evidence, or None when it does not occur there."""
    needle = normalize(quote)
    if not needle:
        return None
    first, occurrences = prepared.first_and_count(needle)
    if first < 0:
        return None
    found = first
    span: tuple[int, int] | None = None
    for _ in range(_ALIGN_TRIES):  # overlapping occurrences count too: "ss" in "sß"
        start, whole_start = prepared.original_start(found)
        end, whole_end = prepared.original_end(found + len(needle))
        if whole_start and whole_end:
            span = start, end
            break
        found = prepared.find(needle, found + 1)
        if found < 0:
            break
    if span is None:  # no occurrence on whole characters: the first, widened to them
        span = prepared.original_start(first)[0], prepared.original_end(first + len(needle))[0]
    start, end = span
    text = prepared.text
    before, after = context(text, start, end)
    return Anchor(
        start=start,
        end=end,
        exact=text[start:end],
        prefix=text[max(0, start - CONTEXT_CHARS) : start],
        suffix=text[end : end + CONTEXT_CHARS],
        occurrences=occurrences,
        context_before=before,
        context_after=after,
    )


def context(text: str, start: int, end: int) -> tuple[str, str]:
    """The passage either side of an anchor's `[start, end)` in `text`, as `anchor` gives it
    (for anchors stored before their context was)."""
    return text[max(0, start - CONTEXT_WINDOW_CHARS) : start], text[
        end : end + CONTEXT_WINDOW_CHARS
    ]


def verdict(prepared: PreparedText, quote: str) -> Verdict:
    """The anchor of a quote, or a miss (without its nearest passage, which costs more and is
    wanted only for the one link a refusal names: see `nearest`)."""
    found = anchor(prepared, quote)
    return Miss() if found is None else found


def nearest(prepared: PreparedText, quote: str) -> Nearest | None:
    """The passage of the evidence most like `quote`, or None when nothing resembles it (or the
    quote or the text is blank)."""
    needle = normalize(quote)[:NEAREST_QUOTE_CHARS].strip(" ")
    haystack = prepared.normalized
    if not needle or not haystack:
        return None
    if len(haystack) <= _WHOLE_TEXT_CHARS:
        windows = [(0, len(haystack))]
    else:
        windows = _candidate_windows(prepared, needle)
    best: tuple[float, int, int] | None = None  # score, start, end in the normalized text
    for low, high in windows:
        cutoff = best[0] if best else 0
        aligned = partial_ratio_alignment(needle, haystack[low:high], score_cutoff=cutoff)
        if aligned is None:
            continue
        start, end = low + aligned.dest_start, low + aligned.dest_end
        if best is None or (aligned.score, -start) > (best[0], -best[1]):
            best = (aligned.score, start, end)
    if best is None:
        return None
    score, start, end = word_span(needle, haystack, best[1], best[2])
    if score < MIN_SIMILARITY * 100:
        return None
    first, after = prepared.original_start(start)[0], prepared.original_end(end)[0]
    text = prepared.text[first:after]
    if len(text) > HINT_CHARS:
        text = text[: HINT_CHARS - 1] + "…"
    return Nearest(first, after, text, round(score / 100, 3))


def _wordy(char: str) -> bool:
    """Whether `char` belongs to a word: a letter, a digit, or a mark combined with one (case
    folding splits a few letters into letter and mark, which must not be parted)."""
    return char.isalnum() or unicodedata.category(char).startswith("M")


def is_passage_start(haystack: str, at: int) -> bool:
    """Whether a passage of the normalized `haystack` may start at `at`: on a character that is
    not a space, and not inside a word (a run of letters and digits)."""
    if not 0 <= at < len(haystack) or haystack[at] == " ":
        return False
    return at == 0 or haystack[at - 1] == " " or _wordy(haystack[at - 1]) != _wordy(haystack[at])


def is_passage_end(haystack: str, at: int) -> bool:
    """Whether a passage of the normalized `haystack` may end just before `at` (see
    `is_passage_start`)."""
    if not 0 < at <= len(haystack) or haystack[at - 1] == " ":
        return False
    last = len(haystack)
    return at == last or haystack[at] == " " or _wordy(haystack[at - 1]) != _wordy(haystack[at])


def word_span(needle: str, haystack: str, start: int, end: int) -> tuple[float, int, int]:
    """The passage on word boundaries around the aligned `[start, end)` that reads most like
    `needle`, and its similarity (0 to 100).

    An alignment as long as the quote often cuts a word, and the nearest boundary is not always
    the best one: "...in total sleep" for a quote ending "...in total sleep time" cut the last
    word. So every start and end within `_SNAP_CHARS` of the alignment's is scored, and from the
    best pair each end moves one boundary at a time while that reads more like the quote (at
    most `_CLIMB_STEPS` moves, each to a boundary at most `_SNAP_CHARS` away): the passage
    returned then scores at least as well as any passage one boundary longer or shorter at
    either end. Ties go to the pair nearest the alignment. When no boundary is within reach (a
    "word" longer than `_SNAP_CHARS`), the alignment itself is kept, without its spaces."""
    size = len(haystack)
    starts = [
        at
        for at in range(max(0, start - _SNAP_CHARS), min(size, start + _SNAP_CHARS + 1))
        if is_passage_start(haystack, at)
    ]
    ends = [
        at
        for at in range(max(1, end - _SNAP_CHARS), min(size, end + _SNAP_CHARS) + 1)
        if is_passage_end(haystack, at)
    ]
    best: tuple[float, int, int, int] | None = None  # score, -distance, start, end
    for low in starts:
        for high in ends:
            if high > low:
                key = (ratio(needle, haystack[low:high]), -abs(low - start) - abs(high - end))
                if best is None or key > best[:2]:
                    best = (*key, low, high)
    if best is None:
        passage = haystack[start:end]
        low = start + len(passage) - len(passage.lstrip(" "))
        high = max(low, end - (len(passage) - len(passage.rstrip(" "))))
        return ratio(needle, haystack[low:high]), low, high
    score, _, low, high = best
    for _ in range(_CLIMB_STEPS):
        moves = [
            (low, high)
            for low, high in (
                (_step(haystack, low, -1, is_passage_start), high),
                (_step(haystack, low, 1, is_passage_start), high),
                (low, _step(haystack, high, -1, is_passage_end)),
                (low, _step(haystack, high, 1, is_passage_end)),
            )
            if 0 <= low < high
        ]
        better = max(((ratio(needle, haystack[a:b]), a, b) for a, b in moves), default=None)
        if better is None or better[0] <= score:
            break
        score, low, high = better
    return score, low, high


def _step(haystack: str, at: int, way: int, boundary: Callable[[str, int], bool]) -> int:
    """The next boundary from `at` (excluded) in direction `way`, within `_SNAP_CHARS`; or -1."""
    for next_at in range(at + way, at + way * (_SNAP_CHARS + 1), way):
        if boundary(haystack, next_at):
            return next_at
    return -1


def _candidate_windows(prepared: PreparedText, needle: str) -> list[tuple[int, int]]:
    """Places in a long text where the quote may sit: seeds (exact pieces of the quote) looked up
    in the text, each hit voting for where the quote would start; the places most voted for,
    with room around them for words added or dropped."""
    size = max(4, min(24, len(needle) // 4))
    tried = set()
    for _ in range(_ROUNDS):
        tried.add(size)
        votes, common = _vote(prepared, needle, size)
        if votes:
            break
        # Every piece is everywhere: longer pieces are rarer. No piece is anywhere: shorter ones
        # may be somewhere.
        size = size * 2 if common else max(3, size // 2)
        if size in tried or size > len(needle):
            break
    slack = max(16, len(needle) // 4)
    bucket = max(8, len(needle) // 4)
    windows = []
    for place, _ in votes.most_common(_CANDIDATES):
        low = max(0, place * bucket - slack)
        high = place * bucket + bucket + len(needle) + slack
        windows.append((low, min(len(prepared.normalized), high)))
    return windows


def _vote(prepared: PreparedText, needle: str, size: int) -> tuple[Counter[int], bool]:
    """Where seeds of `size` characters place the quote (as buckets of a quarter of its length),
    and whether some seed was found too often to count."""
    last = max(0, len(needle) - size)
    count = min(_SEEDS, last + 1)
    offsets = sorted({round(i * last / max(1, count - 1)) for i in range(count)})
    bucket = max(8, len(needle) // 4)
    votes: Counter[int] = Counter()
    common = False
    for offset in offsets:
        seed = needle[offset : offset + size]
        if seed != seed.strip(" ") and len(seed.strip(" ")) < 3:
            continue
        hits = prepared.find_all(seed, _SEED_HITS)
        if len(hits) > _SEED_HITS:
            common = True
            continue
        for place in {max(0, hit - offset) // bucket for hit in hits}:
            votes[place] += 1
    return votes, common
