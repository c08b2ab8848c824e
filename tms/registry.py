"""Named things of one sort, each registered once: the MCP tools, the MCP prompts, the HTTP
routes, and the plugins' own names and single-slot seams. The core fills its registries when its
modules load; a server's copy (`copy`) takes the enabled plugins' entries (`tms.extension`), and
a name taken twice is a loud start-up error naming both sides, never one silently shadowing the
other. This is the one way a collision is found and said, whoever collides with whom.

Pure: nothing here knows what is registered.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Generic, TypeVar

from tms.errors import ConfigError

CORE: Final = "the core"  # who registers the core's own entries


def by_plugin(name: str) -> str:
    """Who registers a plugin's entries, as a collision names it."""
    return f"plugin '{name}'"


K = TypeVar("K", bound=str | int)
T = TypeVar("T")


class Collision(ConfigError):
    """A name registered twice: one line saying which sort, which name, and both who registered
    it (`MCP tool 'stats' of plugin 'b' collides with MCP tool 'stats' of plugin 'a'`); start-up
    stops with it (`tms: ` before it)."""

    def __init__(
        self, sort: str, name: str, first: str, second: str, taken: str | None = None
    ) -> None:
        """`name`: what `second` asked for; `taken`: what `first` holds, when it is named
        otherwise (a route for any method where a GET was asked for)."""
        taken = name if taken is None else taken
        super().__init__(f"{sort} '{name}' of {second} collides with {sort} '{taken}' of {first}")
        self.sort = sort
        self.name = name
        self.first = first
        self.second = second


class Keyed(Mapping[K, T], Generic[K, T]):
    """A read-only mapping from keys (names, or numbers: the kinds, `tms.rules.kinds.KINDS`) to
    entries, which only grows, through `register`."""

    def __init__(self, sort: str) -> None:
        """`sort`: what the entries are, as a collision names it ("MCP tool")."""
        self.sort = sort
        self._entries: dict[K, T] = {}
        self._by: dict[K, str] = {}

    def register(self, name: K, entry: T, *, by: str = CORE) -> T:
        """Add `entry` under `name`, registered `by` (the core, or a plugin: `by_plugin`); a
        name already taken raises `Collision`, naming both sides."""
        if name in self._entries:
            raise Collision(self.sort, str(name), self._by[name], by)
        self._entries[name] = entry
        self._by[name] = by
        return entry

    def registered_by(self, name: K) -> str:
        return self._by[name]

    def __getitem__(self, name: K) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class Registry(Keyed[str, T], Generic[T]):
    """A registry of named entries (tools, prompts, routes, plugins' names)."""

    def copy(self) -> Registry[T]:
        """A registry holding what this one holds, each entry by whom it was registered, that
        grows on its own: a server's, to which its plugins add, leaving the core's untouched."""
        copied: Registry[T] = Registry(self.sort)
        copied._entries = dict(self._entries)
        copied._by = dict(self._by)
        return copied
