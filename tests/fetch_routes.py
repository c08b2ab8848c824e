"""The documents and misbehaving replies the fetch tests serve from `fetch_site.Site`."""

from __future__ import annotations

import functools
import gzip
import itertools
import zlib
from collections.abc import Iterator

from fetch_site import Handler, Route
from pdf_maker import make_pdf

MiB = 1024 * 1024

ARTICLE_TITLE = "Soil carbon in Arctic tundra"
ARTICLE_LINES = [
    ARTICLE_TITLE,
    "Researchers measured soil carbon at forty sites across the Arctic tundra over a decade "
    "and found that stocks declined by eight percent on average.",
    "The decline was steepest where permafrost thawed earliest in the season, which suggests "
    "that warmer springs release carbon that had been locked away for millennia.",
    "\u201cWe did not expect the effect to be this large,\u201d said the lead author, who "
    "cautioned that the sites may not represent the whole region.",
]
# Text of the page's chrome: none of it may come back.
BOILERPLATE = [
    "cookies",
    "Accept all",
    "Home",
    "About us",
    "Subscribe",
    "Related",
    "penguins",
    "All rights reserved",
    "Privacy policy",
    "Example Science News",
]
ARTICLE_HTML = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{ARTICLE_TITLE} | Example Science News</title>
<meta property="og:title" content="{ARTICLE_TITLE}">
</head><body>
<div id="cookie-banner" class="cookie-consent">We use cookies to improve your experience.
<button>Accept all cookies</button></div>
<header><nav><ul><li><a href="/">Home</a></li><li><a href="/news">News</a></li>
<li><a href="/about">About us</a></li>
<li><a href="/subscribe">Subscribe</a></li></ul></nav></header>
<main><article>
<h1>{ARTICLE_LINES[0]}</h1>
<p>{ARTICLE_LINES[1]}</p>
<p>{ARTICLE_LINES[2]}</p>
<p>{ARTICLE_LINES[3]}</p>
</article></main>
<aside><h3>Related</h3><ul><li><a href="/a">Ten things about penguins</a></li>
<li><a href="/b">Why the sky is blue</a></li></ul></aside>
<footer><p>&copy; 2025 Example Science News. All rights reserved.</p>
<a href="/privacy">Privacy policy</a> <a href="/terms">Terms of use</a></footer>
</body></html>
""".encode()

PLAIN_TEXT = "Field log, day 3.\nPermafrost thaw measured at 40 cm.\n\n  Indented note stays.\n"
MARKDOWN = "# Field notes\n\nSoil carbon *declined* by 8%.\n\n- site A\n- site B\n"

PDF_TITLE = "Permafrost carbon \u2014 a field study"
PDF_PAGES = [
    ["Permafrost and carbon", "Soil carbon declined by eight per-", "cent across forty sites."],
    ["Second page: caf\u00e9, na\u00efve, \u201cquoted\u201d \u2013 done."],
]
PAPER_PDF = make_pdf(PDF_PAGES, title=PDF_TITLE)
UNTITLED_PDF = make_pdf([["Only a page of text, and no title in the metadata."]])

RUSSIAN = "Доказательства важнее мнений. Проверяйте каждую цитату."
FRENCH_PARAGRAPHS = [
    "Les chercheurs ont mesuré le carbone du sol sur quarante sites de la toundra arctique.",
    "Le déclin était plus marqué là où le pergélisol a dégelé le plus tôt dans la saison.",
    "\u00ab Nous ne nous attendions pas à un effet aussi important \u00bb, a déclaré l\u2019auteur "
    "principal, qui a précisé que les sites ne représentent peut-être pas toute la région.",
]
FRENCH_TITLE = "R\u00e9sum\u00e9 de l\u2019\u00e9tude"
# Declared only in <meta>, as ISO-8859-1, with windows-1252 curly quotes in it (as browsers read).
LATIN1_META_HTML = (
    '<!DOCTYPE html><html><head><meta http-equiv="Content-Type" '
    f'content="text/html; charset=iso-8859-1"><title>{FRENCH_TITLE}</title>'
    f"</head><body><nav><a href='/'>Accueil</a></nav><article><h1>{FRENCH_TITLE}</h1>"
    + "".join(f"<p>{p}</p>" for p in FRENCH_PARAGRAPHS)
    + "</article><footer>Mentions l\u00e9gales</footer></body></html>"
).encode("cp1252")
UNDECLARED_CP1252 = ("\n".join(FRENCH_PARAGRAPHS * 3) + "\n").encode("cp1252")

# Markup-heavy HTML: thousands of tiny elements, each its own paragraph with inline markup. About
# 600 KB of it keeps trafilatura busy for seconds and takes well over 100 MB to extract (a 2 MB
# page takes ten seconds and half a gigabyte): the pages that starved the server.
MARKUP_UNIT = (
    '<div class="c"><p><span>w</span><b>x</b><i>y</i><a href="#">z</a> lorem ipsum</p></div>\n'
)


def markup_html(size: int) -> bytes:
    """A markup-heavy page of about `size` bytes."""
    units = MARKUP_UNIT * (size // len(MARKUP_UNIT))
    head = "<!DOCTYPE html><html><head><title>Markup</title></head>"
    return f"{head}<body>{units}</body></html>".encode()


BOMB_SIZE = 200 * MiB  # zeros: 0.9 MB gzipped (level 1), four times the 50 MB cap inflated


@functools.cache
def gzip_bomb() -> bytes:
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    return b"".join(packer.compress(zeros) for _ in range(BOMB_SIZE // MiB)) + packer.flush()


def _text(body: bytes, content_type: str) -> Route:
    return lambda h: h.reply(200, body, content_type)


def _redirect(status: int, location: str) -> Route:
    return lambda h: h.reply(status, b"", None, [("Location", location)])


def _to_this_server(host: str, path: str) -> Route:
    """Redirect to this very server under another host name: reachable, yet not exempt."""
    return lambda h: h.reply(
        302, b"", None, [("Location", f"http://{host}:{h.server.site.port}{path}")]
    )


def _chain(h: Handler) -> None:
    """/chain/N redirects N times before the text: relative and absolute Locations in turn."""
    left = int(h.path.rsplit("/", 1)[1])
    if left == 0:
        h.reply(200, b"End of the chain.\n", "text/plain")
    elif left % 2:
        h.reply(302, b"", None, [("Location", f"/chain/{left - 1}")])
    else:
        target = f"http://127.0.0.1:{h.server.site.port}/chain/{left - 1}"
        h.reply(301 if left % 4 else 308, b"", None, [("Location", target)])


def _zeros(total: int) -> Iterator[bytes]:
    chunk = bytes(64 * 1024)
    for _ in range(total // len(chunk)):
        yield chunk


def _huge_with_length(h: Handler) -> None:
    h.stream(_zeros(60 * MiB), "text/plain", [("Content-Length", str(60 * MiB))])


def _huge_without_length(h: Handler) -> None:
    h.stream(_zeros(60 * MiB), "text/plain")


def _trickle(h: Handler) -> None:
    h.stream(itertools.repeat(b"x"), "text/plain", [("Content-Length", "100000")], pause=0.05)


def _silent(h: Handler) -> None:
    h.server.site.stopping.wait(30)  # never answers; released when the site closes


def _bomb(h: Handler) -> None:
    h.reply(200, gzip_bomb(), "text/plain", [("Content-Encoding", "gzip")])


def _encoded(body: bytes, encoding: str) -> Route:
    return lambda h: h.reply(
        200, body, "text/html; charset=utf-8", [("Content-Encoding", encoding)]
    )


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


ROUTES: dict[str, Route] = {
    "/article": _text(ARTICLE_HTML, "text/html; charset=utf-8"),
    "/notes.txt": _text(PLAIN_TEXT.encode(), "text/plain; charset=utf-8"),
    "/notes.md": _text(MARKDOWN.encode(), "text/markdown; charset=utf-8"),
    "/papers/paper.pdf": _text(PAPER_PDF, "application/pdf"),
    "/papers/untitled.pdf": _text(UNTITLED_PDF, "application/pdf"),
    "/download": _text(PAPER_PDF, "application/octet-stream"),
    "/broken.pdf": _text(b"%PDF-1.4\nthis is not really a PDF\n", "application/pdf"),
    "/cp1251.txt": _text(RUSSIAN.encode("cp1251"), "text/plain; charset=windows-1251"),
    "/latin1-meta": _text(LATIN1_META_HTML, "text/html"),
    "/undeclared.txt": _text(UNDECLARED_CP1252, "text/plain"),
    "/gzip": _encoded(gzip.compress(ARTICLE_HTML), "gzip"),
    "/deflate": _encoded(zlib.compress(ARTICLE_HTML), "deflate"),
    "/raw-deflate": _encoded(_raw_deflate(ARTICLE_HTML), "deflate"),
    "/brotli": _encoded(b"\x1b\x03\x00", "br"),
    "/corrupt-gzip": _encoded(b"\x1f\x8b\x08\x00garbage-not-gzip", "gzip"),
    "/image.png": _text(b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
    "/empty": _text(
        b"<!DOCTYPE html><html><head><title>Nothing</title></head><body></body></html>", "text/html"
    ),
    "/blank.txt": _text(b"  \n\n \t\n", "text/plain"),
    "/long.txt": _text(b"evidence " * 1000, "text/plain"),
    "/error": lambda h: h.reply(500, b"boom", "text/plain"),
    "/not-modified": lambda h: h.reply(304, b"", None, length=False),
    "/nowhere": lambda h: h.reply(302, b"", None),
    "/to-private": _redirect(302, "http://10.0.0.1/internal"),
    "/to-metadata": _redirect(307, "http://169.254.169.254/latest/meta-data/iam/"),
    "/to-ipv6-loopback": _redirect(302, "http://[::1]/"),
    "/to-file": _redirect(302, "file:///etc/passwd"),
    "/to-ftp": _redirect(302, "ftp://example.org/paper.pdf"),
    "/to-smtp": _redirect(302, "http://example.org:25/"),
    "/to-localhost": _to_this_server("localhost", "/notes.txt"),
    "/to-decimal": _to_this_server("2130706433", "/notes.txt"),
    "/huge-length": _huge_with_length,
    "/huge-stream": _huge_without_length,
    "/trickle": _trickle,
    "/silent": _silent,
    "/bomb": _bomb,
    "/markup": _text(markup_html(600_000), "text/html; charset=utf-8"),
}
for _n in range(8):
    ROUTES[f"/chain/{_n}"] = _chain
