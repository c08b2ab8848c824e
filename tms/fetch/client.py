"""Fetch a web page or document as evidence text, without opening a way into our network.

`fetch_url(url)` downloads one URL and returns its text and title (a `FetchResult`), ready to be
signed as evidence; it stores nothing. The `fetch_url` MCP tool and `tms fetch URL` call it.
Every refusal and failure is a one-line `FetchError`: "refused: ..." (a `FetchRefused`) when
our policy says no, "fetch failed: ..." when the other side or the network does, "no text could
be extracted from ..." when the document has no text we can read (empty, scanned, or not really
a PDF).

The fetcher is the one place where the server talks to the outside world, so:

1. Only `http` and `https` URLs, with no user name or password in them (we would never send
   them, and they would end up in signed evidence), on any port but the Fetch standard's
   blocked ones (`tms.fetch.addresses.BLOCKED_PORTS`: SMTP, SSH, IRC and such).
2. We resolve the host ourselves (getaddrinfo, so `2130706433`, `0x7f.1` and `127.1` mean what
   libc makes of them) and refuse it if *any* address it resolves to is not public
   (`tms.fetch.addresses.classify`: loopback, private, link-local and cloud metadata, CGNAT,
   unique-local, multicast, reserved, IPv4-mapped, ...). The connection then goes to an address
   we checked, never through a second lookup, so DNS rebinding has no window; TLS still checks
   the certificate against the host name, sent as SNI (`tms.fetch.transport`).
3. Redirects are followed by us, at most `MAX_REDIRECTS`, each target checked again from step 1.
4. The body is streamed: a Content-Length over `MAX_BYTES` is refused before reading, and
   reading stops as soon as `MAX_BYTES` have arrived. We ask only for gzip and deflate and
   inflate them ourselves in bounded steps (`tms.fetch.inflate`), refusing past `MAX_BYTES` of
   decompressed data, so a compression bomb never fills memory.
5. `connect_timeout` (10 s) bounds each connection attempt and `total_timeout` (30 s) the whole
   download, redirects included. Extraction (`tms.fetch.extract`) runs afterwards in a worker
   process of `tms.fetch.pool` (by default the process-wide `default_pool()`), bounded in time
   (TMS_FETCH_EXTRACT_SECONDS, 20 s) and memory (TMS_FETCH_EXTRACT_MEMORY_MB, 1024 MiB), and
   stopped when the caller goes away: a hostile page can cost one worker, never the server.
6. No proxy from the environment, no cookies kept from one call to the next.

**A fetched text always fits in one evidence.** `publish` counts an evidence's `content`, the
JSON string as signed, against MAX_CONTENT_CHARS (2,000,000), and JSON escapes line breaks,
quotes, backslashes and control characters (two characters each, or six for `\\u001f` and
the like; non-ASCII text is not escaped, as SPEC's clients sign with `ensure_ascii=False`). So
the fetcher measures the evidence content exactly as SPEC's Python would sign it, with the
page's url and title in a collection with the longest name (64 characters) and no `source`
(`evidence_chars`), and refuses a text that would not fit, rather than cut it: evidence is what
a user vouches for, and a text shortened behind their back would put words in their mouth. The
refusal says how long each part should be; the user saves the document, splits it by pages or
sections and publishes each part as its own evidence. Titles longer than 1,000 characters are
cut (with an ellipsis): a title is a label, not evidence.

`TMS_FETCH_ALLOW` is **for tests only**: comma-separated `host:port` pairs (IPv6 as `[::1]:8080`)
exempted from the address policy of step 2, matched against the host exactly as the URL writes
it (`127.0.0.1:8080` does not exempt `localhost:8080` or `2130706433:8080`). Empty by default;
never set it on a server.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from importlib.metadata import version
from typing import Final

import httpcore
import httpx

from tms.errors import FetchError, FetchRefused, Refusal, one_line
from tms.fetch.addresses import parse_exemptions, port_refusal
from tms.fetch.extract import short_title
from tms.fetch.inflate import Inflater
from tms.fetch.pool import ExtractionPool, default_pool, extract_seconds_from_env
from tms.fetch.transport import AddressRefused, VettedTransport
from tms.results import FetchResult
from tms.types import MAX_CONTENT_CHARS

ALLOW_ENV: Final = "TMS_FETCH_ALLOW"
MAX_BYTES: Final = 50 * 1024 * 1024  # 50 MB (MiB), downloaded and again once decompressed
MAX_REDIRECTS: Final = 5
CONNECT_TIMEOUT: Final = 10.0
TOTAL_TIMEOUT: Final = 30.0
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
MAX_SLUG_CHARS: Final = 64  # a collection's name, at its longest (tms.types.Slug)

_HEADERS: Final = {
    "User-Agent": f"TMS/{version('tms')} (evidence fetcher)",
    "Accept": (
        "text/html,application/xhtml+xml,application/pdf,text/plain;q=0.9,"
        "text/markdown;q=0.9,*/*;q=0.1"
    ),
    "Accept-Encoding": "gzip, deflate",
}


async def fetch_url(
    url: str,
    *,
    allow: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    total_timeout: float = TOTAL_TIMEOUT,
    max_chars: int = MAX_CONTENT_CHARS,
    ssl_context: ssl.SSLContext | None = None,
    pool: ExtractionPool | None = None,
) -> FetchResult:
    """Download `url` and extract its text and title; raise FetchError with a one-line reason.

    `allow` takes TMS_FETCH_ALLOW's format and replaces it (None reads the variable); it is for
    tests. A text whose evidence content (`evidence_chars`) would be longer than `max_chars`
    (by default what one evidence event holds) is refused, never cut: evidence is what a user
    vouches for, so they split the document themselves. `ssl_context` replaces the default
    certificate authorities (certifi's bundle). `pool` runs the extraction (None: the
    process-wide `default_pool()`) within TMS_FETCH_EXTRACT_SECONDS, read on every call.
    Cancelling the call stops the extraction.

    `url` in the result is the final URL, after redirects. `title` is the document's own title
    (HTML title, PDF metadata title, Markdown's first heading); without one, the last segment of
    the URL's path, or else its host: never empty, on one line, at most 1,000 characters.
    `text` is never blank, and an evidence content with it, `url` and `title` takes at most
    `max_chars` characters (`evidence_chars`).
    """
    exempt = parse_exemptions(os.environ.get(ALLOW_ENV, "") if allow is None else allow)
    extract_seconds = extract_seconds_from_env()
    transport = VettedTransport(exempt, ssl_context)
    async with httpx.AsyncClient(
        transport=transport,
        headers=_HEADERS,
        timeout=httpx.Timeout(total_timeout, connect=connect_timeout),
        follow_redirects=False,
        trust_env=False,
    ) as client:
        try:
            async with asyncio.timeout(total_timeout):
                final, content_type, body = await _download(client, url.strip(), connect_timeout)
        except (TimeoutError, httpcore.TimeoutException):
            raise FetchError(
                f"fetch failed: {_shown(url)} did not finish downloading within {total_timeout:g} s"
            ) from None
    extracted = await (pool or default_pool()).extract(
        body, content_type, str(final), max_chars=max_chars, seconds=extract_seconds
    )
    del body
    title = short_title(extracted.title) or short_title(_title_from(final)) or final.host
    _check_publishable(extracted.text, str(final), title, max_chars)
    return {"url": str(final), "title": title, "chars": len(extracted.text), "text": extracted.text}


def evidence_chars(text: str, url: str, title: str) -> int:
    """The length of the evidence content that holds `text`, `url` and `title` in a collection
    with the longest name (64 characters): what `publish` counts against MAX_CONTENT_CHARS.

    That is the JSON as SPEC's clients serialize it (`separators=(",", ":")`,
    `ensure_ascii=False`): `"`, `\\` and the control characters take two characters each
    (`\\n`, `\\"`), or six (`\\u001f`); everything else, non-ASCII included, one.
    """
    content = {"collection": "c" * MAX_SLUG_CHARS, "text": text, "url": url, "title": title}
    return len(json.dumps(content, separators=(",", ":"), ensure_ascii=False))


def _check_publishable(text: str, url: str, title: str, max_chars: int) -> None:
    """Refuse a text whose evidence content would be longer than `max_chars` (see the module
    doc): `publish` would refuse it, and cutting it would put words in the user's mouth."""
    content = evidence_chars(text, url, title)
    if content <= max_chars:
        return
    around = evidence_chars("", url, title)  # the content without its text
    room = max(max_chars - around, 0)
    part = room * len(text) // max(content - around, 1)  # raw characters that fit, on average
    part = part // 1000 * 1000 if part >= 1000 else part
    raise FetchRefused(
        f"refused: the text of {_shown(url)} is {len(text):,} characters and {content:,} as "
        "evidence content (JSON escapes its line breaks, quotes and backslashes; the url and "
        f"title count too), more than the {max_chars:,} characters one evidence holds; save "
        f"the document, split it by pages or sections into parts of at most about {part:,} "
        "characters, and publish each part as its own evidence"
    ).refused_as(Refusal.TOO_LARGE)


async def _download(
    client: httpx.AsyncClient, url: str, connect_timeout: float
) -> tuple[httpx.URL, str, bytes]:
    """Follow redirects by hand, checking each hop; return (final URL, Content-Type, body)."""
    current = _checked(url)
    previous: httpx.URL | None = None
    for _ in range(MAX_REDIRECTS + 1):
        try:
            async with client.stream("GET", current) as response:
                if response.status_code in REDIRECT_STATUSES:
                    location = response.headers.get("location", "").strip()
                    if not location:
                        raise FetchError(
                            f"fetch failed: {_shown(current)} redirects "
                            f"({response.status_code}) without saying where"
                        )
                    previous, current = current, _checked(location, base=current)
                    continue
                if not 200 <= response.status_code < 300:
                    raise FetchError(
                        f"fetch failed: {_shown(current)} answered {response.status_code} "
                        f"{response.reason_phrase}".rstrip()
                    )
                body = await _read_body(response, current)
                return current, response.headers.get("content-type", ""), body
        except AddressRefused as exc:
            if previous is None:
                raise
            raise FetchRefused(f"{exc} (a redirect from {_shown(previous)})").refused_as(
                Refusal.SSRF
            ) from None
        except httpcore.ConnectTimeout:
            raise FetchError(
                f"fetch failed: could not connect to {_authority(current)} within "
                f"{connect_timeout:g} s"
            ) from None
        except httpcore.ConnectError as exc:
            raise FetchError(
                f"fetch failed: could not connect to {_authority(current)} ({one_line(exc)})"
            ) from None
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise FetchError(
                f"fetch failed: {_shown(current)} broke off ({one_line(exc)})"
            ) from None
    raise FetchRefused(f"refused: {_shown(url)} redirects more than {MAX_REDIRECTS} times")


def _checked(url: str, base: httpx.URL | None = None) -> httpx.URL:
    """Parse `url` (relative to `base`, for a redirect) and apply the URL-level rules."""
    where = "" if base is None else f" (a redirect from {_shown(base)})"
    try:
        parsed = base.join(url) if base is not None else httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchRefused(f"refused: {_shown(url)} is not a valid URL{where} ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchRefused(f"refused: {_shown(url)} is not an http or https URL{where}").refused_as(
            Refusal.SSRF
        )
    if not parsed.host:
        raise FetchRefused(f"refused: {_shown(url)} has no host{where}")
    if parsed.userinfo:
        raise FetchRefused(
            f"refused: URLs with a user name or password are not fetched{where}"
        ).refused_as(Refusal.SSRF)
    reason = port_refusal(_port(parsed))
    if reason is not None:
        raise FetchRefused(f"refused: {_shown(parsed)}: {reason}{where}").refused_as(Refusal.SSRF)
    return parsed


async def _read_body(response: httpx.Response, url: httpx.URL) -> bytes:
    """Stream the body: at most MAX_BYTES on the wire and MAX_BYTES once decompressed."""
    declared = response.headers.get("content-length", "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BYTES:
        raise FetchRefused(
            f"refused: {_shown(url)} is {int(declared):,} bytes, more than the "
            f"{MAX_BYTES:,}-byte (50 MB) limit"
        ).refused_as(Refusal.TOO_LARGE)
    inflater = Inflater(response.headers.get("content-encoding", ""), _shown(url), MAX_BYTES)
    received = 0
    parts: list[bytes] = []
    async for chunk in response.aiter_raw():
        received += len(chunk)
        if received > MAX_BYTES:
            raise FetchRefused(
                f"refused: {_shown(url)} is larger than the 50 MB limit; stopped reading "
                f"after {MAX_BYTES:,} bytes"
            ).refused_as(Refusal.TOO_LARGE)
        parts.append(inflater.feed(chunk))
    parts.append(inflater.finish())
    return b"".join(parts)


def _title_from(url: httpx.URL) -> str:
    segment = url.path.rstrip("/").rpartition("/")[2].strip()  # httpx decodes the path
    return segment or url.host


def _authority(url: httpx.URL) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{_port(url)}"


def _port(url: httpx.URL) -> int:
    if url.port is not None:
        return url.port
    return 443 if url.scheme == "https" else 80


def _shown(url: str | httpx.URL, limit: int = 200) -> str:
    """A URL as an error message shows it: printable, on one line, at most `limit` chars."""
    text = "".join(c if c.isprintable() else "\ufffd" for c in str(url))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
