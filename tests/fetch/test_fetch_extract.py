"""Extraction and decoding on bytes in memory, and the bounded inflater, without a server."""

from __future__ import annotations

import codecs
import gzip
import tracemalloc
import zlib

import pytest
from pdf_maker import make_pdf

from tms.errors import FetchError
from tms.fetch.client import MAX_BYTES
from tms.fetch.extract import decode, extract, media_type
from tms.fetch.inflate import Inflater

URL = "https://example.org/doc"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("text/html; charset=UTF-8", ("text/html", "UTF-8")),
        ('Text/HTML;Charset="windows-1251"', ("text/html", "windows-1251")),
        ("application/pdf", ("application/pdf", None)),
        ("", ("", None)),
        ("nonsense", ("nonsense", None)),
    ],
)
def test_media_type(header: str, expected: tuple[str, str | None]) -> None:
    assert media_type(header) == expected


@pytest.mark.parametrize(
    ("body", "charset", "html", "text"),
    [
        (codecs.BOM_UTF8 + "é".encode(), "windows-1251", False, "é"),  # the BOM wins
        (codecs.BOM_UTF16_LE + "é€".encode("utf-16-le"), None, False, "é€"),
        ("Привет".encode("cp1251"), "windows-1251", False, "Привет"),
        ("“é”".encode("cp1252"), "iso-8859-1", False, "“é”"),  # read as windows-1252
        ("“é”".encode("cp1252"), "us-ascii", False, "“é”"),
        ("é".encode(), "no-such-charset", False, "é"),  # unknown label: ignored
        (
            b"<meta charset='koi8-r'>" + "Да".encode("koi8_r"),
            None,
            True,
            "<meta charset='koi8-r'>Да",
        ),
        (b"<meta charset=utf-16>" + "é".encode(), None, True, "<meta charset=utf-16>é"),
        (b"<meta charset='koi8-r'>", None, False, "<meta charset='koi8-r'>"),  # not HTML: no meta
        ("naïve".encode(), None, False, "naïve"),  # valid UTF-8
    ],
)
def test_decode(body: bytes, charset: str | None, html: bool, text: str) -> None:
    assert decode(body, charset, html=html) == text


def test_plain_text_line_ends_and_nul() -> None:
    result = extract(b"one\r\ntwo\rthree\x00\n", "text/plain", URL, max_chars=100)
    assert result.text == "one\ntwo\nthree\n"
    assert result.title is None


def test_html_served_without_a_type_is_sniffed() -> None:
    page = (
        b"<!DOCTYPE html><html><head><title>T</title></head><body><article>"
        + (b"<p>A sentence long enough to count as the main text of this page, and more.</p>" * 3)
        + b"</article></body></html>"
    )
    assert "A sentence long enough" in extract(page, "", URL, max_chars=10_000).text


def test_untyped_binary_is_refused() -> None:
    with pytest.raises(FetchError) as caught:
        extract(b"\x00\x01\x02", "", URL, max_chars=100)
    assert str(caught.value) == (
        f"refused: {URL} is of no declared type; "
        "only HTML, plain text, Markdown and PDF are fetched"
    )


def test_long_pdf_stops_at_the_limit() -> None:
    pdf = make_pdf(
        [[f"Page {n} line {k} of a long document." for k in range(20)] for n in range(30)]
    )
    with pytest.raises(FetchError) as caught:
        extract(pdf, "application/pdf", URL, max_chars=2_000)
    assert str(caught.value) == (
        f"refused: the text of {URL} is more than the 2,000 characters one evidence holds; "
        "save the document, split it by pages or sections into parts that fit, and publish each "
        "part as its own evidence"
    )


def test_inflater_never_holds_more_than_the_cap() -> None:
    """One small chunk that inflates to 64 MiB: refused, with memory bounded by the 1 MiB cap."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(packer.compress(bytes(1024 * 1024)) for _ in range(64)) + packer.flush()
    assert len(bomb) < 100_000
    inflater = Inflater("gzip", URL, 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(FetchError, match="decompresses to more than the 1 MB limit"):
            inflater.feed(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


def test_inflater_reads_concatenated_gzip_members_and_ignores_trailing_junk() -> None:
    inflater = Inflater("x-gzip", URL, MAX_BYTES)
    data = gzip.compress(b"first ") + gzip.compress(b"second") + b"\x00\x00junk"
    out = b"".join(inflater.feed(data[i : i + 7]) for i in range(0, len(data), 7))
    assert out + inflater.finish() == b"first second"


def test_inflater_identity_and_refused_codings() -> None:
    assert Inflater("identity", URL, MAX_BYTES).feed(b"abc") == b"abc"
    with pytest.raises(FetchError, match="content encoding 'gzip, gzip'"):
        Inflater("gzip, gzip", URL, MAX_BYTES)


def test_pdf_without_a_text_layer() -> None:
    with pytest.raises(FetchError) as caught:
        extract(make_pdf([[], []]), "application/pdf", URL, max_chars=100)
    assert str(caught.value) == (
        f"no text could be extracted from {URL} (a PDF of scanned pages has no text layer)"
    )
