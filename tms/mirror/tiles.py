"""The log's full entry tiles a sync read but could not yet verify, kept across runs
(`DIR/tiles.pending`): a first copy stopped after reading half the log's tiles (rate-limited,
killed, cut off) starts again from where it was, not from tile 0.

A full tile (`TILE_WIDTH` entries) never changes in an append-only log, so one read is enough;
a partial one (the log's last) is always read again. Kept tiles are a head start and no more,
like `pending.jsonl`: their entries go into the copy only once the checkpoint's root says so
(`Copy.extend`), the file is dropped once the copy holds them, and dropped as well after a
mismatch, so that a tile a lying server served once is never trusted again. Each record is the
tile's index (8 bytes, big-endian) and its entries (32 bytes each); a record cut short by a
kill is dropped when the file is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from tms.tlog.tiles import TILE_WIDTH

TILES: Final = "tiles.pending"
RECORD: Final = 8 + 32 * TILE_WIDTH


class HeldTiles:
    def __init__(self, directory: Path) -> None:
        self.path = directory / TILES
        self.tiles: dict[int, list[str]] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % RECORD
        if whole != len(data):
            os.truncate(self.path, whole)  # so that the next record starts where it should
        for at in range(0, whole, RECORD):
            index = int.from_bytes(data[at : at + 8], "big")
            body = data[at + 8 : at + RECORD]
            self.tiles[index] = [body[i : i + 32].hex() for i in range(0, len(body), 32)]

    def get(self, index: int) -> list[str] | None:
        return self.tiles.get(index)

    def keep(self, index: int, ids: list[str]) -> None:
        """A full tile just read, appended to the file (flushed, not synced: a lost one is read
        again)."""
        if len(ids) != TILE_WIDTH or index in self.tiles:
            return
        with open(self.path, "ab") as file:
            file.write(index.to_bytes(8, "big") + b"".join(bytes.fromhex(i) for i in ids))
        self.tiles[index] = ids

    def drop(self) -> None:
        self.tiles.clear()
        if self.path.exists():
            os.unlink(self.path)
