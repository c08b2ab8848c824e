"""Quote matching: does a quoted passage occur in an evidence text?

Matching normalizes both texts, then tests substring containment. Quote
matching ignores differences in case, whitespace, curly versus straight
quotes, dash styles, soft hyphens and fi/fl ligatures. Nothing else is
forgiven. A quote that is empty after normalization never matches.

Normalization, in this order:

1. Case-fold with :meth:`str.casefold` (full Unicode case folding). Full case
   folding also expands the ligatures U+FB01 and U+FB02 to ``fi`` and ``fl``;
   note that it likewise expands the other Latin and Armenian ligatures
   (U+FB00, U+FB03 to U+FB06, U+FB13 to U+FB17), maps ``ß`` to ``ss`` and
   splits a few precomposed letters (e.g. U+01F0) into letter plus
   combining mark, because that is what Unicode case folding is.
2. Map single characters (:data:`CHARACTER_MAP`):

   * single quotation marks to ``'``: U+2018 LEFT and U+2019 RIGHT SINGLE,
     U+201A SINGLE LOW-9, U+201B SINGLE HIGH-REVERSED-9, U+2039 SINGLE
     LEFT-POINTING ANGLE and U+203A SINGLE RIGHT-POINTING ANGLE QUOTATION
     MARK, U+FF07 FULLWIDTH APOSTROPHE;
   * double quotation marks to ``"``: U+201C LEFT and U+201D RIGHT DOUBLE,
     U+201E DOUBLE LOW-9, U+201F DOUBLE HIGH-REVERSED-9, U+00AB LEFT-POINTING
     and U+00BB RIGHT-POINTING DOUBLE ANGLE, U+2E42 DOUBLE LOW-REVERSED-9
     QUOTATION MARK, U+301D REVERSED DOUBLE PRIME, U+301E DOUBLE PRIME and
     U+301F LOW DOUBLE PRIME QUOTATION MARK, U+FF02 FULLWIDTH QUOTATION MARK;
   * hyphens and dashes to ``-``: U+2010 to U+2015, U+2212, U+FE58,
     U+FE63, U+FF0D;
   * the soft hyphen U+00AD is removed;
   * the ligatures U+FB01 and U+FB02 become ``fi`` and ``fl`` (already
     done by step 1; kept so the rule does not depend on it);
   * every whitespace character (:data:`WHITESPACE`) becomes a space.

3. Collapse every run of spaces into one space and trim both ends.

The quotation marks are the characters with the Unicode ``Quotation_Mark``
property, minus the CJK corner brackets (U+300C to U+300F, U+FE41 to U+FE44,
U+FF62, U+FF63), which are brackets rather than quote marks. Not included, as
they are not quotation marks: the grave accent U+0060, the acute accent
U+00B4, the primes U+2032 to U+2037 (minutes, feet, inches), the modifier
letters U+02B9 to U+02BC (letters in several orthographies) and the dingbat
quote ornaments U+275B to U+2760.

Whitespace means the Unicode ``White_Space`` property. Python's
:meth:`str.isspace` (and ``\\s`` in :mod:`re`) also accepts the control
characters U+001C to U+001F, which are not whitespace and are not forgiven.
Zero-width characters such as U+200B, U+200D, U+2060 and U+FEFF are not
whitespace either and are not forgiven.

:func:`normalize` is idempotent: case folding is idempotent and never yields a
mapped character, step 2 yields only ASCII characters that steps 1 and 2
leave alone, and step 3 leaves no run of spaces and no space at either end.

To check many quotes against one evidence text, build a :class:`PreparedText`
once: it normalizes the evidence a single time, and maps an offset of the
normalized text back to the characters of the original that produced it
(what `tms.rules.anchors` needs to say where a quote sits).
"""

from __future__ import annotations

import functools
import hashlib
import re
from bisect import bisect_right
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
    "BLOCK_CHARS",
    "CHARACTER_MAP",
    "DASHES",
    "DOUBLE_QUOTES",
    "LIGATURES",
    "SINGLE_QUOTES",
    "SOFT_HYPHEN",
    "WHITESPACE",
    "PreparedText",
    "normalize",
]

SINGLE_QUOTES: Final = "\u2018\u2019\u201a\u201b\u2039\u203a\uff07"
"""Characters that normalize to the apostrophe ``'``."""

DOUBLE_QUOTES: Final = "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2e42\u301d\u301e\u301f\uff02"
"""Characters that normalize to the quotation mark ``"``."""

DASHES: Final = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
"""Characters that normalize to the hyphen-minus ``-``."""

SOFT_HYPHEN: Final = "\u00ad"
"""Removed by normalization."""

LIGATURES: Final[Mapping[str, str]] = MappingProxyType({"\ufb01": "fi", "\ufb02": "fl"})
"""Ligatures spelled out by normalization."""

WHITESPACE: Final = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
"""The characters with the Unicode ``White_Space`` property."""

CHARACTER_MAP: Final[Mapping[str, str]] = MappingProxyType(
    {
        **dict.fromkeys(SINGLE_QUOTES, "'"),
        **dict.fromkeys(DOUBLE_QUOTES, '"'),
        **dict.fromkeys(DASHES, "-"),
        SOFT_HYPHEN: "",
        **LIGATURES,
        **dict.fromkeys(WHITESPACE.replace(" ", ""), " "),
    }
)
"""Per-character replacements applied after case folding.

No replacement contains a key, so applying the entries one after another
gives the same result as mapping every character at once.
"""

# Applying str.replace once per entry is several times faster than
# str.translate on non-ASCII text: translate looks up every character in a
# dict, while replace scans in C and returns at once when the text's storage
# cannot hold the character at all (e.g. U+2019 in a Latin-1 string).
_REPLACEMENTS: Final[tuple[tuple[str, str], ...]] = tuple(CHARACTER_MAP.items())

BLOCK_CHARS: Final = 8192
"""A prepared text is normalized in blocks of about this many characters (see `PreparedText`)."""

_RUN_CHARS: Final = WHITESPACE + SOFT_HYPHEN  # what a run of spaces is made of, before collapsing


def _fold(text: str) -> tuple[str, bool]:
    """Steps 1 to 3 of normalization, without trimming the ends; and whether case folding kept
    the length (it never shortens a character, so then it changed no character's length)."""
    folded = text.casefold()
    kept = len(folded) == len(text)
    for old, new in _REPLACEMENTS:
        folded = folded.replace(old, new)
    while "  " in folded:
        folded = folded.replace("  ", " ")
    return folded, kept


def normalize(text: str) -> str:
    """Return ``text`` normalized for quote matching (see the module docstring)."""
    return _fold(text)[0].strip(" ")


def _cuts(text: str, size: int) -> list[int]:
    """Where the blocks of `text` start: 0, then about every `size` characters, each cut just
    after a character that is neither whitespace nor a soft hyphen. No run of spaces then
    straddles two blocks, so the blocks' folded texts, joined, are the whole text's."""
    cuts = [0]
    target = size
    while target < len(text):
        window = text[target - 1 : target - 1 + size]
        rest = window.lstrip(_RUN_CHARS)
        if not rest:  # inside a long run of spaces: look further on
            target += size
            continue
        cut = target + len(window) - len(rest)
        if cut >= len(text):
            break
        cuts.append(cut)
        target = cut + size
    return cuts


class PreparedText:
    """An evidence text normalized once, against which quotes are checked and found.

    The text is normalized in blocks (`BLOCK_CHARS`), each cut after a character that is
    neither whitespace nor a soft hyphen, so the blocks' normalized texts join into exactly
    `normalize(text)`. Where each block starts, in the text and in its normalized form, is what
    maps a match back to the original characters (`original_start`, `original_end`): blocks whose
    normalization changed no length are mapped by arithmetic, and the others, on first need, by
    the few places (runs of spaces, soft hyphens, case foldings that change length) that moved.
    """

    __slots__ = (
        "_block_starts",
        "_byte_starts",
        "_char_starts",
        "_cuts",
        "_haystack",
        "_lead",
        "_normalized",
        "_regular",
        "_spots",
        "text",
    )

    def __init__(self, text: str, block_chars: int = BLOCK_CHARS) -> None:
        self.text = text
        cuts = _cuts(text, block_chars)
        parts: list[str] = []
        regular: list[bool] = []
        starts: list[int] = []
        joined_length = 0
        for number, start in enumerate(cuts):
            block = text[start : cuts[number + 1] if number + 1 < len(cuts) else len(text)]
            folded, kept = _fold(block)
            parts.append(folded)
            starts.append(joined_length)
            joined_length += len(folded)
            # Same length after case folding and after collapsing: nothing in the block moved,
            # since case folding never shortens a character and nothing after it lengthens one.
            regular.append(kept and len(folded) == len(block))
        joined = "".join(parts)
        del parts
        normalized = joined.strip(" ")
        haystack: str | bytes = normalized
        if not normalized.isascii():
            # CPython stores a string with 1, 2 or 4 bytes per character,
            # chosen by its widest character, and searching takes time in
            # proportion to those bytes. Mostly-ASCII text holding one "…" or
            # emoji is searched faster as UTF-8; text mostly of wider characters
            # (e.g. Chinese) stays a str. A UTF-8 needle found in UTF-8
            # text always starts and ends on character boundaries, so both
            # searches give the same answer.
            encoded = normalized.encode("utf-8", "surrogatepass")
            if len(encoded) < 2 * len(normalized):
                haystack = encoded
        self._normalized = normalized
        self._haystack = haystack
        self._lead = 1 if joined[:1] == " " else 0  # the space trimmed off the front, if any
        self._cuts = cuts  # where each block starts in `text`
        self._block_starts = starts  # ... and in the joined folded blocks (`_lead` + normalized)
        self._regular = regular
        self._spots: dict[int, _Spots] = {}
        self._char_starts: list[int] = []  # byte <-> character offsets, built on first need
        self._byte_starts: list[int] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self._normalized)} normalized characters>"

    @property
    def normalized(self) -> str:
        """The normalized evidence text."""
        return self._normalized

    def contains(self, quote: str) -> bool:
        """Whether ``quote``, once normalized, occurs in the normalized text.

        A quote that is empty after normalization never matches.
        """
        needle = normalize(quote)
        if not needle:
            return False
        if isinstance(self._haystack, bytes):
            return needle.encode("utf-8", "surrogatepass") in self._haystack
        return needle in self._haystack

    # --- finding: offsets into the normalized text ---------------------------------------------

    def find(self, needle: str, start: int = 0) -> int:
        """Where the already normalized `needle` first occurs at or after `start`, as an offset
        into `normalized`; -1 when it does not."""
        if not isinstance(self._haystack, bytes):
            return self._haystack.find(needle, start)
        found = self._haystack.find(needle.encode("utf-8", "surrogatepass"), self._byte_of(start))
        return found if found < 0 else self._char_of(found)

    def find_all(self, needle: str, limit: int) -> list[int]:
        """Where the already normalized `needle` occurs (overlaps included), first to last, as
        offsets into `normalized`; at most `limit + 1` of them, so a caller learns that there
        are more than `limit` without the text being searched to its end."""
        haystack = self._haystack
        target: str | bytes = needle
        if isinstance(haystack, bytes):
            target = needle.encode("utf-8", "surrogatepass")
        found: list[int] = []
        at = haystack.find(target)  # type: ignore[arg-type]
        while at >= 0 and len(found) <= limit:
            found.append(at)
            at = haystack.find(target, at + 1)  # type: ignore[arg-type]
        if isinstance(haystack, bytes):
            return [self._char_of(at) for at in found]
        return found

    def first_and_count(self, needle: str) -> tuple[int, int]:
        """Where the already normalized `needle` first occurs (-1: nowhere) and how many times it
        occurs without overlaps, in one pass over the text: counting starts where the first
        occurrence ends."""
        if not isinstance(self._haystack, bytes):
            first = self._haystack.find(needle)
            if first < 0:
                return -1, 0
            return first, 1 + self._haystack.count(needle, first + len(needle))
        target = needle.encode("utf-8", "surrogatepass")
        at = self._haystack.find(target)
        if at < 0:
            return -1, 0
        return self._char_of(at), 1 + self._haystack.count(target, at + len(target))

    def _byte_tables(self) -> None:
        """Each block's start in the normalized text, in characters and in UTF-8 bytes."""
        normalized, lead = self._normalized, self._lead
        chars = [min(max(0, start - lead), len(normalized)) for start in self._block_starts]
        byte_starts, total = [], 0
        for number, start in enumerate(chars):
            byte_starts.append(total)
            end = chars[number + 1] if number + 1 < len(chars) else len(normalized)
            total += len(normalized[start:end].encode("utf-8", "surrogatepass"))
        self._char_starts, self._byte_starts = chars, byte_starts

    def _byte_of(self, char: int) -> int:
        if not self._char_starts:
            self._byte_tables()
        char = min(max(0, char), len(self._normalized))
        block = bisect_right(self._char_starts, char) - 1
        start = self._char_starts[block]
        piece = self._normalized[start:char]
        return self._byte_starts[block] + len(piece.encode("utf-8", "surrogatepass"))

    def _char_of(self, byte: int) -> int:
        if not self._char_starts:
            self._byte_tables()
        assert isinstance(self._haystack, bytes)
        block = bisect_right(self._byte_starts, byte) - 1
        piece = self._haystack[self._byte_starts[block] : byte]
        return self._char_starts[block] + len(piece.decode("utf-8", "surrogatepass"))

    # --- mapping back: normalized offsets to the original text's -------------------------------

    def original_start(self, offset: int) -> tuple[int, bool]:
        """Where the character that produced normalized character `offset` starts in `text`,
        and whether `offset` is the first character it produced (``ß`` folds to ``ss``: the
        second ``s`` starts no original character)."""
        first, _, position, _ = self._locate(offset)
        return first, position == 0

    def original_end(self, offset: int) -> tuple[int, bool]:
        """Where the character that produced normalized character `offset - 1` ends in
        `text`, and whether it is the last character it produced."""
        _, after, position, length = self._locate(offset - 1)
        return after, position == length - 1

    def _locate(self, offset: int) -> tuple[int, int, int, int]:
        """The original characters `[first, after)` that produced normalized character
        `offset`, its position among the characters they produced, and how many they produced.
        A space stands for a whole run of whitespace and soft hyphens."""
        joined = offset + self._lead
        block = bisect_right(self._block_starts, joined) - 1
        base_joined, base_original = self._block_starts[block], self._cuts[block]
        if not self._regular[block]:
            spots = self._spots.get(block)
            if spots is None:
                spots = self._spots[block] = _Spots.of(self, block)
            index = bisect_right(spots.joined, joined) - 1
            if index >= 0:
                spot_joined, length = spots.joined[index], spots.lengths[index]
                first, after = spots.original[index], spots.original_ends[index]
                if joined < spot_joined + length:
                    if after - first > 1:  # a run: its one space
                        return first, after, 0, 1
                    return first, after, joined - spot_joined, length
                base_joined, base_original = spot_joined + length, after
        first = base_original + joined - base_joined
        return first, first + 1, 0, 1


class _Spots:
    """The places in one block whose normalized length differs from their own: runs of two or
    more whitespace characters and soft hyphens (one space, or none when all are soft hyphens),
    lone soft hyphens (none) and characters whose case folding changes length. Between them,
    characters map one to one."""

    __slots__ = ("joined", "lengths", "original", "original_ends")

    def __init__(self) -> None:
        self.joined: list[int] = []  # where each starts in the joined folded blocks
        self.lengths: list[int] = []  # how many normalized characters it produced
        self.original: list[int] = []  # where it starts in the text
        self.original_ends: list[int] = []

    @classmethod
    def of(cls, prepared: PreparedText, block: int) -> _Spots:
        cuts = prepared._cuts
        start = cuts[block]
        end = cuts[block + 1] if block + 1 < len(cuts) else len(prepared.text)
        spots = cls()
        shift = prepared._block_starts[block] - start  # joined offset minus text offset
        for match in _spot_pattern().finditer(prepared.text, start, end):
            found = match.group()
            if found[0] in _RUN_CHARS:
                length = 1 if found.strip(SOFT_HYPHEN) else 0
            else:
                length = len(_fold(found)[0])
            spots.joined.append(match.start() + shift)
            spots.lengths.append(length)
            spots.original.append(match.start())
            spots.original_ends.append(match.end())
            shift += length - len(found)
        return spots


@functools.cache
def _spot_pattern() -> re.Pattern[str]:
    """Runs, soft hyphens and the characters whose case folding changes length. Full case
    folding lengthens only characters of the Basic Multilingual Plane (a test checks every code
    point), so only that plane is searched for them, once, on first need."""
    lengthened = []
    for start in range(0, 0x10000, 256):  # most ranges lengthen nothing: skip them whole
        chars = "".join(chr(c) for c in range(start, start + 256) if not 0xD800 <= c < 0xE000)
        if len(chars.casefold()) != len(chars):
            lengthened += [char for char in chars if len(char.casefold()) != 1]
    run = re.escape(_RUN_CHARS)
    return re.compile(f"[{run}]{{2,}}|{SOFT_HYPHEN}|[{re.escape(''.join(lengthened))}]")


def claim_key(text: str) -> bytes:
    """What two claims share when their texts differ only as quote matching forgives: the
    sha256 of the normalized text (sql/013's claim keys)."""
    return hashlib.sha256(normalize(text).encode("utf-8", "surrogatepass")).digest()
