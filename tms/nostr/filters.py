"""NIP-01 filters (with NIP-50's `search`): parsed from a client's JSON within bounds, and
matched against events.

Pure: the relay parses a REQ or COUNT's filters here, the ledger turns them into SQL
(`tms.ledger.read.filters`), and live delivery matches each new event with `Filter.matches`, so a
filter means one thing everywhere. A filter that cannot be honoured is refused with a message
saying which field and why (`FilterError`), never silently widened or narrowed.

NIP-01 today asks for whole ids and keys (64 lowercase hex characters): prefixes are refused.

A filter's size is capped as a whole, not only list by list: `MAX_VALUES` counts the authors,
kinds and every tag's values together (52 tag fields of 1,000 values each once made one filter of
52,000), and a tag value is at most `MAX_TAG_VALUE_CHARS`. Ids have a cap of their own,
`MAX_IDS`, and a filter of ids may ask a `limit` up to their number. What a parsed filter holds
in memory (`Filter.size`) is what a relay counts against a connection's budget while it is open.

A sync's fetch of what NIP-77 said it lacks names every id in one filter (NDK's does): up to
`MAX_IDS`, as many as a relay message holds. More than `MAX_VALUES` of them are held compactly
(`Ids`: sorted, 32 bytes each, 6.4 MB for 200,000, where Python strings in a set took about 30
MB), and answered whole only: a filter of more than `MAX_LISTED_IDS` ids may not ask a `limit`
under their number (what reads its ids all at once, a COUNT, a NEG-OPEN or a page by `seq`,
takes at most that many), so the relay reads them a page at a time (`id_pages`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from tms.errors import InvalidEvent, shown
from tms.nostr.events import Event, check_text, is_hex64

MAX_VALUES: Final = 1000  # authors, kinds and tag values, together, in one filter
# Ids in one filter: a sync fetches what NIP-77 said it lacks in one REQ (NDK sends every id in
# one filter). 200,000 are 13.4 MB of JSON, within a relay message (16 MiB), held in 6.4 MB
# (`Ids`), within a relay connection's budget (8 MiB); each is one probe of the ids' index.
MAX_IDS: Final = 200_000
# Ids of a filter read all at once (a COUNT, a NEG-OPEN, a REQ paged by `seq` under a `limit`):
# 20,000 are a list of about 2.4 MB for one statement.
MAX_LISTED_IDS: Final = 20_000
MAX_TAG_VALUE_CHARS: Final = 1024
VALUE_OVERHEAD: Final = 96  # bytes a value costs in a set beyond its characters, about
MAX_SEARCH_CHARS: Final = 1000
MAX_TIMESTAMP: Final = 2**53 - 1  # as created_at (JSON.stringify's exact integers)
MAX_KIND: Final = 65535
FIELDS: Final = frozenset({"ids", "authors", "kinds", "since", "until", "limit", "search"})
_TAG_FIELD: Final = re.compile(r"#[a-zA-Z]")


class FilterError(ValueError):
    """A filter the relay will not run; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Filter:
    ids: AbstractSet[str] | None = None  # a frozenset, or `Ids` past `MAX_VALUES`
    authors: frozenset[str] | None = None
    kinds: frozenset[int] | None = None
    since: int | None = None
    until: int | None = None
    limit: int | None = None
    tags: Mapping[str, frozenset[str]] = field(default_factory=dict)  # "e" -> values of "#e"
    search: str | None = None

    def matches(self, event: Event) -> bool:
        """NIP-01: every condition the filter names holds (tags: one tag of that name carries
        one of the values). `search` is not matched here: it ranks, and live delivery never
        runs it (see the relay)."""
        if self.ids is not None and event.id not in self.ids:
            return False
        if self.kinds is not None and event.kind not in self.kinds:
            return False
        if self.authors is not None and event.pubkey not in self.authors:
            return False
        if self.since is not None and event.created_at < self.since:
            return False
        if self.until is not None and event.created_at > self.until:
            return False
        for name, values in self.tags.items():
            if not any(len(tag) > 1 and tag[0] == name and tag[1] in values for tag in event.tags):
                return False
        return True

    @property
    def size(self) -> int:
        """Bytes it holds in memory, about: what a subscription costs while it is open. Text
        counts by its UTF-8 bytes, never its characters: 1,024 characters of a tag value may
        be 4 KB (Python holds such a string in 4 bytes a character too)."""
        total = 512 + _bytes(self.search or "")
        if isinstance(self.ids, Ids):
            total += self.ids.nbytes
        for values in (self.ids, self.authors, self.kinds, *self.tags.values()):
            if isinstance(values, Ids):
                continue
            for value in values or ():
                total += VALUE_OVERHEAD + (_bytes(value) if isinstance(value, str) else 8)
        return total

    def to_dict(self) -> dict[str, Any]:
        """The filter as NIP-01's JSON object (values sorted), as a read filter is nip01 it."""
        nip01: dict[str, Any] = {}
        for name, values in (("ids", self.ids), ("authors", self.authors), ("kinds", self.kinds)):
            if values is not None:
                nip01[name] = sorted(values)
        for letter, tag_values in self.tags.items():
            nip01[f"#{letter}"] = sorted(tag_values)
        for name, value in (
            ("since", self.since),
            ("until", self.until),
            ("limit", self.limit),
            ("search", self.search),
        ):
            if value is not None:
                nip01[name] = value
        return nip01

    @property
    def empty(self) -> bool:
        """Matches nothing whatever is stored: an empty list of ids, authors, kinds or values,
        or a window that closes before it opens."""
        lists = (self.ids, self.authors, self.kinds, *self.tags.values())
        if any(values is not None and not values for values in lists):
            return True
        return self.since is not None and self.until is not None and self.since > self.until


def _bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def parse_filter(obj: object, *, max_limit: int, max_ids: int = MAX_IDS) -> Filter:
    """One filter from a REQ or COUNT, or `FilterError`. `limit` above `max_limit` (or, for a
    filter of ids, above their number) is refused rather than cut, so a client never mistakes a
    cut answer for the whole."""
    if not isinstance(obj, dict):
        raise FilterError("a filter must be a JSON object")
    unknown = sorted(name for name in obj if name not in FIELDS and not _TAG_FIELD.fullmatch(name))
    if unknown:
        names = ", ".join(f"'{shown(name, 32)}'" for name in unknown[:5])
        raise FilterError(
            f"unknown filter field {names}: this relay knows ids, authors, kinds, #<letter>, "
            "since, until, limit and search"
        )
    ids = _id_list(obj, max_ids)
    authors = _hex_list(obj, "authors")
    kinds = _int_list(obj, "kinds")
    tags = {name[1:]: _tag_values(obj, name) for name in obj if name.startswith("#")}
    total = sum(len(values) for values in (authors, kinds, *tags.values()) if values)
    if total > MAX_VALUES:
        raise FilterError(
            f"the filter has {total:,} authors, kinds and tag values in all; at most "
            f"{MAX_VALUES:,} per filter"
        )
    since = _integer(obj, "since", MAX_TIMESTAMP)
    until = _integer(obj, "until", MAX_TIMESTAMP)
    limit = _integer(obj, "limit", None)
    if limit is not None and limit > max(max_limit, len(ids or ())):
        raise FilterError(
            f"limit {limit} is more than this relay's max_limit, {max_limit} (a filter of ids "
            "may ask for as many as it names)"
        )
    if ids is not None and len(ids) > MAX_LISTED_IDS and limit is not None and limit < len(ids):
        raise FilterError(
            f"ids has {len(ids):,} values and limit {limit}: a filter of more than "
            f"{MAX_LISTED_IDS:,} ids is answered whole (no limit, or one of at least their number)"
        )
    search = obj.get("search")
    if search is not None:
        if not isinstance(search, str) or not search.strip():
            raise FilterError("search must be a non-empty string")
        if len(search) > MAX_SEARCH_CHARS:
            raise FilterError(f"search is longer than {MAX_SEARCH_CHARS} characters")
        try:
            check_text(search, "search")
        except InvalidEvent as exc:
            raise FilterError(str(exc)) from None
    return Filter(ids, authors, kinds, since, until, limit, tags, search)


def _values(obj: dict[str, object], name: str, most: int = MAX_VALUES) -> list[object] | None:
    values = obj.get(name)
    if values is None:
        return None
    if not isinstance(values, list):
        raise FilterError(f"{name} must be a list")
    if len(values) > most:
        raise FilterError(f"{name} has {len(values):,} values; at most {most:,} per filter")
    return values


def _id_list(obj: dict[str, object], most: int) -> AbstractSet[str] | None:
    """`ids`: past `MAX_VALUES` checked at C speed and held compactly (`Ids`); a value that is
    not an id is named as for any list."""
    values = _values(obj, "ids", most)
    if (
        values is not None
        and len(values) > MAX_VALUES
        and all(type(value) is str and len(value) == 64 for value in values)
    ):
        joined = "".join(value for value in values if isinstance(value, str))
        try:
            return Ids.of_hex(joined)
        except ValueError:
            pass  # named below
    return _hex_list(obj, "ids", most)


def _hex_list(obj: dict[str, object], name: str, most: int = MAX_VALUES) -> frozenset[str] | None:
    values = _values(obj, name, most)
    if values is None:
        return None
    for value in values:
        if not is_hex64(value):
            raise FilterError(
                f"{name} must hold 64-character lowercase hex values (no prefixes); "
                f"got {shown(value, 70)}"
            )
    return frozenset(value for value in values if isinstance(value, str))


class Ids(AbstractSet[str]):
    """Many event ids held compactly: distinct, sorted, 32 bytes each (a numpy array of `V32`,
    ordered as bytes), a set of hex strings to whoever reads it. Iterated in order. Made from
    200,000 ids in about 0.1 s (the message's JSON itself takes 0.04 s to parse)."""

    __slots__ = ("_sorted",)

    def __init__(self, packed: np.ndarray[Any, Any]) -> None:
        """`packed`: distinct 32-byte ids, sorted (`of_hex`, `of`)."""
        self._sorted = packed

    @classmethod
    def of_hex(cls, joined: str) -> Ids:
        """From 64-character ids joined end to end; `ValueError` unless all of it is lowercase
        hex (`fromhex` skips spaces: the length says whether it met one)."""
        raw = bytes.fromhex(joined)
        if len(raw) * 2 != len(joined) or len(raw) % 32 or joined != joined.lower():
            raise ValueError("not lowercase hex ids")
        return cls(np.unique(np.frombuffer(raw, dtype="V32")))

    @classmethod
    def of(cls, ids: Iterable[str]) -> Ids:
        return cls.of_hex("".join(ids))

    def merged(self, ids: Iterable[str]) -> Ids:
        """These ids and `ids` together (all of `ids` past these: appended, as a stored answer
        of ids sends them in order)."""
        mine, more = self._sorted, Ids.of(ids)._sorted
        if not len(mine) or not len(more):
            return Ids(more if len(more) else mine)
        if bytes(more[0]) > bytes(mine[-1]):
            return Ids(np.concatenate((mine, more)))
        return Ids(np.union1d(mine, more))

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str) or len(value) != 64:
            return False
        try:
            key = bytes.fromhex(value)
        except ValueError:
            return False
        at = int(np.searchsorted(self._sorted, np.frombuffer(key, dtype="V32")[0]))
        return at < len(self._sorted) and bytes(self._sorted[at]) == key

    def __len__(self) -> int:
        return len(self._sorted)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._sorted), 1024):
            yield from _hexes(self._sorted[start : start + 1024].tobytes())

    __hash__ = AbstractSet._hash

    @property
    def nbytes(self) -> int:
        return int(self._sorted.nbytes) + 128

    def pages(self, size: int) -> Iterator[frozenset[str]]:
        """`size` ids at a time, in order: only a page of them as strings at once."""
        for start in range(0, len(self._sorted), size):
            yield frozenset(_hexes(self._sorted[start : start + size].tobytes()))


def _hexes(blob: bytes) -> list[str]:
    text = blob.hex()
    return [text[at : at + 64] for at in range(0, len(text), 64)]


def id_pages(ids: AbstractSet[str], size: int) -> Iterator[frozenset[str]]:
    """A filter's ids `size` at a time, in the ids' order."""
    if isinstance(ids, Ids):
        yield from ids.pages(size)
        return
    ordered: Sequence[str] = sorted(ids)
    for start in range(0, len(ordered), size):
        yield frozenset(ordered[start : start + size])


def _int_list(obj: dict[str, object], name: str) -> frozenset[int] | None:
    values = _values(obj, name)
    if values is None:
        return None
    for value in values:
        if type(value) is not int or not 0 <= value <= MAX_KIND:
            raise FilterError(f"{name} must hold integers from 0 to {MAX_KIND}; got {shown(value)}")
    return frozenset(value for value in values if type(value) is int)


def _tag_values(obj: dict[str, object], name: str) -> frozenset[str]:
    values = _values(obj, name)
    if values is None:
        raise FilterError(f"{name} must be a list of strings")
    if not all(isinstance(value, str) for value in values):
        raise FilterError(f"{name} must be a list of strings")
    for value in values:
        if isinstance(value, str) and len(value) > MAX_TAG_VALUE_CHARS:
            raise FilterError(
                f"{name} has a value of {len(value):,} characters; at most "
                f"{MAX_TAG_VALUE_CHARS:,} per value"
            )
    return frozenset(value for value in values if isinstance(value, str))


def _integer(obj: dict[str, object], name: str, high: int | None) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 0 or (high is not None and value > high):
        bound = f" up to {high}" if high is not None else ""
        raise FilterError(f"{name} must be a whole number from 0{bound}; got {shown(value)}")
    return value
