"""`fetch_url` against a real HTTP server on 127.0.0.1: extraction, redirects, size and time.

The server is reachable only because each call exempts it (`allow=`, TMS_FETCH_ALLOW's format);
the refusals of the address and URL policy are in `test_fetch_policy.py`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fetch_routes import (
    ARTICLE_LINES,
    ARTICLE_TITLE,
    BOILERPLATE,
    FRENCH_PARAGRAPHS,
    FRENCH_TITLE,
    MARKDOWN,
    PDF_TITLE,
    PLAIN_TEXT,
    ROUTES,
    RUSSIAN,
    MiB,
)
from fetch_site import Site

from tms.errors import FetchError
from tms.fetch.client import ALLOW_ENV, MAX_BYTES, FetchResult, fetch_url


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with Site(ROUTES) as running:
        yield running


def fetch(site: Site, path: str, **options: Any) -> FetchResult:
    return asyncio.run(fetch_url(site.url(path), allow=site.allow, **options))


def refusal(site: Site, path: str, **options: Any) -> str:
    with pytest.raises(FetchError) as caught:
        fetch(site, path, **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- extraction ---------------------------------------------------------------------------


def test_article_keeps_the_article_and_drops_the_chrome(site: Site) -> None:
    result = fetch(site, "/article")
    assert result.text.split("\n") == ARTICLE_LINES  # one paragraph per line, nothing else
    for words in BOILERPLATE:
        assert words not in result.text
    assert result.title == ARTICLE_TITLE
    assert result.url == site.url("/article")
    assert result.to_dict() == {
        "url": site.url("/article"),
        "title": ARTICLE_TITLE,
        "chars": len(result.text),
        "text": result.text,
    }


def test_plain_text_comes_back_as_is_titled_by_its_file_name(site: Site) -> None:
    result = fetch(site, "/notes.txt")
    assert result.text == PLAIN_TEXT
    assert result.title == "notes.txt"
    assert result.chars == len(PLAIN_TEXT)


def test_markdown_comes_back_as_is_titled_by_its_first_heading(site: Site) -> None:
    result = fetch(site, "/notes.md")
    assert result.text == MARKDOWN
    assert result.title == "Field notes"


def test_pdf_text_pages_and_metadata_title(site: Site) -> None:
    result = fetch(site, "/papers/paper.pdf")
    assert result.title == PDF_TITLE
    first, second = result.text.split("\n\n")
    assert first.split("\n") == [
        "Permafrost and carbon",
        # the hyphen that split "percent" across lines became a soft hyphen
        "Soil carbon declined by eight per\u00adcent across forty sites.",
    ]
    assert second == "Second page: caf\u00e9, na\u00efve, \u201cquoted\u201d \u2013 done."


def test_pdf_without_a_title_is_named_after_its_file(site: Site) -> None:
    result = fetch(site, "/papers/untitled.pdf")
    assert result.title == "untitled.pdf"
    assert result.text == "Only a page of text, and no title in the metadata."


def test_pdf_served_as_octet_stream_is_recognised(site: Site) -> None:
    assert fetch(site, "/download").title == PDF_TITLE


def test_declared_windows_1251(site: Site) -> None:
    assert fetch(site, "/cp1251.txt").text == RUSSIAN


def test_charset_declared_only_in_meta(site: Site) -> None:
    result = fetch(site, "/latin1-meta")
    assert result.text.split("\n")[1:] == FRENCH_PARAGRAPHS  # after the <h1>
    assert result.title == FRENCH_TITLE  # its \u2019 was byte 0x92: read as windows-1252


def test_undeclared_legacy_charset_is_guessed(site: Site) -> None:
    assert fetch(site, "/undeclared.txt").text.split("\n")[:3] == FRENCH_PARAGRAPHS


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/raw-deflate"])
def test_compressed_bodies_are_inflated(site: Site, path: str) -> None:
    assert fetch(site, path).text.split("\n") == ARTICLE_LINES


def test_unsupported_content_type_is_refused(site: Site) -> None:
    assert refusal(site, "/image.png") == (
        f"refused: {site.url('/image.png')} is image/png; "
        "only HTML, plain text, Markdown and PDF are fetched"
    )


def test_unreadable_pdf(site: Site) -> None:
    assert refusal(site, "/broken.pdf") == (
        f"no text could be extracted from {site.url('/broken.pdf')}: "
        "not a readable PDF (Failed to load document (PDFium: Data format error))"
    )


@pytest.mark.parametrize("path", ["/empty", "/blank.txt"])
def test_nothing_to_extract_is_an_error_not_empty_evidence(site: Site, path: str) -> None:
    assert refusal(site, path) == f"no text could be extracted from {site.url(path)}"


def test_text_longer_than_an_evidence_is_refused_not_cut(site: Site) -> None:
    assert refusal(site, "/long.txt", max_chars=8000) == (
        f"refused: the text of {site.url('/long.txt')} is 9,000 characters, more than the "
        "8,000 characters one evidence holds; split the document and record its parts"
    )
    assert fetch(site, "/long.txt", max_chars=9000).chars == 9000


# --- HTTP answers ---------------------------------------------------------------------------


def test_http_errors(site: Site) -> None:
    assert (
        refusal(site, "/missing") == f"fetch failed: {site.url('/missing')} answered 404 Not Found"
    )
    assert refusal(site, "/error") == (
        f"fetch failed: {site.url('/error')} answered 500 Internal Server Error"
    )
    assert refusal(site, "/not-modified") == (
        f"fetch failed: {site.url('/not-modified')} answered 304 Not Modified"
    )


def test_redirect_without_location(site: Site) -> None:
    assert refusal(site, "/nowhere") == (
        f"fetch failed: {site.url('/nowhere')} redirects (302) without saying where"
    )


def test_redirect_chain_reports_the_final_url(site: Site) -> None:
    result = fetch(site, "/chain/3")
    assert result.url == site.url("/chain/0")
    assert result.text == "End of the chain.\n"
    assert fetch(site, "/chain/5").url == site.url("/chain/0")  # five redirects: the limit


def test_more_than_five_redirects_are_refused(site: Site) -> None:
    assert refusal(site, "/chain/6") == (
        f"refused: {site.url('/chain/6')} redirects more than 5 times"
    )


@pytest.mark.parametrize(("encoding", "path"), [("br", "/brotli"), ("gzip", "/corrupt-gzip")])
def test_unsupported_or_corrupt_encoding(site: Site, encoding: str, path: str) -> None:
    message = refusal(site, path)
    if encoding == "br":
        assert message == (
            f"refused: {site.url(path)} is sent with content encoding 'br'; "
            "only gzip and deflate are supported"
        )
    else:
        assert message == f"fetch failed: {site.url(path)} sent a corrupt gzip body"


# --- size and time ----------------------------------------------------------------------------


def test_announced_60_mb_is_refused_before_reading(site: Site) -> None:
    assert refusal(site, "/huge-length") == (
        f"refused: {site.url('/huge-length')} is 62,914,560 bytes, more than the "
        "52,428,800-byte (50 MB) limit"
    )
    sent = site.sent["/huge-length"]
    assert sent.done.wait(10)
    assert sent.hung_up
    assert sent.body_bytes < 16 * MiB  # what socket buffers took before we hung up


def test_unannounced_60_mb_is_cut_off_at_50_mb(site: Site) -> None:
    assert refusal(site, "/huge-stream") == (
        f"refused: {site.url('/huge-stream')} is larger than the 50 MB limit; "
        "stopped reading after 52,428,800 bytes"
    )
    sent = site.sent["/huge-stream"]
    assert sent.done.wait(10)
    assert sent.hung_up
    assert sent.body_bytes < 60 * MiB
    assert 50 * MiB == MAX_BYTES


def test_gzip_bomb_is_refused(site: Site) -> None:
    assert refusal(site, "/bomb") == (
        f"refused: {site.url('/bomb')} decompresses to more than the 50 MB limit (52,428,800 bytes)"
    )


@pytest.mark.parametrize("path", ["/trickle", "/silent"])
def test_a_body_that_trickles_or_never_comes_times_out(site: Site, path: str) -> None:
    started = time.monotonic()
    assert refusal(site, path, total_timeout=1.0) == (
        f"fetch failed: {site.url(path)} did not finish downloading within 1 s"
    )
    assert time.monotonic() - started < 3


def test_the_allow_list_comes_from_the_environment(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOW_ENV, f" localhost:1, {site.allow} ")
    result = asyncio.run(fetch_url(site.url("/notes.txt")))
    assert result.text == PLAIN_TEXT
