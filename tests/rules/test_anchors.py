"""Anchors: where a quote sits in the evidence as signed, mapped exactly across normalization;
and the nearest passage for a quote that is not there. Pure: no database."""

from __future__ import annotations

import random
import re
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rapidfuzz.fuzz import ratio

from tms.rules.anchors import (
    CONTEXT_CHARS,
    CONTEXT_WINDOW_CHARS,
    HINT_CHARS,
    Anchor,
    Miss,
    Nearest,
    anchor,
    nearest,
    verdict,
    word_span,
)
from tms.rules.quotes import SOFT_HYPHEN, WHITESPACE, PreparedText, normalize

TRICKY = (
    WHITESPACE
    + SOFT_HYPHEN
    + "\u2019\u201c\u201d\u2014\ufb01\ufb02\ufb00\ufb03ßẞ\u017fΣ\u03c3ςİ\u0131ǰΐ\u0345\u0587"
    + "aAbBfFiIlLsS é😀证-'\""
)
chars = st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(TRICKY))
texts = st.text(alphabet=chars, max_size=200)
BLOCKS = st.sampled_from([1, 2, 3, 5, 8, 64, 8192])


def prepared(text: str, block_chars: int = 8192) -> PreparedText:
    return PreparedText(text, block_chars=block_chars)


def check(text: str, quote: str, found: Anchor) -> None:
    """What every anchor holds: the exact characters at its offsets, their context, how many
    times the normalized quote occurs."""
    assert 0 <= found.start <= found.end <= len(text)
    assert found.exact == text[found.start : found.end]
    assert found.prefix == text[max(0, found.start - CONTEXT_CHARS) : found.start]
    assert found.suffix == text[found.end : found.end + CONTEXT_CHARS]
    start, end = found.start, found.end
    assert found.context_before == text[max(0, start - CONTEXT_WINDOW_CHARS) : start]
    assert found.context_after == text[end : end + CONTEXT_WINDOW_CHARS]
    assert found.occurrences == normalize(text).count(normalize(quote)) >= 1


# --- the property ------------------------------------------------------------------------------


@settings(max_examples=400)
@given(texts, st.data(), BLOCKS)
@example("Die Straße", None, 8192)
@example("  a\u00ad  \u00adß b\ufb01  ", None, 2)
def test_a_slice_of_the_text_is_anchored_exactly(
    text: str, data: st.DataObject | None, block_chars: int
) -> None:
    """Any passage of the text, once normalized, is found, and the anchor's characters
    normalize to exactly the normalized quote."""
    if data is None:
        start, end = 0, len(text)
    else:
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, len(text)))
    quote = text[start:end]
    found = anchor(prepared(text, block_chars), quote)
    if not normalize(quote):
        assert found is None
        return
    assert found is not None
    check(text, quote, found)
    assert normalize(text[found.start : found.end]) == normalize(quote)
    # The first occurrence: this passage's own, or one before it.
    assert found.start <= end - len(quote.lstrip(WHITESPACE + SOFT_HYPHEN))


@settings(max_examples=300)
@given(texts, texts, BLOCKS)
@example("Straße", "se", 8192)
@example("ßs", "s", 1)
@example("sß", "ß", 8192)  # "ss" first occurs across "s" and half of "ß"; then as "ß" itself
def test_any_quote_is_anchored_when_it_matches(text: str, quote: str, block_chars: int) -> None:
    """For any quote at all: an anchor exactly when the quote matches, and its characters hold
    the normalized quote (exactly, unless no occurrence starts and ends on whole characters,
    as ``se`` in ``Straße``, where it is widened to them)."""
    found = anchor(prepared(text, block_chars), quote)
    assert (found is not None) is PreparedText(text).contains(quote)
    if found is not None:
        check(text, quote, found)
        assert normalize(quote) in normalize(text[found.start : found.end])


@given(texts, BLOCKS)
def test_blocks_join_into_the_whole_normalized_text(text: str, block_chars: int) -> None:
    assert prepared(text, block_chars).normalized == normalize(text)


@given(st.text(alphabet=st.sampled_from(" \n\u00a0\u00ad" + "ab"), max_size=60), BLOCKS)
def test_runs_of_spaces_and_soft_hyphens_across_blocks(text: str, block_chars: int) -> None:
    assert prepared(text, block_chars).normalized == normalize(text)
    words = normalize(text).split(" ")
    for word in words:
        found = anchor(prepared(text, block_chars), word)
        if word:
            assert found is not None and normalize(found.exact) == word


# --- examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "quote", "exact"),
    [
        ("Die Straße ist lang.", "STRASSE IST", "Straße ist"),  # ß folds to ss: longer
        ("so ist die STRASSE", "straße", "STRASSE"),
        ("a wrong\u00addoing here", "wrongdoing", "wrong\u00addoing"),  # soft hyphen removed
        ("\u00adwrongdoing\u00ad", "wrongdoing", "wrongdoing"),  # the ends stay outside
        ("found  \n\t no", "found no", "found  \n\t no"),  # a run of spaces is one
        ("it was \ufb01led in", "filed", "\ufb01led"),  # a ligature spelled out
        ("  \n leading spaces", "leading", "leading"),
        ("x\u201cQuoted\u201d — y", '"quoted" - y', "\u201cQuoted\u201d — y"),
        ("emoji 😀 then “curly” text", '"curly" text', "“curly” text"),  # searched as UTF-8
        ("证据" * 50 + " “证据” ", '"证据"', "“证据”"),  # searched as a str
    ],
)
def test_offsets_count_characters_of_the_text_as_signed(text: str, quote: str, exact: str) -> None:
    found = anchor(prepared(text), quote)
    assert found is not None
    assert found.exact == exact
    assert text[found.start : found.end] == exact
    check(text, quote, found)


def test_every_occurrence_is_counted_and_the_first_anchored() -> None:
    text = "DAO here, dao there, and D\u00adAO again."
    found = anchor(prepared(text), "dao")
    assert found == Anchor(0, 3, "DAO", "", text[3:35], 3, "", text[3:])


def test_an_occurrence_inside_a_folded_character_is_skipped() -> None:
    # "s" occurs first inside "ß" ("ss"), whose folding starts no original character at the
    # second s; the whole "s" after it is the anchor.
    found = anchor(prepared("ßs"), "s")
    assert found is not None and (found.start, found.end, found.exact) == (1, 2, "s")
    # When no occurrence is whole, the first is widened to whole characters.
    found = anchor(prepared("Straße"), "se")
    assert found is not None and found.exact == "ße"
    # An overlapping occurrence may be the whole one: "ss" is "s" + half of "ß", then "ß".
    found = anchor(prepared("sß"), "SS")
    assert found is not None and (found.exact, found.occurrences) == ("ß", 1)


def test_context_is_cut_to_32_characters_and_the_passage_around_to_300() -> None:
    text = "a" * 400 + "NEEDLE" + "b" * 100
    found = anchor(prepared(text), "needle")
    passage = ("a" * CONTEXT_WINDOW_CHARS, "b" * 100)  # what pages show around the quote
    assert found == Anchor(400, 406, "NEEDLE", "a" * 32, "b" * 32, 1, *passage)
    assert CONTEXT_WINDOW_CHARS == 300


def test_a_missing_or_blank_quote_has_no_anchor() -> None:
    assert anchor(prepared("some text"), "other") is None
    assert anchor(prepared("some text"), " \u00ad ") is None
    assert anchor(prepared(""), "x") is None
    assert verdict(prepared("some text"), "other") == Miss()


def test_long_texts_map_through_many_blocks() -> None:
    rng = random.Random(3)
    pieces = ["Straße", "  ", "\u00ad", "\ufb01ne", "\n\n", "word", "İ", "😀", "“q”", " "]
    text = "".join(rng.choice(pieces) for _ in range(40_000))
    ready = prepared(text, 256)
    assert ready.normalized == normalize(text)
    for _ in range(300):
        start = rng.randrange(len(text))
        quote = text[start : start + rng.randrange(1, 80)]
        found = anchor(ready, quote)
        if normalize(quote):
            assert found is not None
            assert normalize(text[found.start : found.end]) == normalize(quote)


def test_case_folding_lengthens_only_characters_of_the_basic_plane() -> None:
    """The premise of searching only the BMP for characters whose folding changes length."""
    astral = "".join(map(chr, range(0x10000, sys.maxunicode + 1)))
    assert len(astral.casefold()) == len(astral)


def test_finding_in_utf8_and_in_str_agree() -> None:
    for text in ("ab 😀 " * 3000 + "needle", "证据 " * 3000 + "needle"):
        ready = prepared(text, 100)
        offset = normalize(text).find("needle")
        assert ready.find("needle") == offset
        assert ready.find("needle", offset + 1) == -1
        assert ready.first_and_count("needle") == (offset, 1)
        assert (
            ready.find_all("😀" if "😀" in text else "证", 5)
            == [i for i, c in enumerate(normalize(text)) if c in "😀证"][:6]
        )


# --- the nearest passage -----------------------------------------------------------------------


def prose(words: int, seed: int) -> str:
    """Text that reads like prose to a search: pseudo-words from syllables, sentences, lines."""
    rng = random.Random(seed)
    out = []
    for i in range(words):
        syllables = rng.randint(1, 4)
        letters = (rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(syllables))
        word = "".join(letters)
        out.append(word + (".\n" if i % 17 == 16 else " "))
    return "".join(out)


PASSAGE = "Histamine intolerance is thought to result from reduced diamine oxidase activity."


@pytest.mark.parametrize("words", [200, 40_000])  # aligned whole, and found through seeds
def test_a_quote_with_one_changed_word_is_refused_and_its_passage_found(words: int) -> None:
    before, after = prose(words // 2, 1), prose(words // 2, 2)
    text = before + PASSAGE + " " + after
    ready = prepared(text)
    quote = "thought to result from INCREASED diamine oxidase activity"
    assert verdict(ready, quote) == Miss()
    hint = nearest(ready, quote)
    assert hint is not None
    at = len(before) + PASSAGE.index("thought")
    assert hint.start == at
    assert hint.text == text[hint.start : hint.end]
    assert hint.text.rstrip(".") == "thought to result from reduced diamine oxidase activity"
    assert 0.8 < hint.similarity < 1


def test_the_nearest_passage_is_in_the_text_as_signed() -> None:
    passage = "The  \u201cDAO\u201d enzyme\u2014as Smith\u2019s review notes."
    text = prose(300, 4) + passage + prose(300, 5)
    hint = nearest(prepared(text), 'the "dao" enzyme - as Jones\'s review notes')
    assert hint is not None
    assert hint.text.startswith("The  \u201cDAO\u201d enzyme\u2014as Smith\u2019s")
    assert text[hint.start : hint.end] == hint.text


def test_the_nearest_passage_is_cut_to_200_characters() -> None:
    sentence = " ".join(f"word{i}" for i in range(100))
    text = prose(500, 6) + sentence + prose(500, 7)
    hint = nearest(prepared(text), sentence.replace("word50", "other"))
    assert hint is not None
    assert len(hint.text) == HINT_CHARS and hint.text.endswith("…")
    assert hint.end - hint.start > HINT_CHARS
    assert "characters" in hint.describe() and "\n" not in hint.describe()


def test_no_hint_for_what_resembles_nothing() -> None:
    text = prose(5000, 8)
    assert nearest(prepared(text), "") is None
    assert nearest(prepared(""), "anything") is None
    assert nearest(prepared(text), "0123456789 !!! 0123456789") is None


def test_describe_escapes_the_passage() -> None:
    hint = Nearest(3, 9, 'a "b"\nc', 0.91)
    assert hint.describe() == (
        'the nearest passage is characters 3-9 of its text (similarity 0.91): "a \\"b\\"\\nc"'
    )


# --- the nearest passage keeps whole words: the best span around the alignment ---------------

SLEEP = (
    "In a randomized trial of 120 adults, evening magnesium supplementation showed no "
    "measurable change in total sleep time over eight weeks, though participants reported "
    "feeling more rested."
)


def test_the_nearest_passage_keeps_the_last_word_when_it_reads_better() -> None:
    """Issue 27: for a quote ending "...in total sleep time" the hint ended "...in total sleep"
    (0.92) although the passage with "time" reads more like the quote."""
    quote = "magnesium supplements showed no measurable change in total sleep time"
    hint = nearest(prepared(SLEEP), quote)
    assert hint is not None
    assert hint.text == "magnesium supplementation showed no measurable change in total sleep time"
    assert hint.similarity == round(ratio(normalize(quote), normalize(hint.text)) / 100, 3)
    assert hint.similarity > round(ratio(normalize(quote), normalize(hint.text[:-5])) / 100, 3)


# The test's own idea of a word boundary: passages start and end on whole tokens, a token being a
# run of letters and digits or a run of other characters that are not spaces.
TOKEN = re.compile(r"[a-z0-9]+|[^a-z0-9 ]+")
words = st.lists(
    st.text(alphabet="abcdefghij0.,'-", min_size=1, max_size=8), min_size=1, max_size=30
)


def neighbours(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The passages one token longer or shorter than `[start, end)` at either end."""
    starts = sorted({match.start() for match in TOKEN.finditer(text)})
    ends = sorted({match.end() for match in TOKEN.finditer(text)})
    out = []
    for pick, fixed, side in ((starts, end, 0), (ends, start, 1)):
        here = start if side == 0 else end
        before = [at for at in pick if at < here]
        after = [at for at in pick if at > here]
        for moved in before[-1:] + after[:1]:
            span = (moved, fixed) if side == 0 else (fixed, moved)
            if span[0] < span[1]:
                out.append(span)
    return out


@settings(max_examples=300, deadline=None)
@given(words, st.data())
def test_the_passage_is_on_word_boundaries_and_no_neighbour_reads_better(
    parts: list[str], data: st.DataObject
) -> None:
    text = " ".join(parts)
    needle = data.draw(st.text(alphabet="abcdefghij0.,'- ", min_size=1, max_size=60))
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    score, low, high = word_span(needle, text, start, end)
    tokens = [(match.start(), match.end()) for match in TOKEN.finditer(text)]
    assert low in {a for a, _ in tokens} and high in {b for _, b in tokens}
    assert score == ratio(needle, text[low:high])
    for other in neighbours(text, low, high):
        assert ratio(needle, text[other[0] : other[1]]) <= score, (other, text[slice(*other)])


@settings(max_examples=100, deadline=None)
@given(words, st.data())
def test_a_hint_is_whole_words_of_the_text(parts: list[str], data: st.DataObject) -> None:
    text = " ".join(parts)
    start = data.draw(st.integers(0, len(text) - 1))
    quote = text[start : start + data.draw(st.integers(1, 60))] + data.draw(words)[0]
    hint = nearest(prepared(text), quote)
    if hint is None:
        return
    assert hint.text == text[hint.start : hint.end]
    tokens = [(match.start(), match.end()) for match in TOKEN.finditer(text)]
    assert hint.start in {a for a, _ in tokens} and hint.end in {b for _, b in tokens}
    score = ratio(normalize(quote), text[hint.start : hint.end])
    assert hint.similarity == round(score / 100, 3)
    for low, high in neighbours(text, hint.start, hint.end):
        assert ratio(normalize(quote), text[low:high]) <= score
