"""A collection's NIP-77 items as PostgreSQL streams them: `COPY (SELECT created_at, id, kind
...) TO STDOUT (FORMAT binary)` of the index-only scan, parsed into numpy arrays as the chunks
arrive.

Why not one aggregated value (`string_agg(int8send(created_at) || decode(id, 'hex') || ...)`):
at a million events PostgreSQL spent most of its two seconds calling three functions and two
concatenations a row and growing one 44 MB value, and nothing reached the server until the
last row. COPY sends each row's columns as they are stored (three send functions, no
concatenation), and the server turns the hex ids into bytes while PostgreSQL still scans: the
two run side by side.

Every row has the same layout (two fixed-size integers and a 64-character id, `hex64`), so a
chunk's rows are one numpy record array: no Python object per row.
"""

from __future__ import annotations

import binascii
from typing import Final

import numpy as np
import numpy.typing as npt

from tms.nostr.negentropy import ID_SIZE

HEX_ID: Final = 2 * ID_SIZE
_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00"
_HEADER: Final = len(_SIGNATURE) + 8  # the signature, the flags and the extension's length
_TRAILER: Final = b"\xff\xff"
# A row: its field count (3), then each field's length and bytes: created_at (int8), id (text,
# 64 hex digits), kind (int4).
_ROW: Final = np.dtype(
    [
        ("fields", ">i2"),
        ("ts_len", ">i4"),
        ("ts", ">i8"),
        ("id_len", ">i4"),
        ("id", f"S{HEX_ID}"),
        ("kind_len", ">i4"),
        ("kind", ">i4"),
    ]
)
_EXPECTED: Final = (3, 8, HEX_ID, 4)
_PARSE_BYTES: Final = 1 << 20  # rows are parsed a mebibyte at a time, as they come

Ts = npt.NDArray[np.uint64]
Ids = npt.NDArray[np.uint8]
Kinds = npt.NDArray[np.int32]


class CopyFormatError(ValueError):
    """The COPY stream is not the rows this reader asked for."""


class CopyRows:
    """A sink for asyncpg's `copy_from_query(..., output=sink.write, format="binary")` of rows
    (created_at, id, kind): parses complete rows a mebibyte at a time, so the stream is never
    held whole (about 90 bytes a row on the wire, 44 kept)."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._header = False
        self._ended = False
        # Each column's bytes, appended to as rows come (one copy each, no joining at the end).
        self._ts = bytearray()
        self._ids = bytearray()
        self._kinds = bytearray()
        self.rows = 0

    async def write(self, chunk: bytes) -> None:
        self._pending += chunk
        if len(self._pending) >= _PARSE_BYTES:
            self._parse()

    def result(self) -> tuple[Ts, Ids, Kinds]:
        """Every row received, in the order sent; raises `CopyFormatError` unless the stream
        ended as COPY ends it."""
        self._parse()
        if not self._header or not self._ended or self._pending:
            raise CopyFormatError("the COPY stream ended early")
        return (
            np.frombuffer(self._ts, dtype=np.uint64),
            np.frombuffer(self._ids, dtype=np.uint8).reshape(self.rows, ID_SIZE),
            np.frombuffer(self._kinds, dtype=np.int32),
        )

    def _parse(self) -> None:
        data = self._pending
        at = 0
        if not self._header:
            if len(data) < _HEADER:
                return
            if bytes(data[: len(_SIGNATURE)]) != _SIGNATURE:
                raise CopyFormatError("not a binary COPY stream")
            extension = int.from_bytes(data[_HEADER - 4 : _HEADER], "big")
            if len(data) < _HEADER + extension:
                return
            at = _HEADER + extension
            self._header = True
        whole = (len(data) - at) // _ROW.itemsize
        if self._ended:
            whole = 0
        if whole:
            rows = np.frombuffer(data, dtype=_ROW, count=whole, offset=at)
            self._take(rows)
            at += whole * _ROW.itemsize
        rest = bytes(data[at:])
        if rest == _TRAILER and not self._ended:
            self._ended = True
            rest = b""
        self._pending = bytearray(rest)

    def _take(self, rows: npt.NDArray[np.void]) -> None:
        if not (
            np.all(rows["fields"] == _EXPECTED[0])
            and np.all(rows["ts_len"] == _EXPECTED[1])
            and np.all(rows["id_len"] == _EXPECTED[2])
            and np.all(rows["kind_len"] == _EXPECTED[3])
        ):
            raise CopyFormatError("a row is not (created_at, 64-hex id, kind)")
        try:
            raw = binascii.a2b_hex(rows["id"].tobytes())
        except binascii.Error as exc:
            raise CopyFormatError("an id is not hexadecimal") from exc
        self._ts += rows["ts"].astype(np.uint64).tobytes()
        self._ids += raw
        self._kinds += rows["kind"].astype(np.int32).tobytes()
        self.rows += len(rows)
