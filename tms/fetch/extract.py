"""Turn a downloaded body into evidence text: HTML, plain text, Markdown and PDF.

Pure CPU work on bytes already in memory (the network side is `tms.fetch.client`); the server
runs it in worker processes (`tms.fetch.pool`), never on its event loop or in its threads. Every
failure is a one-line `FetchError`.

- **HTML** (`text/html`, `application/xhtml+xml`): trafilatura keeps the main text and drops
  navigation, footers, sidebars, comments and cookie banners; each paragraph, heading or list
  item is one line. The title is trafilatura's (the page's title without the site name).
- **Plain text** (`text/plain`) and **Markdown** (`text/markdown`, `text/x-markdown`): as sent.
  Markdown's title is its first `# ` heading.
- **PDF** (`application/pdf`): PDFium (pypdfium2), pages separated by a blank
  line, lines as PDFium reads them. A word hyphenated across a line end comes back joined, with
  a soft hyphen (U+00AD) where the hyphen was, which quote matching ignores. The title is the
  document's metadata title.

A body served as `application/octet-stream` or with no type is read as PDF when it starts with
`%PDF-` and as HTML when it starts with `<!doctype html` or `<html`. Everything else is refused.

Text is decoded with, in order: a byte-order mark, the charset declared in Content-Type, an
HTML `<meta>` charset in the first 1024 bytes, UTF-8 if the bytes are valid UTF-8, then
charset_normalizer's guess (windows-1252 if it has none). As browsers do, the labels
ISO-8859-1, Latin-1 and US-ASCII mean windows-1252. Line ends become `\\n`, NUL characters
are dropped and lone UTF-16 surrogates (from a broken PDF text layer) become U+FFFD: PostgreSQL
can store neither, so `publish` refuses both. A title comes back on one line, at most
`MAX_TITLE_CHARS` long.
"""

from __future__ import annotations

import codecs
import re
import threading
from dataclasses import dataclass
from email.message import Message
from typing import Final

from tms.errors import FetchError, FetchRefused, Refusal

HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES: Final = frozenset({"text/plain"})
MARKDOWN_TYPES: Final = frozenset({"text/markdown", "text/x-markdown"})
PDF_TYPES: Final = frozenset({"application/pdf", "application/x-pdf"})
SNIFFED_TYPES: Final = frozenset({"", "application/octet-stream", "binary/octet-stream"})

# Browsers read these labels as windows-1252 (WHATWG Encoding standard); so do we.
_WINDOWS_1252_ALIASES: Final = frozenset(
    {"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii", "iso_8859-1"}
)
_META_CHARSET: Final = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE
)
_BOMS: Final = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_MARKDOWN_TITLE: Final = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
# PDFium marks a hyphen that splits a word across lines with U+FFFE (older builds with U+0002).
_PDF_HYPHENS: Final = str.maketrans({"\ufffe": "\u00ad", "\x02": "\u00ad"})
# PDFium is not thread-safe, not even across documents: one call at a time, process-wide.
# (The server runs extraction in `tms.fetch.worker` processes, one job at a time in each.)
_PDFIUM_LOCK: Final = threading.Lock()
_SURROGATES: Final = re.compile("[\ud800-\udfff]")
MAX_TITLE_CHARS: Final = 1000


SPLIT_ADVICE: Final = (
    "save the document, split it by pages or sections into parts that fit, and publish each "
    "part as its own evidence"
)


@dataclass(frozen=True)
class Extracted:
    """The text of a document and its title, when the document names one."""

    text: str
    title: str | None


def media_type(content_type: str) -> tuple[str, str | None]:
    """Split a Content-Type header into its lowercase media type and its charset, if any."""
    message = Message()
    message["content-type"] = content_type
    charset = message.get_param("charset")
    return (
        content_type.split(";", 1)[0].strip().lower(),
        charset.strip() if isinstance(charset, str) and charset.strip() else None,
    )


def extract(body: bytes, content_type: str, url: str, *, max_chars: int) -> Extracted:
    """Extract text and title from `body` as served with `content_type` from `url`.

    Raises FetchError for an unsupported type, an unreadable PDF, an empty result (no text could
    be extracted) or a text longer than `max_chars`.
    """
    kind, charset = media_type(content_type)
    if kind in SNIFFED_TYPES:
        start = body[:512].lstrip().lower()
        if start.startswith(b"%pdf-"):
            kind = "application/pdf"
        elif start.startswith((b"<!doctype html", b"<html")):
            kind = "text/html"
    if kind in HTML_TYPES:
        result = _html(decode(body, charset, html=True), url)
    elif kind in TEXT_TYPES:
        result = Extracted(_clean(decode(body, charset)), None)
    elif kind in MARKDOWN_TYPES:
        text = _clean(decode(body, charset))
        heading = _MARKDOWN_TITLE.search(text)
        result = Extracted(text, heading.group(1).strip() if heading else None)
    elif kind in PDF_TYPES:
        result = _pdf(body, url, max_chars)
    else:
        shown = kind or "of no declared type"
        raise FetchRefused(
            f"refused: {url} is {shown}; only HTML, plain text, Markdown and PDF are fetched"
        )
    if not result.text.strip():
        scanned = " (a PDF of scanned pages has no text layer)" if kind in PDF_TYPES else ""
        raise FetchError(f"no text could be extracted from {url}{scanned}")
    _check_length(len(result.text), url, max_chars)
    return Extracted(result.text, short_title(result.title))


def short_title(title: str | None) -> str | None:
    """A title on one line, whitespace runs folded, at most MAX_TITLE_CHARS (then an ellipsis);
    None when nothing is left."""
    text = " ".join((title or "").split())
    if len(text) > MAX_TITLE_CHARS:
        text = text[: MAX_TITLE_CHARS - 1] + "\u2026"
    return text or None


def decode(body: bytes, charset: str | None, *, html: bool = False) -> str:
    """Bytes to text: BOM, declared charset, HTML meta charset, UTF-8, then a guess."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(encoding, errors="replace")
    declared = _codec(charset)
    if declared is None and html:
        meta = _META_CHARSET.search(body[:1024])
        declared = _codec(meta.group(1).decode("ascii")) if meta else None
        if declared is not None and declared.startswith("utf-16"):
            declared = "utf-8"  # an ASCII-readable meta tag cannot be UTF-16 (WHATWG)
    if declared is not None:
        return body.decode(declared, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    import charset_normalizer  # the extraction libraries load on first use, not with the server

    guess = charset_normalizer.from_bytes(body).best()
    if guess is not None:
        return str(guess)
    return body.decode("cp1252", errors="replace")


def _codec(label: str | None) -> str | None:
    """The Python codec for a charset label, or None when the label names none we know."""
    if label is None:
        return None
    label = label.strip().strip("\"'").lower()
    if label in _WINDOWS_1252_ALIASES:
        return "cp1252"
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _clean(text: str) -> str:
    """Line ends as `\\n`; no NUL and no lone UTF-16 surrogate, which no database text holds."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return _SURROGATES.sub("\ufffd", text)


def _html(html: str, url: str) -> Extracted:
    import trafilatura

    document = trafilatura.bare_extraction(
        html,
        url=url,
        with_metadata=True,
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        # We use only the title: the page-wide date search would cost a third of the time.
        date_extraction_params={"extensive_search": False},
    )
    if document is None or isinstance(document, dict):
        return Extracted("", None)
    title = (document.title or "").strip() or None
    return Extracted(_clean(document.text or ""), title)


def _pdf(body: bytes, url: str, max_chars: int) -> Extracted:
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(body)
        except pdfium.PdfiumError as exc:
            if "password" in str(exc).lower():
                raise FetchRefused(f"refused: {url} is a password-protected PDF") from None
            raise FetchError(f"no text could be extracted from {url}: {_unreadable(exc)}") from None
        try:
            title = str(pdf.get_metadata_value("Title") or "").strip() or None
            pages: list[str] = []
            total = 0
            for index in range(len(pdf)):
                page = pdf[index]
                try:
                    textpage = page.get_textpage()
                    try:
                        text = str(textpage.get_text_range())
                    finally:
                        textpage.close()
                finally:
                    page.close()
                text = _clean(text).translate(_PDF_HYPHENS).strip("\n")
                if text.strip():
                    pages.append(text)
                    total += len(text) + 2  # with the blank line that separates pages
                    _check_length(total - 2, url, max_chars, partial=True)
        except pdfium.PdfiumError as exc:
            raise FetchError(f"no text could be extracted from {url}: {_unreadable(exc)}") from None
        finally:
            pdf.close()
    return Extracted("\n\n".join(pages), title)


def _unreadable(exc: Exception) -> str:
    detail = " ".join(str(exc).split()).rstrip(".")
    return f"not a readable PDF ({detail})" if detail else "not a readable PDF"


def _check_length(chars: int, url: str, max_chars: int, *, partial: bool = False) -> None:
    if chars > max_chars:
        size = "" if partial else f"{chars:,} characters, "
        raise FetchRefused(
            f"refused: the text of {url} is {size}more than the {max_chars:,} characters one "
            f"evidence holds; {SPLIT_ADVICE}"
        ).refused_as(Refusal.TOO_LARGE)
