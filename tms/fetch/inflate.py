"""Undoing a response's Content-Encoding within a cap, so a compression bomb never fills memory.

A few kilobytes of gzip can inflate to gigabytes. The fetcher (`tms.fetch.client`) asks only for
gzip and deflate and inflates the body itself, chunk by chunk as it arrives, through an
`Inflater` that never produces more than its `limit` (the fetch's MAX_BYTES) and refuses the
body as soon as it would. Kept apart from the download because it is the one piece that must
reason about zlib's buffers: it is tested on its own, with bombs, without a server.
"""

from __future__ import annotations

import zlib
from typing import Final

from tms.errors import FetchError, FetchRefused, Refusal

MiB: Final = 1024 * 1024


class Inflater:
    """Undo a Content-Encoding (identity, gzip or deflate) with a cap on the output.

    `source` is how error messages name the body (its URL, as shown); `limit` is the most it
    may inflate to, in bytes. zlib is asked for at most the room left under the cap plus one
    byte per call, and input it has not used yet waits in `unconsumed_tail`, so a small chunk
    of a compression bomb never inflates past the cap in memory.
    """

    def __init__(self, header: str, source: str, limit: int) -> None:
        codings = [c.strip().lower() for c in header.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        coding = codings[0] if len(codings) == 1 else "" if codings else "identity"
        coding = "gzip" if coding == "x-gzip" else coding
        if coding not in ("identity", "gzip", "deflate"):
            raise FetchRefused(
                f"refused: {source} is sent with content encoding {header.strip()!r}; "
                "only gzip and deflate are supported"
            )
        self._source = source
        self._limit = limit
        self._coding = coding
        self._total = 0  # bytes produced so far
        self._zlib = self._decompressor()
        self._started = False  # has zlib accepted any input yet (for deflate's fallback)
        self._members = 0  # complete gzip members seen
        self._done = False  # the stream ended; anything after it is ignored

    def _decompressor(self, *, raw_deflate: bool = False) -> zlib._Decompress:
        if self._coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> bytes:
        if self._coding == "identity":
            self._count(len(data))
            return data
        out: list[bytes] = []
        while data and not self._done:
            try:
                piece = self._zlib.decompress(data, self._limit - self._total + 1)
            except zlib.error:
                if self._coding == "deflate" and not self._started:
                    # Some servers send raw deflate without the zlib wrapper; httpx reads it too.
                    self._zlib = self._decompressor(raw_deflate=True)
                    self._started = True
                    continue
                if self._members:
                    self._done = True  # junk after a complete gzip member is ignored, as gzip does
                    break
                raise FetchError(
                    f"fetch failed: {self._source} sent a corrupt {self._coding} body"
                ) from None
            self._started = True
            self._count(len(piece))
            out.append(piece)
            if self._zlib.eof:
                self._members += 1
                data = self._zlib.unused_data
                if self._coding == "gzip":
                    self._zlib = self._decompressor()  # another gzip member may follow
                else:
                    self._done = True  # bytes after a deflate stream are ignored
            else:
                data = self._zlib.unconsumed_tail
        return b"".join(out)

    def finish(self) -> bytes:
        if self._coding == "identity" or self._done:
            return b""
        tail = self._zlib.flush()
        self._count(len(tail))
        return tail

    def _count(self, size: int) -> None:
        self._total += size
        if self._total > self._limit:
            raise FetchRefused(
                f"refused: {self._source} decompresses to more than the "
                f"{self._limit // MiB} MB limit ({self._limit:,} bytes)"
            ).refused_as(Refusal.TOO_LARGE)
