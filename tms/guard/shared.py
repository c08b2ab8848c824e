"""Counts shared by the server processes of one `tms serve --workers N`: the rate-limit budgets
(`tms.guard.rates`) and the connections each client address, each key and each pool holds
(`tms.http.protocol`), so that a client gets one budget and one cap however many processes serve
it.

They live in one memory-mapped file (`SharedCounts`) of fixed size, made by the supervisor
(`tms.cli.workers`) and opened by each worker: a table of `SLOTS` slots, each a counter named by
the 16-byte hash of its name, the worker that owns it (`RATES`: nobody, a budget's window is
everyone's) and when it expires. A name's slots are within `PROBES` slots of where its hash
points, found by searching the neighbourhood's bytes for the hash. Each operation takes an
exclusive `flock` on the file and costs about 5 to 7 us with it, against about 180 us for a
PostgreSQL round trip on loopback; a relay message's address check makes ten (measured:
`bench/shared_counts.py`, bench/README.md "Shared counts"). A full neighbourhood gives way by
its soonest-expiring slot, so the file never grows; a connection's count never expires, and its
owner's counts are wiped when the supervisor replaces that worker (`forget_owner`): a dead
worker's connections are not held against anyone.

With one process (`tms serve` without `--workers`, `tms stdio`, tests), nothing here is used:
the budgets are `limits`' memory storage, the counts the process's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from limits.aio.storage import MemoryStorage

SLOTS: Final = 1 << 16  # counters held at once (2.5 MiB)
PROBES: Final = 64  # a name's slots are among this many from where its hash points
RATES: Final = -1  # the owner of a budget's counters: all the workers
FREE: Final = -2  # an empty slot's owner
MAX_WORKERS: Final = 32  # each worker's count of a name takes a slot of the name's neighbourhood
_SLOT = struct.Struct("<16sqdi4x")  # name's hash, count, expiry (epoch seconds), owner
SIZE: Final = SLOTS * _SLOT.size
_EMPTY_NAME: Final = bytes(16)  # an empty slot's name (a name's hash is never all zeros)

STATE_ENV: Final = "TMS_WORKER_STATE"  # the file's path, set by the supervisor for its workers
SLOT_ENV: Final = "TMS_WORKER_SLOT"  # this worker's number, 0 to N-1


def _hash(name: str) -> bytes:
    return hashlib.blake2b(name.encode(), digest_size=16).digest()


class SharedCounts:
    """The table in `path`, mapped into this process. `create` makes (or empties) it."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self._fd = os.open(path, flags, 0o600)
        if create:
            os.ftruncate(self._fd, SIZE)
            empty = _SLOT.pack(b"", 0, 0.0, FREE)
            with mmap.mmap(self._fd, SIZE) as view:
                for at in range(0, SIZE, _SLOT.size):
                    view[at : at + _SLOT.size] = empty
        self._map = mmap.mmap(self._fd, SIZE)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    # --- under the lock -------------------------------------------------------------------------

    def _lock(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def _unlock(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _neighbourhood(self, digest: bytes) -> tuple[int, bytes]:
        """Where `digest`'s neighbourhood starts (a slot number) and its bytes, copied in one
        slice (wrapping round the end of the table)."""
        start = int.from_bytes(digest[:8], "little") % SLOTS
        first = start * _SLOT.size
        end = first + PROBES * _SLOT.size
        if end <= SIZE:
            return start, self._map[first:end]
        return start, self._map[first:] + self._map[: end - SIZE]

    @staticmethod
    def _slots_named(start: int, block: bytes, name: bytes) -> Iterator[int]:
        """The offsets in the table of the slots of `block` whose name is `name`, found by the
        bytes' own search (a slot's name is its first 16 bytes): a look-up costs a fraction of
        a microsecond, where unpacking each of the `PROBES` slots cost about 20 us."""
        at = block.find(name)
        while at != -1:
            if at % _SLOT.size == 0:
                yield ((start + at // _SLOT.size) % SLOTS) * _SLOT.size
            at = block.find(name, at + 1)

    def _find(self, digest: bytes, owner: int, now: float, *, make: bool) -> int | None:
        """The offset of the live slot of (`digest`, `owner`); with `make`, a free one (or the
        neighbourhood's soonest to expire) claimed for it when it has none."""
        start, block = self._neighbourhood(digest)
        for at in self._slots_named(start, block, digest):
            _, _, expiry, who = _SLOT.unpack_from(self._map, at)
            if who == owner and expiry > now:
                return at
        if not make:
            return None
        free = next(self._slots_named(start, block, _EMPTY_NAME), None)
        if free is None:  # no empty slot: the first expired one, else the soonest to expire
            soonest: tuple[float, int] | None = None
            for step in range(PROBES):
                at = ((start + step) % SLOTS) * _SLOT.size
                _, _, expiry, _ = _SLOT.unpack_from(self._map, at)
                if expiry <= now:
                    soonest = (expiry, at)
                    break
                if soonest is None or expiry < soonest[0]:
                    soonest = (expiry, at)
            assert soonest is not None
            free = soonest[1]
        _SLOT.pack_into(self._map, free, digest, 0, math.inf, owner)
        return free

    def add(self, name: str, amount: int, *, owner: int = RATES, expiry: float = math.inf) -> int:
        """Add `amount` to `owner`'s count of `name` (a new one expires at `expiry`, epoch
        seconds); its count after. A count that falls to 0 or below is removed."""
        digest = _hash(name)
        self._lock()
        try:
            now = time.time()
            at = self._find(digest, owner, now, make=amount > 0)
            if at is None:
                return 0
            _, count, until, _ = _SLOT.unpack_from(self._map, at)
            count += amount
            if count <= 0:
                _SLOT.pack_into(self._map, at, b"", 0, 0.0, FREE)
                return 0
            _SLOT.pack_into(self._map, at, digest, count, min(until, expiry), owner)
            return int(count)
        finally:
            self._unlock()

    def get(self, name: str, owner: int = RATES) -> tuple[int, float]:
        """`owner`'s count of `name` and when it expires; (0, 0.0) when it has none."""
        digest = _hash(name)
        self._lock()
        try:
            at = self._find(digest, owner, time.time(), make=False)
            if at is None:
                return 0, 0.0
            _, count, expiry, _ = _SLOT.unpack_from(self._map, at)
            return int(count), float(expiry)
        finally:
            self._unlock()

    def total(self, name: str, *, besides: int | None = None) -> int:
        """Every worker's count of `name` added up (but `besides`'s)."""
        return sum(self._counts(name, besides))

    def put(self, name: str, value: int, *, owner: int) -> None:
        """Set `owner`'s count of `name` to `value` (0: remove it)."""
        digest = _hash(name)
        self._lock()
        try:
            at = self._find(digest, owner, time.time(), make=value > 0)
            if at is not None:
                if value > 0:
                    _SLOT.pack_into(self._map, at, digest, value, math.inf, owner)
                else:
                    _SLOT.pack_into(self._map, at, b"", 0, 0.0, FREE)
        finally:
            self._unlock()

    def largest(self, name: str, *, besides: int | None = None) -> int:
        """The largest of the workers' counts of `name` (but `besides`'s)."""
        return max(self._counts(name, besides), default=0)

    def _counts(self, name: str, besides: int | None) -> list[int]:
        """Each worker's live count of `name` (but `besides`'s), read under the lock."""
        digest = _hash(name)
        counts = []
        self._lock()
        try:
            now = time.time()
            start, block = self._neighbourhood(digest)
            for at in self._slots_named(start, block, digest):
                _, count, expiry, who = _SLOT.unpack_from(self._map, at)
                if who not in (FREE, RATES, besides) and expiry > now:
                    counts.append(int(count))
        finally:
            self._unlock()
        return counts

    def clear(self, name: str, owner: int = RATES) -> None:
        digest = _hash(name)
        self._lock()
        try:
            at = self._find(digest, owner, time.time(), make=False)
            if at is not None:
                _SLOT.pack_into(self._map, at, b"", 0, 0.0, FREE)
        finally:
            self._unlock()

    def forget_owner(self, owner: int) -> int:
        """Empty every slot `owner` holds (a worker that died: its connections are gone); how
        many there were."""
        empty = _SLOT.pack(b"", 0, 0.0, FREE)
        wiped = 0
        self._lock()
        try:
            for at in range(0, SIZE, _SLOT.size):
                if _SLOT.unpack_from(self._map, at)[3] == owner:
                    self._map[at : at + _SLOT.size] = empty
                    wiped += 1
        finally:
            self._unlock()
        return wiped


class SharedStorage(MemoryStorage):
    """`limits`' memory storage with its counters in a `SharedCounts`: the sliding window's
    arithmetic is the library's own (`acquire_sliding_window_entry`, with its revert when
    another process's hit won a race), only where the counts live differs."""

    def __init__(self, counts: SharedCounts) -> None:
        super().__init__()
        self.counts = counts

    async def incr(self, key: str, expiry: float, amount: int = 1) -> int:
        return self.counts.add(key, amount, expiry=time.time() + expiry)

    async def decr(self, key: str, amount: int = 1) -> int:
        return self.counts.add(key, -amount)

    async def get(self, key: str) -> int:
        return self.counts.get(key)[0]

    async def get_expiry(self, key: str) -> float:
        count, expiry = self.counts.get(key)
        return expiry if count else time.time()

    async def clear(self, key: str) -> None:
        self.counts.clear(key)


class Worker:
    """This process as one of the supervisor's workers: the shared table and its number."""

    def __init__(self, counts: SharedCounts, slot: int) -> None:
        self.counts = counts
        self.slot = slot

    def storage(self) -> SharedStorage:
        return SharedStorage(self.counts)


_current: Worker | None = None


def current() -> Worker | None:
    """This process's `Worker` when the supervisor started it (`STATE_ENV` set), else None."""
    global _current
    if _current is None:
        path = os.environ.get(STATE_ENV)
        if path:
            _current = Worker(SharedCounts(Path(path)), int(os.environ.get(SLOT_ENV, "0")))
    return _current
