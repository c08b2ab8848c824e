"""Where a quote sits: `QuoteIndex` normalizes exactly as `quotes.normalize` does, and the span
it gives back is text that normalizes to something containing the quote."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tms.rules.quotes import CHARACTER_MAP, PreparedText, normalize
from tms.rules.spans import QuoteIndex, casefold_table

ALPHABET = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from([*sorted(CHARACTER_MAP), "ß", "İ", "ﬀ", "Σ", "ς", " ", "a", "B", "\n"]),
)
TEXTS = st.text(alphabet=ALPHABET, max_size=60)


@given(TEXTS)
def test_the_index_normalizes_as_the_rule_does(text: str) -> None:
    assert QuoteIndex(text).normalized == normalize(text)


@given(TEXTS, st.integers(0, 60), st.integers(1, 20), TEXTS)
def test_a_span_is_found_exactly_when_the_quote_is(
    text: str, start: int, length: int, other: str
) -> None:
    index = QuoteIndex(text)
    for quote in (text[start : start + length], other):
        span = index.find(quote)
        assert (span is not None) == PreparedText(text).contains(quote)
        if span is not None:
            assert normalize(quote) in normalize(text[span[0] : span[1]])


def test_a_span_maps_back_through_folding_and_whitespace() -> None:
    text = "The   “Big” STRASSE\n\n is ﬁne."
    index = QuoteIndex(text)
    start, end = index.find('big" straße is fine') or (0, 0)
    assert text[start:end] == "Big” STRASSE\n\n is ﬁne"
    assert index.find("nowhere") is None
    assert index.find("   ") is None


def test_a_long_document_is_kept_in_few_segments() -> None:
    text = "Histamine intolerance is thought to result from reduced DAO activity.\n\n" * 10_000
    index = QuoteIndex(text)
    assert len(index._norm_starts) <= 2 * 10_000 + 1  # a run per paragraph, a break between
    assert index.find("reduced dao activity. histamine") is not None


def test_the_casefold_table_is_pythons() -> None:
    table = casefold_table()
    assert table["ß"] == "ss" and table["A"] == "a" and "a" not in table
