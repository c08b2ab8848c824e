"""tlog-tiles paths (`tms.tlog.tiles`): the spec's examples, one spelling per tile, and which
tiles a tree of a given size holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tms.tlog.tiles import ENTRIES, Tile, available, encode_index, entry_bundle, parse_tile_path


def test_the_specs_index_example() -> None:
    assert encode_index(1234067) == "x001/x234/067"
    assert encode_index(5) == "005"
    assert encode_index(1000) == "x001/000"
    assert parse_tile_path("0/x001/x234/067") == Tile(0, 1234067, 256)
    assert parse_tile_path("entries/x001/000.p/7") == Tile(ENTRIES, 1000, 7)


@given(
    level=st.sampled_from([ENTRIES, 0, 1, 2, 63]),
    index=st.integers(0, 2**40),
    width=st.integers(1, 256),
)
def test_paths_round_trip(level: int, index: int, width: int) -> None:
    tile = Tile(level, index, width)
    assert parse_tile_path(tile.path()) == tile


@pytest.mark.parametrize(
    "path",
    [
        "",
        "0",
        "0/",
        "0/5",
        "0/0005",
        "0/x000/005",  # a leading zero group: not the one spelling
        "0/x005",
        "0/005/",
        "0/005.p/0",
        "0/005.p/256",
        "0/005.p/05",
        "00/005",
        "64/005",
        "-1/005",
        "entries/005.p/1/x",
        "x/005",
        "0/x999/x999/x999/x999/x999/x999/999",  # beyond bigint
        "0/x999/x999/x999/x999/x999/x999/x999/999",
        "0/" + "x001/" * 30 + "000",
    ],
)
def test_anything_else_names_no_tile(path: str) -> None:
    assert parse_tile_path(path) is None


def test_the_specs_70000_example() -> None:
    """A tree of 70,000 entries: 273 full level-0 tiles, a partial one of width 112, one full
    level-1 tile, a partial one of width 17, a partial level-2 tile of width 1."""
    size = 70_000
    assert available(Tile(0, 272, 256), size) and not available(Tile(0, 273, 256), size)
    assert available(Tile(0, 273, 112), size) and not available(Tile(0, 273, 113), size)
    assert available(Tile(ENTRIES, 273, 112), size)
    assert available(Tile(1, 0, 256), size) and available(Tile(1, 1, 17), size)
    assert not available(Tile(1, 1, 18), size)
    assert available(Tile(2, 0, 1), size) and not available(Tile(2, 0, 2), size)
    assert not available(Tile(3, 0, 1), size)
    assert available(Tile(1, 0, 1), 256) and not available(Tile(0, 1, 1), 256)


def test_entry_bundles_prefix_each_entry_with_its_length() -> None:
    assert entry_bundle([b"\x01" * 32, b"ab"]) == b"\x00\x20" + b"\x01" * 32 + b"\x00\x02ab"
