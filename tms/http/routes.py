"""The HTTP route table as a value that only grows: the core's route groups, then the enabled
plugins' routes, added to a copy of it (`tms.app` builds the application from that). Two routes
with the same path (parameters compared by place whatever their names and converters), the same
protocol and a method in common are a loud start-up error naming both sides
(`tms.registry.Collision`), never one silently shadowing the other.

Paths that differ are not compared further, though a `{name:path}` parameter, which spans
slashes, lets two of them match one request: the log's `/c/{slug:path}/checkpoint` and the claim
page's `/c/{slug}/claims/{event_id}` both match `/c/x/claims/checkpoint`. Starlette tries
routes in the order they were added, and the table keeps that order, so the first answers (here
the log's route, with the 404 of the slug `x/claims`, which no collection can have).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from tms.registry import CORE, Collision

_PARAMETER: Final = re.compile(r"\{[^}]*\}")


@dataclass(frozen=True, slots=True)
class _Entry:
    route: BaseRoute
    by: str


class RouteTable:
    def __init__(self) -> None:
        self._entries: list[_Entry] = []

    def add(self, route: BaseRoute, *, by: str = CORE) -> None:
        """Add a route (`Collision` for one that would answer a request another answers)."""
        for entry in self._entries:
            if _same_requests(route, entry.route):
                raise Collision("route", describe(route), entry.by, by, describe(entry.route))
        self._entries.append(_Entry(route, by))

    def extend(self, routes: Iterable[BaseRoute], *, by: str = CORE) -> None:
        for route in routes:
            self.add(route, by=by)

    def copy(self) -> RouteTable:
        """A table holding this one's routes (each by whom it was added) that grows on its own:
        a server's, to which its plugins add, leaving the core's untouched."""
        copied = RouteTable()
        copied._entries = list(self._entries)
        return copied

    def __iter__(self) -> Iterator[BaseRoute]:
        return (entry.route for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def describe(route: BaseRoute) -> str:
    """A route as a collision names it: `GET /c/{slug}`, `WebSocket /`, `mount /static`."""
    if isinstance(route, Route):
        methods = ",".join(sorted(route.methods - {"HEAD"})) if route.methods else "any method"
        return f"{methods} {route.path}"
    if isinstance(route, WebSocketRoute):
        return f"WebSocket {route.path}"
    if isinstance(route, Mount):
        return f"mount {route.path}"
    return repr(route)


def same_path(path: str) -> str:
    """A path as collisions compare it: parameters alike whatever their names and converters
    (`/c/{slug}` and `/c/{name:path}` both match `/c/x`). A trailing slash makes another path,
    as Starlette matches it (`/c/{slug}/` is the relay's route for clients that add one)."""
    return _PARAMETER.sub("{}", path)


def _same_requests(a: BaseRoute, b: BaseRoute) -> bool:
    if isinstance(a, Route) and isinstance(b, Route):
        if same_path(a.path) != same_path(b.path):
            return False
        return a.methods is None or b.methods is None or bool(a.methods & b.methods)
    if isinstance(a, WebSocketRoute) and isinstance(b, WebSocketRoute):
        return same_path(a.path) == same_path(b.path)
    if isinstance(a, Mount) and isinstance(b, Mount):
        return same_path(a.path) == same_path(b.path)
    return False
