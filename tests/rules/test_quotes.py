"""Quote matching forgives case, whitespace, quote and dash styles, soft hyphens
and fi/fl ligatures, and nothing else."""

from __future__ import annotations

import random
import re
import sys

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tms.rules.quotes import (
    CHARACTER_MAP,
    DASHES,
    DOUBLE_QUOTES,
    SINGLE_QUOTES,
    SOFT_HYPHEN,
    WHITESPACE,
    PreparedText,
    normalize,
)

# The forgiven characters, written out here independently of the module.
SPEC_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
SPEC_SINGLE_QUOTES = "\u2018\u2019\u201a\u201b\u2039\u203a\uff07"
SPEC_DOUBLE_QUOTES = "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2e42\u301d\u301e\u301f\uff02"
SPEC_WHITESPACE = (  # the Unicode White_Space property
    "\t\n\x0b\x0c\r\x20\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def code_point(char: str) -> str:
    return f"U+{ord(char):04X}"


EVIDENCE = (
    "The committee\u2019s report—published on 3 March 2021—states:\n"
    "\u201cWe found no evidence of wrongdoing.\u201d  It was signed by the café\u2019s\u00a0owner, "
    "Ms. Núñez, and filed with the \u201cfirst-floor\u201d office."
)
PREPARED = PreparedText(EVIDENCE)


SPEC_MAP = {
    **dict.fromkeys(SPEC_SINGLE_QUOTES, "'"),
    **dict.fromkeys(SPEC_DOUBLE_QUOTES, '"'),
    **dict.fromkeys(SPEC_DASHES, "-"),
    **dict.fromkeys(SPEC_WHITESPACE, " "),
    "\u00ad": "",
    "\ufb01": "fi",
    "\ufb02": "fl",
}


def spec_normalize(text: str) -> str:
    """SPEC's normalization written out plainly, one character at a time: case-fold, map
    the forgiven characters, collapse runs of spaces, trim."""
    mapped = "".join(SPEC_MAP.get(char, char) for char in text.casefold())
    return re.sub(" +", " ", mapped).strip(" ")


def matches(quote: str, evidence: str = EVIDENCE) -> bool:
    """Whether the ledger finds `quote` in `evidence` (`PreparedText`, as publishing checks a
    link), checked to agree with SPEC's definition computed independently here."""
    found = PreparedText(evidence).contains(quote)
    needle = spec_normalize(quote)
    assert found is (needle != "" and needle in spec_normalize(evidence)), (quote, evidence)
    return found


# --- what is forgiven -------------------------------------------------------


def test_exact_passage_matches() -> None:
    assert matches("states:")
    assert matches("We found no evidence of wrongdoing.")
    assert PREPARED.contains("filed with the")


def test_normalized_form() -> None:
    assert (
        normalize("  The \u201cQuick\u201d\u00a0\u2014\tﬁne\u00adly  Fox\n")
        == 'the "quick" - finely fox'
    )


@pytest.mark.parametrize(
    "quote",
    ["WE FOUND NO EVIDENCE", "we found no evidence", "wE fOUND nO eVIDENCE", "MS. NÚÑEZ", "CAFÉ"],
)
def test_case_is_forgiven(quote: str) -> None:
    assert matches(quote)


def test_full_case_folding() -> None:
    assert matches("STRASSE", "Die Straße")
    assert matches("straße", "DIE STRASSE")
    assert matches("ΟΔΟΣ", "η οδός οδος")  # final sigma folds like any sigma
    assert matches("οδοσ", "ΟΔΟΣ")


@pytest.mark.parametrize("space", list(SPEC_WHITESPACE), ids=code_point)
def test_each_whitespace_character_is_forgiven(space: str) -> None:
    assert matches(f"found{space}no", "We found no evidence")
    assert matches("found no", f"We found{space}no evidence")


@pytest.mark.parametrize(
    "run", ["  ", "\t", "\n", "\r\n", " \t\n ", "\u00a0", "\u00a0 \u3000\u2028"]
)
def test_whitespace_runs_are_forgiven(run: str) -> None:
    assert matches(f"found{run}no{run}evidence")
    assert matches(f"{run}We found no evidence{run}")


def test_whitespace_in_the_evidence_is_forgiven() -> None:
    assert matches("the café\u2019s owner")  # evidence has U+00A0 before "owner"
    assert matches("wrongdoing.\u201d It was")  # evidence has two spaces there
    assert matches("states: \u201cWe")  # evidence has a newline there


@pytest.mark.parametrize("mark", list(SPEC_SINGLE_QUOTES), ids=code_point)
def test_each_single_quotation_mark_is_an_apostrophe(mark: str) -> None:
    assert matches("The committee's report")
    assert matches(f"the committee{mark}s report")
    assert matches("the café's owner", f"the café{mark}s owner")


@pytest.mark.parametrize("mark", list(SPEC_DOUBLE_QUOTES), ids=code_point)
def test_each_double_quotation_mark_is_a_straight_quote(mark: str) -> None:
    assert matches('"We found no evidence of wrongdoing."')
    assert matches(f"{mark}We found no evidence of wrongdoing.{mark}")
    assert matches('the "first-floor" office', f"the {mark}first-floor{mark} office")


@pytest.mark.parametrize("dash", list(SPEC_DASHES), ids=code_point)
def test_each_dash_is_a_hyphen(dash: str) -> None:
    assert matches("report-published on 3 March 2021-states")
    assert matches(f"report{dash}published")
    assert matches("first-floor", f"the first{dash}floor office")
    assert matches(f"x {dash} y", "x - y")


def test_soft_hyphens_are_ignored() -> None:
    assert matches("wrong\u00addoing")
    assert matches("evi\u00adden\u00adce of")
    assert matches("wrongdoing", "no wrong\u00addoing here")
    assert matches("found no", "found \u00ad no")


@pytest.mark.parametrize(
    ("quote", "evidence"),
    [
        ("ﬁled with", EVIDENCE),
        ("ﬁrst-ﬂoor", EVIDENCE),
        ("filed", "it was ﬁled"),
        ("overflow", "an overﬂow"),
        ("FIRST-FLOOR", "the ﬁrst-ﬂoor office"),
    ],
)
def test_fi_fl_ligatures_are_spelled_out(quote: str, evidence: str) -> None:
    assert matches(quote, evidence)


def test_forgiven_differences_combine() -> None:
    assert matches('we FOUND no\n\nevi\u00addence of wrongdoing."   it was')
    assert matches("report - published", "REPORT \u2013 pub\u00adlished")


def test_the_forgiven_characters_are_exactly_those_of_the_spec() -> None:
    expected = {
        **dict.fromkeys(SPEC_SINGLE_QUOTES, "'"),
        **dict.fromkeys(SPEC_DOUBLE_QUOTES, '"'),
        **dict.fromkeys(SPEC_DASHES, "-"),
        **dict.fromkeys(SPEC_WHITESPACE.replace(" ", ""), " "),
        "\u00ad": "",
        "\ufb01": "fi",
        "\ufb02": "fl",
    }
    assert expected == CHARACTER_MAP
    assert (SINGLE_QUOTES, DOUBLE_QUOTES, DASHES) == (
        SPEC_SINGLE_QUOTES,
        SPEC_DOUBLE_QUOTES,
        SPEC_DASHES,
    )
    assert WHITESPACE == SPEC_WHITESPACE


# --- what is not forgiven ---------------------------------------------------


@pytest.mark.parametrize(
    "quote",
    [
        "We found no evidense of wrongdoing",  # a changed letter
        "We found evidence of wrongdoing",  # a dropped word
        "We found no, evidence",  # added punctuation
        "We found no evidence of wrongdoing!",  # changed punctuation
        "published on 3 March 2022",  # a changed digit
        "the cafe's owner",  # accent removed
        "Ms. Nunez",  # accents removed
        "We found no\u200b evidence",  # zero-width space inserted
        "wrong\u200bdoing",  # zero-width space inside a word
        "wrong\u2060doing",  # word joiner
        "wrong doing",  # space inserted inside a word
        "wrongdoing. It was signed by the cafes owner",  # apostrophe dropped
        "We found no evidence of wrongdoing. It was",  # closing quote dropped
        "report published",  # dash dropped
        "first floor",  # hyphen became a space
        "Ms Núñez",  # full stop dropped
    ],
)
def test_other_edits_do_not_match(quote: str) -> None:
    assert not matches(quote)


@pytest.mark.parametrize(
    ("quote", "evidence"),
    [
        ("cafe", "café"),
        ("café", "cafe"),
        ("caf\u0065\u0301", "caf\u00e9"),  # decomposed accent is a different text
        ("5'10\"", "5\u203210\u2033"),  # primes are not quotation marks
        ("it's", "it`s"),  # grave accent
        ("it's", "it\u00b4s"),  # acute accent
        ("it's", "it\u02bcs"),  # modifier letter apostrophe
        ('"quote"', "\u300cquote\u300d"),  # corner brackets
        ("a-b", "a\u2e3ab"),  # two-em dash is not in the list
        ("a-b", "a\u058ab"),  # Armenian hyphen is not in the list
        ("a b", "a\x1fb"),  # information separators are not whitespace
        ("ab", "a\u200bb"),
        ("ab", "a\ufeffb"),
        ("office", "offi\u0441e"),  # Cyrillic es looks like c
        ("istanbul", "\u0131stanbul"),  # dotless i is another letter
    ],
)
def test_lookalikes_are_not_forgiven(quote: str, evidence: str) -> None:
    assert not matches(quote, evidence)


@pytest.mark.parametrize(
    "quote",
    ["", " ", "\n\t ", "\u00a0\u3000\u2028", SOFT_HYPHEN, f" {SOFT_HYPHEN}\n{SOFT_HYPHEN} "],
)
@pytest.mark.parametrize("evidence", [EVIDENCE, "", " ", SOFT_HYPHEN])
def test_blank_quote_never_matches(quote: str, evidence: str) -> None:
    assert not matches(quote, evidence)


def test_nothing_matches_blank_evidence() -> None:
    assert not matches("a", "")
    assert not matches("a", " \u00ad\n")


def test_substring_matching_ignores_word_boundaries() -> None:
    assert matches("cat", "concatenate")
    assert matches("ound no evid")


# --- properties --------------------------------------------------------------

TRICKY = (
    WHITESPACE
    + SINGLE_QUOTES
    + DOUBLE_QUOTES
    + DASHES
    + SOFT_HYPHEN
    + "ﬁﬂﬀﬃßẞſΣσςİıǰΐ\u0345\x1c\x1f\u200b\u2060\ufeff'\"-`\u2032\u2033\u00b4"
    + "aAfFiIlL é"
)
chars = st.one_of(st.characters(), st.sampled_from(TRICKY))
texts = st.text(alphabet=chars)


@given(texts)
@example("\u00a0\u2028\u3000\x85x\u00ad \u00ad y\ufb01\ufb02")
@example("\ufb00\u00df\u0130\u1e9e")
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    assert once == once.strip(" ")
    assert "  " not in once
    assert not set(once) & (set(CHARACTER_MAP) - {" "})


@given(texts)
@example("\u00a0\u2028\u3000\x85x\u00ad \u00ad y\ufb01\ufb02")
def test_normalize_is_specs_definition(text: str) -> None:
    assert normalize(text) == spec_normalize(text)


def test_case_folding_is_idempotent_and_yields_no_mapped_character() -> None:
    # Exhaustive over every code point: the premise of idempotence.
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    folded = everything.casefold()
    assert folded.casefold() == folded
    for char in CHARACTER_MAP:  # only the character itself may fold to it
        assert folded.count(char) == (1 if char.casefold() == char else 0)


def test_whitespace_is_python_whitespace_minus_the_separators() -> None:
    is_space = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert set(SPEC_WHITESPACE) == is_space - set("\x1c\x1d\x1e\x1f")


@given(texts, st.data())
def test_any_slice_of_normalized_evidence_matches(evidence: str, data: st.DataObject) -> None:
    normalized = normalize(evidence)
    start = data.draw(st.integers(0, len(normalized)))
    end = data.draw(st.integers(start, len(normalized)))
    quote = normalized[start:end]
    assert matches(quote, evidence) is (quote.strip(" ") != "")


_WORD = re.compile(f"[^{re.escape(WHITESPACE)}]+")


@given(texts, st.data())
def test_any_run_of_whole_words_matches(evidence: str, data: st.DataObject) -> None:
    words = [m.span() for m in _WORD.finditer(evidence)]
    if not words:
        assert not matches(evidence, evidence)
        return
    first = data.draw(st.integers(0, len(words) - 1))
    last = data.draw(st.integers(first, len(words) - 1))
    quote = evidence[words[first][0] : words[last][1]]
    assert matches(quote, evidence) is (normalize(quote) != "")


LIGATURE = {"fi": "\ufb01", "fl": "\ufb02"}
VARIANTS: dict[str, str] = {
    "'": "'" + SINGLE_QUOTES,
    '"': '"' + DOUBLE_QUOTES,
    "-": "-" + DASHES,
    " ": WHITESPACE,
}


def vary(text: str, rng: random.Random) -> str:
    """Apply random forgiven variations to text made of letters, digits, ' " - and spaces."""
    text = re.sub("f[il]", lambda m: rng.choice([m[0], LIGATURE[m[0]]]), text)
    out = []
    for char in text:
        if char in VARIANTS:
            if char == " ":
                char = "".join(rng.choices(WHITESPACE, k=rng.randint(1, 3)))
            else:
                char = rng.choice(VARIANTS[char])
        elif rng.random() < 0.5 and char.upper().casefold() == char.casefold():
            char = char.upper()
        if rng.random() < 0.1:
            char += SOFT_HYPHEN
        out.append(char)
    return "".join(out)


words = st.text(alphabet="abcdefilnorstxyz0123456789éüß\u03c3\u03c2.,;'\"-", min_size=1, max_size=8)


@given(st.lists(words, min_size=1, max_size=15), st.data(), st.integers(0, 2**32))
def test_forgiven_variations_still_match(
    evidence_words: list[str], data: st.DataObject, seed: int
) -> None:
    rng = random.Random(seed)
    first = data.draw(st.integers(0, len(evidence_words) - 1))
    last = data.draw(st.integers(first, len(evidence_words) - 1))
    evidence = " ".join(evidence_words)
    quote = " ".join(evidence_words[first : last + 1])
    assert matches(quote, evidence)
    assert matches(vary(quote, rng), evidence)
    assert matches(quote, vary(evidence, rng))
    assert matches(vary(quote, rng), vary(evidence, rng))


UNFORGIVEN = "\u200b\u2060\ufeff`\u00b4\u2032\u2033\u02bc\u300c\x1fqé"


@given(
    st.text(alphabet=st.sampled_from("abc fi-'\"\u2019\u2014\u00ad"), min_size=1),
    st.data(),
)
def test_an_unforgiven_character_breaks_the_match(evidence: str, data: st.DataObject) -> None:
    normalized = normalize(evidence)
    start = data.draw(st.integers(0, len(normalized)))
    end = data.draw(st.integers(start, len(normalized)))
    quote = normalized[start:end]
    at = data.draw(st.integers(0, len(quote)))
    extra = data.draw(st.sampled_from(UNFORGIVEN))
    assert not matches(quote[:at] + extra + quote[at:], evidence)


@given(
    st.sampled_from(["", "x", "é", "…", "证据", "😀", "\ud800"]),
    st.text(alphabet=st.sampled_from("ab é…证😀\u2019\ud800")),
    st.text(alphabet=st.sampled_from("ab é…证😀'\ud800")),
)
def test_wide_characters_in_long_texts(extra: str, evidence: str, quote: str) -> None:
    # Exercises both internal representations of a prepared text.
    evidence = evidence + extra
    for text in (evidence, evidence * 3 + "证" * 10, evidence + "a" * 50):
        matches(quote, text)


def test_prepared_text() -> None:
    assert PREPARED.normalized == normalize(EVIDENCE)
    assert PREPARED.contains("\u201cWE FOUND")
    assert not PREPARED.contains("")
    assert str(len(PREPARED.normalized)) in repr(PREPARED)
