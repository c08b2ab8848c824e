"""Write small, valid PDFs by hand for the fetch tests: no PDF library on the writing side.

Each page is a list of text lines set in Helvetica (WinAnsi encoding, so windows-1252 text),
and the document may carry an Info dictionary title (UTF-16, so any Unicode). The cross-
reference table has real byte offsets, so PDF readers open it without repairing it.
"""

from __future__ import annotations


def _literal(text: str) -> bytes:
    raw = text.encode("cp1252")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def make_pdf(pages: list[list[str]], title: str | None = None) -> bytes:
    """A PDF with one page per entry of `pages`, each line of text on its own line."""
    count = len(pages)
    pages_id = 2 + 2 * count  # objects: 1 font, then (content, page) per page, pages, catalog
    objects = [b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    for index, lines in enumerate(pages):
        ops = [b"BT /F1 12 Tf 72 720 Td 16 TL"]
        ops += [_literal(line) + b" Tj T*" for line in lines]
        ops.append(b"ET")
        stream = b"\n".join(ops)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 1 0 R >> >> /Contents %d 0 R >>"
            % (pages_id, 2 + 2 * index)
        )
    kids = b" ".join(b"%d 0 R" % (3 + 2 * index) for index in range(count))
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, count))
    objects.append(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    info = b""
    if title is not None:
        encoded = ("\ufeff" + title).encode("utf-16-be").hex().upper().encode("ascii")
        objects.append(b"<< /Title <%s> >>" % encoded)
        info = b" /Info %d 0 R" % len(objects)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R%s >>\n" % (len(objects) + 1, pages_id + 1, info)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)
