"""`tms fetch URL` as a user runs it: the real console script against a server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from factories import TMS, environment
from fetch_routes import ARTICLE_LINES, ARTICLE_TITLE, ROUTES
from fetch_site import Site


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with Site(ROUTES) as running:
        yield running


def tms_fetch(url: str, allow: str | None) -> subprocess.CompletedProcess[bytes]:
    env = environment() if allow is None else environment(TMS_FETCH_ALLOW=allow)
    return subprocess.run(
        [TMS, "fetch", url], env=env, capture_output=True, timeout=60, check=False
    )


def test_prints_the_result_as_one_json_line(site: Site) -> None:
    run = tms_fetch(site.url("/article"), site.allow)
    assert run.returncode == 0, run.stderr
    assert run.stderr == b""
    assert run.stdout.count(b"\n") == 1
    result = json.loads(run.stdout.decode("utf-8"))  # UTF-8 JSON, curly quotes unescaped
    assert list(result) == ["url", "title", "chars", "text"]
    assert result["url"] == site.url("/article")
    assert result["title"] == ARTICLE_TITLE
    assert result["text"].split("\n") == ARTICLE_LINES
    assert result["chars"] == len(result["text"])
    assert "\u201c".encode() in run.stdout


def test_refusal_is_one_line_on_stderr_and_exit_2(site: Site) -> None:
    run = tms_fetch(site.url("/article"), None)  # the test server is not exempt
    assert run.returncode == 2
    assert run.stdout == b""
    assert run.stderr.decode() == "tms: refused: 127.0.0.1 is a loopback address\n"


def test_redirect_to_a_private_address(site: Site) -> None:
    run = tms_fetch(site.url("/to-metadata"), site.allow)
    assert run.returncode == 2
    assert run.stderr.decode() == (
        "tms: refused: 169.254.169.254 is a link-local address "
        f"(a redirect from {site.url('/to-metadata')})\n"
    )


def test_bad_allow_list(site: Site) -> None:
    run = tms_fetch(site.url("/article"), "nonsense")
    assert run.returncode == 2
    assert run.stderr.decode() == (
        "tms: TMS_FETCH_ALLOW: 'nonsense' is not a host:port pair (IPv6 as [::1]:8080)\n"
    )
