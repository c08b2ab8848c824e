"""`fetch_url` against a real HTTP server on 127.0.0.1: extraction, redirects, size and time.

The server is reachable only because each call exempts it (`allow=`, TMS_FETCH_ALLOW's format);
the refusals of the address and URL policy are in `test_fetch_policy.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
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
from fetch_site import Route, Site

from tms.errors import FetchError, InvalidEvent
from tms.fetch.client import ALLOW_ENV, MAX_BYTES, evidence_chars, fetch_url
from tms.fetch.pool import (
    MEMORY_ENV,
    SECONDS_ENV,
    WORKERS_ENV,
    ExtractionPool,
    default_pool,
    shutdown,
)
from tms.results import FetchResult
from tms.rules.kinds import parse_content
from tms.types import KIND_EVIDENCE, MAX_CONTENT_CHARS


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
    assert result["text"].split("\n") == ARTICLE_LINES  # one paragraph per line, nothing else
    for words in BOILERPLATE:
        assert words not in result["text"]
    assert result["title"] == ARTICLE_TITLE
    assert result["url"] == site.url("/article")
    assert result == {
        "url": site.url("/article"),
        "title": ARTICLE_TITLE,
        "chars": len(result["text"]),
        "text": result["text"],
    }


def test_plain_text_comes_back_as_is_titled_by_its_file_name(site: Site) -> None:
    result = fetch(site, "/notes.txt")
    assert result["text"] == PLAIN_TEXT
    assert result["title"] == "notes.txt"
    assert result["chars"] == len(PLAIN_TEXT)


def test_markdown_comes_back_as_is_titled_by_its_first_heading(site: Site) -> None:
    result = fetch(site, "/notes.md")
    assert result["text"] == MARKDOWN
    assert result["title"] == "Field notes"


def test_pdf_text_pages_and_metadata_title(site: Site) -> None:
    result = fetch(site, "/papers/paper.pdf")
    assert result["title"] == PDF_TITLE
    first, second = result["text"].split("\n\n")
    assert first.split("\n") == [
        "Permafrost and carbon",
        # the hyphen that split "percent" across lines became a soft hyphen
        "Soil carbon declined by eight per\u00adcent across forty sites.",
    ]
    assert second == "Second page: caf\u00e9, na\u00efve, \u201cquoted\u201d \u2013 done."


def test_pdf_without_a_title_is_named_after_its_file(site: Site) -> None:
    result = fetch(site, "/papers/untitled.pdf")
    assert result["title"] == "untitled.pdf"
    assert result["text"] == "Only a page of text, and no title in the metadata."


def test_pdf_served_as_octet_stream_is_recognised(site: Site) -> None:
    assert fetch(site, "/download")["title"] == PDF_TITLE


def test_declared_windows_1251(site: Site) -> None:
    assert fetch(site, "/cp1251.txt")["text"] == RUSSIAN


def test_charset_declared_only_in_meta(site: Site) -> None:
    result = fetch(site, "/latin1-meta")
    assert result["text"].split("\n")[1:] == FRENCH_PARAGRAPHS  # after the <h1>
    assert result["title"] == FRENCH_TITLE  # its \u2019 was byte 0x92: read as windows-1252


def test_undeclared_legacy_charset_is_guessed(site: Site) -> None:
    assert fetch(site, "/undeclared.txt")["text"].split("\n")[:3] == FRENCH_PARAGRAPHS


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/raw-deflate"])
def test_compressed_bodies_are_inflated(site: Site, path: str) -> None:
    assert fetch(site, path)["text"].split("\n") == ARTICLE_LINES


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
        "8,000 characters one evidence holds; save the document, split it by pages or sections "
        "into parts that fit, and publish each part as its own evidence"
    )
    # The limit is on the evidence content: the text, its url and title, a 64-character slug.
    content = evidence_chars("evidence " * 1000, site.url("/long.txt"), "long.txt")
    assert fetch(site, "/long.txt", max_chars=content)["chars"] == 9000
    assert refusal(site, "/long.txt", max_chars=content - 1).startswith(
        f"refused: the text of {site.url('/long.txt')} is 9,000 characters and {content:,} as "
        "evidence content"
    )


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
    assert result["url"] == site.url("/chain/0")
    assert result["text"] == "End of the chain.\n"
    assert fetch(site, "/chain/5")["url"] == site.url("/chain/0")  # five redirects: the limit


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
    assert result["text"] == PLAIN_TEXT


# --- extraction in worker processes -----------------------------------------------------------
# The fetches below use the process-wide pool, as the server does; limits come from the settings.


@pytest.fixture
def fresh_pool() -> Iterator[None]:
    """A process-wide pool started afresh for this test (it reads its settings then), and
    stopped after it, so the next test's pool has the default settings again."""
    asyncio.run(shutdown())
    yield
    asyncio.run(shutdown())


def _gone(pid: int) -> bool:
    """True when process `pid` has exited (a zombie not yet collected counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def _extracting(site: Site, path: str) -> tuple[asyncio.Task[FetchResult], int]:
    """Start fetching `path` and return once its extraction is under way, with the task and
    the pid of the worker doing it."""
    await fetch_url(site.url("/article"), allow=site.allow)  # a warm pool, nobody busy
    task = asyncio.create_task(fetch_url(site.url(path), allow=site.allow))
    deadline = time.monotonic() + 5
    while not default_pool().busy_pids():
        assert time.monotonic() < deadline, "the extraction never started"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # well into trafilatura's seconds of work
    [pid] = default_pool().busy_pids()
    return task, pid


def test_extraction_past_its_time_limit_is_stopped(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE  # a warm pool
    before = set(default_pool().pids())
    monkeypatch.setenv(SECONDS_ENV, "0.5")
    started = time.monotonic()
    assert refusal(site, "/markup") == (
        f"no text could be extracted from {site.url('/markup')}: extraction took longer than "
        "0.5 s; the page is too large or too complex to extract"
    )
    assert time.monotonic() - started < 2  # unbounded, the page takes seconds
    killed = before - set(default_pool().pids())
    assert len(killed) == 1 and _wait_gone(killed.pop())  # its worker, and only it
    assert len(default_pool().pids()) == len(before)  # replaced already
    monkeypatch.delenv(SECONDS_ENV)
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE


def test_extraction_past_its_memory_limit_is_stopped(
    site: Site, monkeypatch: pytest.MonkeyPatch, fresh_pool: None
) -> None:
    monkeypatch.setenv(MEMORY_ENV, "100")  # the page needs more than 150 MB
    assert refusal(site, "/markup") == (
        f"no text could be extracted from {site.url('/markup')}: extraction ran out of memory "
        "(more than 100 MiB); the page is too large or too complex to extract"
    )
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE  # the pool is whole again


def test_a_cancelled_fetch_stops_its_extraction(site: Site) -> None:
    async def scenario() -> tuple[int, float]:
        task, pid = await _extracting(site, "/markup")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cpu = time.process_time()  # every thread of this process
        await asyncio.sleep(0.5)
        return pid, time.process_time() - cpu

    pid, cpu = asyncio.run(scenario())
    assert not Path(f"/proc/{pid}").exists()  # killed when its caller went away, and reaped
    assert cpu < 0.2  # and nothing carries on extracting here either
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE


def test_a_worker_that_dies_costs_one_extraction_and_is_replaced(site: Site) -> None:
    async def scenario() -> tuple[str, int]:
        task, pid = await _extracting(site, "/markup")
        os.kill(pid, signal.SIGSEGV)  # what a PDFium crash does
        with pytest.raises(FetchError) as caught:
            await task
        return str(caught.value), pid

    message, pid = asyncio.run(scenario())
    assert message == (
        f"no text could be extracted from {site.url('/markup')}: "
        "the extractor crashed on this document (SIGSEGV)"
    )
    assert _gone(pid) and pid not in default_pool().pids()
    assert fetch(site, "/papers/paper.pdf")["title"] == PDF_TITLE


def test_concurrent_extractions_leave_the_server_responsive(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight markup-heavy fetches at once: at most two workers, each extraction stopped at its
    time limit or refused for want of a free worker, and meanwhile the event loop and the
    default thread pool (where publish checks signatures) answer at once."""
    monkeypatch.setenv(SECONDS_ENV, "0.5")

    async def scenario() -> tuple[float, float, int, list[BaseException | FetchResult]]:
        tasks = [
            asyncio.create_task(fetch_url(site.url("/markup"), allow=site.allow)) for _ in range(8)
        ]
        await asyncio.sleep(0.2)
        worst_thread = worst_lag = 0.0
        most_workers = 0
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            started = time.perf_counter()
            await asyncio.to_thread(int)
            worst_thread = max(worst_thread, time.perf_counter() - started)
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            worst_lag = max(worst_lag, time.perf_counter() - started - 0.01)
            most_workers = max(most_workers, len(default_pool().pids()))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return worst_thread, worst_lag, most_workers, results

    worst_thread, worst_lag, most_workers, results = asyncio.run(scenario())
    assert worst_thread < 0.25  # before: the thread pool full of extractions, 19 s
    assert worst_lag < 0.25
    assert most_workers <= 2
    url = site.url("/markup")
    for result in results:
        assert isinstance(result, FetchError)
        assert str(result) in (
            f"no text could be extracted from {url}: extraction took longer than 0.5 s; "
            "the page is too large or too complex to extract",
            "fetch failed: every text extractor stayed busy for 0.5 s; try again in a minute",
        )


def test_workers_are_fresh_interpreters_that_see_no_secrets(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncpg  # loaded here, it must not be in a worker: workers are not forks of us

    assert asyncpg
    monkeypatch.setenv("TMS_DATABASE_URL", "postgresql://tms:hunter2@db.internal/tms")

    async def scenario() -> tuple[int, list[bytes], str, dict[str, str], str]:
        async with ExtractionPool(workers=1) as pool:
            await fetch_url(site.url("/papers/paper.pdf"), allow=site.allow, pool=pool)
            [pid] = pool.pids()
            proc = Path(f"/proc/{pid}")
            return (
                pid,
                (proc / "environ").read_bytes().split(b"\0"),
                (proc / "maps").read_text(),
                {fd.name: os.readlink(fd) for fd in (proc / "fd").iterdir()},
                (proc / "stat").read_text(),
            )

    pid, environ, maps, fds, stat = asyncio.run(scenario())
    assert not [v for v in environ if v.startswith(b"TMS_") or b"hunter2" in v]
    assert "pdfium" in maps  # it did the PDF's work
    assert "asyncpg" not in maps and "coincurve" not in maps and "uvloop" not in maps
    assert fds.pop("0") == fds.pop("1") == "/dev/null"
    assert fds.pop("2")  # our stderr, for a traceback
    assert [target.startswith("socket:") for target in fds.values()] == [True]  # and no other
    fields = stat.rsplit(")", 1)[1].split()
    assert int(fields[1]) == os.getpid()
    assert int(fields[16]) == min(os.nice(0) + 10, 19)  # the server's work comes first
    assert _wait_gone(pid)  # the pool's close stopped it


def test_shutdown_stops_the_workers_and_a_later_fetch_starts_afresh(site: Site) -> None:
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE
    pids = default_pool().pids()
    assert pids
    asyncio.run(shutdown())
    assert all(_wait_gone(pid) for pid in pids)
    assert fetch(site, "/article")["title"] == ARTICLE_TITLE
    assert not set(pids) & set(default_pool().pids())


@pytest.mark.parametrize(
    ("name", "value"),
    [(SECONDS_ENV, "0"), (SECONDS_ENV, "soon"), (MEMORY_ENV, "12"), (WORKERS_ENV, "1.5")],
)
def test_bad_extraction_settings_are_named(
    site: Site, monkeypatch: pytest.MonkeyPatch, fresh_pool: None, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert refusal(site, "/article").startswith(f"{name} must be ")


# --- a fetched text always fits in one evidence -----------------------------------------------
# `publish` counts the evidence's whole content string, as signed (SPEC's Python below), JSON
# escapes included, against 2,000,000 characters. These build texts that fill it exactly.

SLUG = "c" * 64  # the longest collection name


def spec_content(text: str, url: str, title: str) -> str:
    """The evidence content as SPEC's `sign` serializes it."""
    content = {"collection": SLUG, "title": title, "url": url, "text": text}
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def filling(unit: str, url: str, title: str, limit: int) -> str:
    """Copies of `unit`, then "a"s: a text whose evidence content is exactly `limit` long."""
    escaped = len(json.dumps(unit, ensure_ascii=False)) - 2
    text = unit * ((limit - len(spec_content("", url, title))) // escaped)
    text += "a" * (limit - len(spec_content(text, url, title)))
    assert len(spec_content(text, url, title)) == limit
    return text


ESCAPED = {
    "line breaks": "one line\n",
    "quotes": 'he said "yes" ',
    "backslashes": "C:\\data\\ ",
    "control characters": "\t\b\f\x01\x1b\x1f\x7f|",  # \x7f is not escaped
    "non-ASCII": "caf\u00e9 \u2014 \u2713 \U0001d11e \u2028 ",  # not escaped at all
}


@pytest.fixture(scope="module")
def doc_site() -> Iterator[tuple[Site, dict[str, bytes]]]:
    """A site whose /doc.txt serves whatever the test puts in `served["body"]`."""
    served = {"body": b""}
    routes: dict[str, Route] = {
        "/doc.txt": lambda h: h.reply(200, served["body"], "text/plain; charset=utf-8")
    }
    with Site(routes) as running:
        yield running, served


@pytest.mark.parametrize("limit", [20_000, MAX_CONTENT_CHARS])
@pytest.mark.parametrize("kind", ESCAPED)
def test_a_text_that_fills_an_evidence_exactly_is_returned_one_more_is_refused(
    doc_site: tuple[Site, dict[str, bytes]], kind: str, limit: int
) -> None:
    site, served = doc_site
    url = site.url("/doc.txt")
    text = filling(ESCAPED[kind], url, "doc.txt", limit)
    served["body"] = text.encode()
    options = {} if limit == MAX_CONTENT_CHARS else {"max_chars": limit}
    result = fetch(site, "/doc.txt", **options)
    assert result["text"] == text
    content = spec_content(result["text"], result["url"], result["title"])
    assert len(content) == limit
    if limit == MAX_CONTENT_CHARS:
        parse_content(KIND_EVIDENCE, content)  # what publish checks: it holds

    served["body"] = (text + "a").encode()
    message = refusal(site, "/doc.txt", **options)
    assert message.startswith(
        f"refused: the text of {url} is {len(text) + 1:,} characters and {limit + 1:,} as "
        "evidence content (JSON escapes its line breaks, quotes and backslashes; the url and "
        f"title count too), more than the {limit:,} characters one evidence holds; save the "
        "document, split it by pages or sections into parts of at most about "
    )
    if limit == MAX_CONTENT_CHARS:
        with pytest.raises(InvalidEvent):
            parse_content(KIND_EVIDENCE, spec_content(text + "a", url, "doc.txt"))


def test_the_attack_text_is_refused_with_a_part_size_that_fits(
    doc_site: tuple[Site, dict[str, bytes]],
) -> None:
    """1,750,000 characters with 350,000 line breaks: under 2,000,000 characters, yet
    2,100,000 and more once the line breaks are escaped. publish would refuse it."""
    site, served = doc_site
    url = site.url("/doc.txt")
    text = "four\n" * 350_000
    served["body"] = text.encode()
    content = len(spec_content(text, url, "doc.txt"))
    assert len(text) == 1_750_000 and content > 2_100_000
    message = refusal(site, "/doc.txt")
    head = (
        f"refused: the text of {url} is 1,750,000 characters and {content:,} as evidence "
        "content (JSON escapes its line breaks, quotes and backslashes; the url and title count "
        "too), more than the 2,000,000 characters one evidence holds; save the document, split "
        "it by pages or sections into parts of at most about "
    )
    assert message.startswith(head)
    part = int(message[len(head) :].split(" ", 1)[0].replace(",", ""))
    assert message.endswith(f"{part:,} characters, and publish each part as its own evidence")
    assert 1_600_000 < part < 1_700_000
    assert len(spec_content(text[:part], url, "doc.txt (part 1 of 2)")) <= MAX_CONTENT_CHARS


def test_evidence_chars_is_what_spec_signs() -> None:
    for unit in ESCAPED.values():
        text = unit * 50
        assert evidence_chars(text, 'https://example.org/\u00e9?q="', "T\\i\n") == len(
            spec_content(text, 'https://example.org/\u00e9?q="', "T\\i\n")
        )


def test_an_endless_title_is_cut(doc_site: tuple[Site, dict[str, bytes]]) -> None:
    site, served = doc_site
    served["body"] = ("# " + "Long title " * 1000 + "\n\nThe text.\n").encode()
    site.routes["/doc.md"] = lambda h: h.reply(200, served["body"], "text/markdown")
    result = fetch(site, "/doc.md")
    assert len(result["title"]) == 1000
    assert result["title"] == ("Long title " * 100)[:999] + "\u2026"
