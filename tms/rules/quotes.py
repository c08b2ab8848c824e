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
once: it normalizes the evidence a single time.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
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


def normalize(text: str) -> str:
    """Return ``text`` normalized for quote matching (see the module docstring)."""
    text = text.casefold()
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    while "  " in text:
        text = text.replace("  ", " ")
    return text.strip(" ")


class PreparedText:
    """An evidence text normalized once, against which quotes are checked."""

    __slots__ = ("_haystack", "_normalized")

    def __init__(self, text: str) -> None:
        normalized = normalize(text)
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
