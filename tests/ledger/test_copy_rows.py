"""The NIP-77 list's COPY reader (tms.ledger.read.copy_rows): the rows of a binary COPY
stream come out whatever chunks the stream arrives in, and a stream that is not what was
asked for (cut short, another column, a non-hex id) is refused, never half taken."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tms.ledger.read import copy_rows
from tms.ledger.read.copy_rows import CopyFormatError, CopyRows

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = b"\xff\xff"

Row = tuple[int, bytes, int]
rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1), st.binary(min_size=32, max_size=32), st.integers(0, 65535)
    ),
    max_size=60,
)


def row_bytes(ts: int, raw: bytes, kind: int, id_text: bytes | None = None) -> bytes:
    text = raw.hex().encode() if id_text is None else id_text
    return (
        struct.pack(">hiq", 3, 8, ts)
        + struct.pack(">i", len(text))
        + text
        + struct.pack(">ii", 4, kind)
    )


def stream(rows: list[Row]) -> bytes:
    return HEADER + b"".join(row_bytes(*row) for row in rows) + TRAILER


def parse(data: bytes, cuts: list[int]) -> CopyRows:
    sink = CopyRows()
    at = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        if cut > at:
            asyncio.run(sink.write(data[at:cut]))
            at = cut
    return sink


@hypothesis_settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, cuts=st.lists(st.integers(0, 10_000), max_size=8), small=st.booleans())
def test_the_rows_come_out_whatever_the_chunks(
    rows: list[Row], cuts: list[int], small: bool
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if small:  # parse at every chunk, rows cut anywhere
            patch.setattr(copy_rows, "_PARSE_BYTES", 1)
        ts, ids, kinds = parse(stream(rows), cuts).result()
    assert ts.tolist() == [r[0] for r in rows]
    assert [bytes(i) for i in ids] == [r[1] for r in rows]
    assert kinds.tolist() == [r[2] for r in rows]


def test_no_rows_is_an_empty_list() -> None:
    ts, ids, kinds = parse(stream([]), []).result()
    assert len(ts) == len(kinds) == 0 and ids.shape == (0, 32)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(stream([(1, b"\x01" * 32, 1)])[:-1], id="cut short"),
        pytest.param(HEADER + row_bytes(1, b"\x01" * 32, 1), id="no trailer"),
        pytest.param(b"PGCOPY\n\xff\r\n\x01" + HEADER[11:] + TRAILER, id="not copy"),
        pytest.param(
            HEADER + row_bytes(1, b"", 1, b"zz" * 32) + TRAILER, id="an id not hexadecimal"
        ),
        pytest.param(
            HEADER + row_bytes(1, b"", 1, b"ab" * 31) + b"abab" + TRAILER[:0], id="short id"
        ),
        pytest.param(HEADER + b"\x00\x02" + b"\x00" * 88 + TRAILER, id="two columns"),
    ],
)
def test_a_stream_not_of_these_rows_is_refused(data: bytes) -> None:
    with pytest.raises(CopyFormatError):
        parse(data, []).result()
