"""Negentropy protocol V1 (NIP-77's appendix): range-based set reconciliation of (timestamp, id)
items, both roles.

Pure: no database, no network. The relay is the responder (`Responder.respond`); a mirror that
pulls a collection from another ledger is the initiator (`Initiator.initiate`, then
`Initiator.reconcile` until it returns no next message), learning the ids it has and the other
side lacks (`have`) and the ids the other side has and it lacks (`need`).

The wire format, as the protocol document fixes it:

- a message is the version byte 0x61, then ranges; each range is its upper bound, a mode and
  the mode's payload, and starts where the previous one ended (the first at the very bottom);
- a varint is base-128, most significant group first, the high bit set on every byte but the
  last;
- a bound is a timestamp (varint: 0 is infinity, otherwise 1 + the difference from the previous
  bound's timestamp in the same message) and an id prefix (varint length, then the bytes), the
  shortest prefix that tells the two items around the bound apart;
- modes: Skip (0, nothing to do), Fingerprint (1, 16 bytes), IdList (2, a varint count, then
  the ids);
- a range's fingerprint is the first 16 bytes of SHA-256 of (the sum of its ids as
  little-endian 256-bit integers, mod 2^256) followed by varint(count).

Items are held as two numpy arrays (timestamps; ids as bytes), sorted once by (timestamp, id):
a million items take about 40 MB, a range's fingerprint is one vectorised sum (ids viewed as
eight 32-bit limbs, summed in 64 bits, carried in Python), and a bound is found by binary
search, so one round costs O(items in the ranges it touches), never a re-sort.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

PROTOCOL_VERSION: Final = 0x61
ID_SIZE: Final = 32
FINGERPRINT_SIZE: Final = 16
BUCKETS: Final = 16  # a mismatched range is split into this many
INFINITY: Final = 2**64 - 1  # the timestamp of the bound above every item
MIN_FRAME_SIZE: Final = 4096  # the smallest frameSizeLimit the reference implementation takes
FRAME_MARGIN: Final = 200  # room kept under frameSizeLimit for the closing range
SKIP: Final = 0
FINGERPRINT: Final = 1
IDLIST: Final = 2
BLOCK: Final = 256  # items per block of the fingerprints' prefix sums
_MOD: Final = 1 << 256


class NegentropyError(ValueError):
    """A message that is not Negentropy V1, or that this side cannot use."""


# --- varints and fingerprints ----------------------------------------------------------------


def varint(n: int) -> bytes:
    """Base-128, most significant group first."""
    if n < 0:
        raise ValueError("a varint is not negative")
    out = [n & 0x7F]
    n >>= 7
    while n:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    return bytes(reversed(out))


class _Reader:
    """A message being read, each read checked against its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def empty(self) -> bool:
        return self.pos >= len(self.data)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise NegentropyError("the message ends inside a value")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise NegentropyError("the message ends inside a value")
        value = self.data[self.pos : self.pos + n]
        self.pos += n
        return value

    def varint(self) -> int:
        n = 0
        for _ in range(10):  # 64 bits at most
            b = self.byte()
            n = (n << 7) | (b & 0x7F)
            if not b & 0x80:
                return n
        raise NegentropyError("a varint is longer than 64 bits")


def fingerprint_of(id_sum: int, count: int) -> bytes:
    """The fingerprint of a range whose ids sum (mod 2^256) to `id_sum`."""
    digest = hashlib.sha256((id_sum % _MOD).to_bytes(32, "little") + varint(count)).digest()
    return digest[:FINGERPRINT_SIZE]


# --- items -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a range ends: items below (timestamp, prefix padded with zero bytes) are in it."""

    timestamp: int
    prefix: bytes = b""


class Items:
    """A sealed, sorted set of (timestamp, 32-byte id) items."""

    def __init__(self, timestamps: npt.NDArray[np.uint64], ids: npt.NDArray[np.uint8]) -> None:
        """`timestamps`: n values; `ids`: n rows of 32 bytes; sorted here by (timestamp, id)
        unless they already are, and duplicates (same id) dropped."""
        n = len(timestamps)
        if ids.shape != (n, ID_SIZE):
            raise ValueError("ids are rows of 32 bytes, one per timestamp")
        ts = np.ascontiguousarray(timestamps, dtype=np.uint64)
        rows = np.ascontiguousarray(ids, dtype=np.uint8)
        if n > 1:
            ts, rows = _in_order(ts, rows)
            words = rows.view(">u8").reshape(n, 4)
            same = np.all(words[1:] == words[:-1], axis=1) & (ts[1:] == ts[:-1])
            if same.any():
                keep = np.concatenate(([True], ~same))
                ts, rows = ts[keep], rows[keep]
        self.timestamps = ts
        self.ids = rows
        self._limbs = rows.view("<u4").reshape(len(ts), 8)
        self._blob = rows.tobytes()
        # Each limb's sum over every BLOCK items, accumulated: a range's sum is then two
        # prefixes and at most 2 * BLOCK items at its ends. 32-bit limbs summed in 64 bits
        # stay exact up to 2^32 items.
        blocks = len(ts) // BLOCK
        sums = self._limbs[: blocks * BLOCK].reshape(blocks, BLOCK, 8).sum(axis=1, dtype=np.uint64)
        self._prefix = np.zeros((blocks + 1, 8), dtype=np.uint64)
        np.cumsum(sums, axis=0, out=self._prefix[1:])

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, bytes]]) -> Items:
        """Items from (timestamp, id) pairs, in any order."""
        listed = list(pairs)
        for ts, item_id in listed:
            if len(item_id) != ID_SIZE or not 0 <= ts < INFINITY:
                raise ValueError("an item is a timestamp below 2^64 - 1 and a 32-byte id")
        timestamps = np.array([ts for ts, _ in listed], dtype=np.uint64)
        ids = np.frombuffer(b"".join(i for _, i in listed), dtype=np.uint8).reshape(
            len(listed), ID_SIZE
        )
        return cls(timestamps, ids)

    @classmethod
    def of_hex(cls, timestamps: Sequence[int], ids: Sequence[str]) -> Items:
        """Items from two columns, the ids in hex, in any order: a large set (a mirror's
        copy) is converted in one pass each, not pair by pair."""
        if len(timestamps) != len(ids):
            raise ValueError("one timestamp per id")
        stamps = np.array(timestamps, dtype=np.uint64)  # OverflowError past 2^64 - 1
        if len(stamps) and int(stamps.max()) >= INFINITY:
            raise ValueError("an item is a timestamp below 2^64 - 1 and a 32-byte id")
        raw = bytes.fromhex("".join(ids))
        if len(raw) != ID_SIZE * len(ids):
            raise ValueError("an item is a timestamp below 2^64 - 1 and a 32-byte id")
        return cls(stamps, np.frombuffer(raw, dtype=np.uint8).reshape(len(ids), ID_SIZE))

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def nbytes(self) -> int:
        """What the set holds in memory: its arrays, the ids' copy as bytes, the prefix sums
        (about 72 bytes an item)."""
        return self.timestamps.nbytes + self.ids.nbytes + len(self._blob) + self._prefix.nbytes

    def id(self, i: int) -> bytes:
        return self._blob[i * ID_SIZE : (i + 1) * ID_SIZE]

    def timestamp(self, i: int) -> int:
        return int(self.timestamps[i])

    def fingerprint(self, lo: int, hi: int) -> bytes:
        """The fingerprint of items [lo, hi), from the block prefix sums and the ends."""
        first, last = -(-lo // BLOCK), hi // BLOCK
        if last - first < 2:
            limbs = self._limbs[lo:hi].sum(axis=0, dtype=np.uint64)
        else:
            limbs = (
                self._prefix[last]
                - self._prefix[first]
                + self._limbs[lo : first * BLOCK].sum(axis=0, dtype=np.uint64)
                + self._limbs[last * BLOCK : hi].sum(axis=0, dtype=np.uint64)
            )
        total = sum(int(limb) << (32 * k) for k, limb in enumerate(limbs.tolist()))
        return fingerprint_of(total, hi - lo)

    def blob(self, lo: int, hi: int) -> bytes:
        """The ids of items [lo, hi), end to end."""
        return self._blob[lo * ID_SIZE : hi * ID_SIZE]

    def lower_bound(self, lo: int, hi: int, bound: Bound) -> int:
        """The first index in [lo, hi) whose item is at or above `bound` (hi: none)."""
        if bound.timestamp >= INFINITY:
            return hi
        when = np.uint64(bound.timestamp)
        window = self.timestamps[lo:hi]
        first = lo + int(np.searchsorted(window, when, "left"))
        if not bound.prefix.strip(b"\0"):
            return first
        last = lo + int(np.searchsorted(window, when, "right"))
        key = bound.prefix.ljust(ID_SIZE, b"\0")
        while first < last:  # binary search among the items of that one timestamp
            mid = (first + last) // 2
            if self.id(mid) < key:
                first = mid + 1
            else:
                last = mid
        return first

    def minimal_bound(self, i: int) -> Bound:
        """The shortest bound between item i - 1 and item i."""
        ts = self.timestamp(i)
        if self.timestamp(i - 1) != ts:
            return Bound(ts)
        before, here = self.id(i - 1), self.id(i)
        shared = 0
        while shared < ID_SIZE and before[shared] == here[shared]:
            shared += 1
        return Bound(ts, here[: shared + 1])


def _in_order(
    ts: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
    """The items sorted by (timestamp, id), as they are when they already are."""
    order = item_order(ts, rows)
    if order is None:
        return ts, rows
    return ts[order], rows[order]


def item_order(
    ts: npt.NDArray[np.uint64], ids: npt.NDArray[np.uint8]
) -> npt.NDArray[np.intp] | None:
    """The permutation that sorts items by (timestamp, id), or None when they are sorted
    already (a database index's order, checked in O(n)). By timestamp, then by id among the
    items that share one, so a million items never pay a full five-key sort."""
    n = len(ts)
    words = ids.view(">u8").reshape(n, 4)  # big-endian: compares as the bytes do
    if n < 2 or _ordered(ts, words):
        return None
    order = np.argsort(ts, kind="stable")
    ranked = ts[order]
    tied = np.zeros(n, dtype=bool)
    tied[1:] = ranked[1:] == ranked[:-1]
    tied[:-1] |= tied[1:]
    if tied.any():
        at = np.flatnonzero(tied)
        w = words[order[at]]
        within = np.lexsort((w[:, 3], w[:, 2], w[:, 1], w[:, 0], ranked[at]))
        order[at] = order[at[within]]
    return order


def insertion_points(
    ts: npt.NDArray[np.uint64],
    ids: npt.NDArray[np.uint8],
    new_ts: npt.NDArray[np.uint64],
    new_ids: npt.NDArray[np.uint8],
) -> npt.NDArray[np.intp]:
    """Where each new item goes among sorted items (its lower bound by (timestamp, id)), so
    that `np.insert` at these points keeps them sorted when the new ones are sorted too: a few
    items added to a million cost one copy, not a sort. By timestamp at once; by id, a binary
    search, only within the timestamp a new item shares with others."""
    lo = np.searchsorted(ts, new_ts, "left")
    hi = np.searchsorted(ts, new_ts, "right")
    points = lo.copy()
    for k in np.flatnonzero(hi > lo).tolist():
        key = new_ids[k].tobytes()
        first, last = int(lo[k]), int(hi[k])
        while first < last:
            mid = (first + last) // 2
            if ids[mid].tobytes() < key:
                first = mid + 1
            else:
                last = mid
        points[k] = first
    return points


def _ordered(ts: npt.NDArray[np.uint64], words: npt.NDArray[np.uint64]) -> bool:
    """Whether the rows are in non-decreasing (timestamp, id) order already: O(n), no sort."""
    less = np.zeros(len(ts) - 1, dtype=bool)
    equal = np.ones(len(ts) - 1, dtype=bool)
    for column in (ts, words[:, 0], words[:, 1], words[:, 2], words[:, 3]):
        a, b = column[:-1], column[1:]
        less |= equal & (a < b)
        equal &= a == b
    return bool(np.all(less | equal))


# --- the protocol ----------------------------------------------------------------------------


class _Side:
    """What both roles share: the items, the frame size limit, and how a range is answered."""

    initiator: bool = False

    def __init__(self, items: Items, frame_size_limit: int = 0) -> None:
        """`frame_size_limit`: the most bytes one message of ours may take (0: no limit)."""
        if frame_size_limit and frame_size_limit < MIN_FRAME_SIZE:
            raise ValueError(f"frame_size_limit is 0 or at least {MIN_FRAME_SIZE:,} bytes")
        self.items = items
        self.frame_size_limit = frame_size_limit
        self._last_out = 0
        self._last_in = 0

    def _over(self, size: int) -> bool:
        return bool(self.frame_size_limit) and size > self.frame_size_limit - FRAME_MARGIN

    def _timestamp_out(self, ts: int) -> bytes:
        if ts >= INFINITY:
            self._last_out = INFINITY
            return varint(0)
        delta = ts - self._last_out
        self._last_out = ts
        return varint(delta + 1)

    def _bound_out(self, bound: Bound) -> bytes:
        return self._timestamp_out(bound.timestamp) + varint(len(bound.prefix)) + bound.prefix

    def _bound_in(self, reader: _Reader) -> Bound:
        raw = reader.varint()
        ts = INFINITY if raw == 0 else raw - 1
        if self._last_in >= INFINITY or ts >= INFINITY:
            self._last_in = INFINITY
            ts = INFINITY
        else:
            ts += self._last_in
            if ts >= INFINITY:
                raise NegentropyError("a bound's timestamp is past 2^64")
            self._last_in = ts
        length = reader.varint()
        if length > ID_SIZE:
            raise NegentropyError("a bound's id prefix is longer than 32 bytes")
        return Bound(ts, reader.take(length))

    def _split(self, lo: int, hi: int, upper: Bound) -> bytes:
        """Ranges covering items [lo, hi): their ids if few, else 16 fingerprinted buckets."""
        items = self.items
        count = hi - lo
        if count < BUCKETS * 2:
            return self._bound_out(upper) + varint(IDLIST) + varint(count) + items.blob(lo, hi)
        out = bytearray()
        per, extra = divmod(count, BUCKETS)
        at = lo
        for k in range(BUCKETS):
            size = per + (1 if k < extra else 0)
            print_ = items.fingerprint(at, at + size)
            at += size
            bound = upper if at == hi else items.minimal_bound(at)
            out += self._bound_out(bound) + varint(FINGERPRINT) + print_
        return bytes(out)

    def _reconcile(self, query: bytes, have: list[bytes], need: list[bytes]) -> bytes:
        """Answer one message: the reply, whose first byte is the version (initiators collect
        `have` and `need` on the way)."""
        self._last_in = self._last_out = 0
        reader = _Reader(query)
        version = reader.byte()
        if not 0x60 <= version <= 0x6F:
            raise NegentropyError("not a Negentropy message (its first byte is not 0x6n)")
        out = bytearray([PROTOCOL_VERSION])
        if version != PROTOCOL_VERSION:
            if self.initiator:
                raise NegentropyError(
                    f"the other side speaks Negentropy protocol V{version - 0x60}, not V1"
                )
            return bytes(out)  # the version this side speaks, and nothing else
        items = self.items
        prev_bound = Bound(0)
        prev_index = 0
        skip = False
        full = False
        while not reader.empty():
            part = bytearray()

            bound = self._bound_in(reader)
            mode = reader.varint()
            lo = prev_index
            hi = items.lower_bound(prev_index, len(items), bound)
            if mode == SKIP:
                skip = True
            elif mode == FINGERPRINT:
                theirs = reader.take(FINGERPRINT_SIZE)
                if theirs != items.fingerprint(lo, hi):
                    if skip:  # the ranges skipped before this one, as one
                        skip = False
                        part += self._bound_out(prev_bound) + varint(SKIP)
                    part += self._split(lo, hi, bound)
                else:
                    skip = True
            elif mode == IDLIST:
                count = reader.varint()
                if count > (len(query) - reader.pos) // ID_SIZE:
                    raise NegentropyError("an id list is longer than the message")
                raw = reader.take(count * ID_SIZE)
                if self.initiator and lo == hi:
                    need.extend(raw[k * ID_SIZE : (k + 1) * ID_SIZE] for k in range(count))
                    skip = True
                elif self.initiator:
                    theirs_ids = {raw[k * ID_SIZE : (k + 1) * ID_SIZE] for k in range(count)}
                    for i in range(lo, hi):
                        mine = items.id(i)
                        if mine in theirs_ids:
                            theirs_ids.discard(mine)
                        else:
                            have.append(mine)
                    need.extend(theirs_ids)
                    skip = True
                else:
                    if skip:  # the ranges skipped before this one, as one
                        skip = False
                        part += self._bound_out(prev_bound) + varint(SKIP)
                    end = bound
                    full = False
                    listed = hi - lo
                    if self.frame_size_limit:
                        room = self.frame_size_limit - FRAME_MARGIN - len(out) - len(part) - 60
                        if listed > max(room, 0) // ID_SIZE:
                            listed = max(room, 0) // ID_SIZE
                            end = Bound(items.timestamp(lo + listed), items.id(lo + listed))
                            hi = lo + listed  # the rest is fingerprinted below
                            full = True
                    ids = items.blob(lo, lo + listed)
                    part += self._bound_out(end) + varint(IDLIST) + varint(listed) + ids
                    out += part
                    part.clear()
            else:
                raise NegentropyError(f"unknown range mode {mode}")
            if full or self._over(len(out) + len(part)):
                # Too much for one frame: what is left is one fingerprint, asked again next time.
                rest = items.fingerprint(hi, len(items))
                out += self._bound_out(Bound(INFINITY)) + varint(FINGERPRINT) + rest
                break
            out += part
            prev_index = hi
            prev_bound = bound
        return bytes(out)


class Responder(_Side):
    """The side that answers (a relay): each message in, one message out."""

    def respond(self, query: bytes) -> bytes:
        return self._reconcile(query, [], [])


class Initiator(_Side):
    """The side that starts, and learns which ids each side lacks."""

    initiator = True

    def initiate(self) -> bytes:
        self._last_out = 0
        return bytes([PROTOCOL_VERSION]) + self._split(0, len(self.items), Bound(INFINITY))

    def reconcile(self, reply: bytes) -> tuple[bytes | None, list[bytes], list[bytes]]:
        """The next message (None: reconciled), the ids only we have, the ids only they have."""
        have: list[bytes] = []
        need: list[bytes] = []
        out = self._reconcile(reply, have, need)
        return (None if len(out) == 1 else out), have, need
