"""Tile paths and contents in the C2SP `tlog-tiles` layout, so that standard tooling can mirror a
collection's log from `/c/<slug>/tile/...`.

A tile at level L and index N holds up to 256 consecutive hashes of the tree at height 8·L:
those of the perfect subtrees `(8·L, N·256 + i)`. Level 0 holds leaf hashes; the entries
themselves (the 32 raw bytes of each event id) come as bundles at `tile/entries/<N>`, each
entry prefixed with its length as a big-endian uint16. A tile of width W < 256 is partial:
`.p/<W>`. Index N is written in 3-digit groups, all but the last prefixed with `x`
(1234067 is `x001/x234/067`).

Pure. Parsing is strict (one spelling per tile, bounded length), since paths come from anyone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT  # 256 hashes in a full tile
MAX_LEVEL: Final = 63
ENTRIES: Final = -1  # the `level` of an entry bundle
MAX_PATH_CHARS: Final = 64  # `entries/x009/x223/x372/x036/x854/x775/807.p/255` is 45
_INDEX: Final = re.compile(
    r"(?:x[0-9]{3}/){0,6}[0-9]{3}"
)  # below 10**21: bigint's range is checked
_NUMBER: Final = re.compile(r"0|[1-9][0-9]{0,2}")


@dataclass(frozen=True, slots=True)
class Tile:
    level: int  # 0-63, or ENTRIES for an entry bundle
    index: int
    width: int  # 1-256; 256 is a full tile

    @property
    def tree_level(self) -> int:
        """The height in the tree of the hashes this tile holds (entries: the leaves')."""
        return TILE_HEIGHT * max(self.level, 0)

    @property
    def first(self) -> int:
        """The index, at `tree_level`, of the tile's first hash."""
        return self.index * TILE_WIDTH

    def path(self) -> str:
        level = "entries" if self.level == ENTRIES else str(self.level)
        suffix = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"{level}/{encode_index(self.index)}{suffix}"


def encode_index(index: int) -> str:
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{group}" for group in groups[:-1]), groups[-1]])


def parse_tile_path(path: str) -> Tile | None:
    """The tile a path after `tile/` names, or None if it names none (in any spelling but the
    canonical one)."""
    if len(path) > MAX_PATH_CHARS:
        return None
    head, _, rest = path.partition("/")
    if head == "entries":
        level = ENTRIES
    elif _NUMBER.fullmatch(head) and int(head) <= MAX_LEVEL:
        level = int(head)
    else:
        return None
    width = TILE_WIDTH
    if ".p/" in rest:
        rest, _, width_text = rest.partition(".p/")
        if not _NUMBER.fullmatch(width_text) or not 1 <= int(width_text) < TILE_WIDTH:
            return None
        width = int(width_text)
    if not _INDEX.fullmatch(rest):
        return None
    tile = Tile(level, int(rest.replace("x", "").replace("/", "")), width)
    if tile.first >= 2**63:
        return None
    return tile if tile.path() == path else None  # one spelling: no leading zero groups


def available(tile: Tile, size: int) -> bool:
    """Whether a tree of `size` leaves holds every hash of `tile`: full tiles once complete,
    partial tiles of any width up to what the tree has (a partial tile stays servable after
    its full tile exists, which the spec allows)."""
    hashes_at_level = size >> tile.tree_level
    return tile.first + tile.width <= hashes_at_level


def entry_bundle(entries: Sequence[bytes]) -> bytes:
    """Entries as a bundle: each prefixed with its length, a big-endian uint16."""
    return b"".join(len(entry).to_bytes(2, "big") + entry for entry in entries)
