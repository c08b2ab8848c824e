"""The HTTP route table as a value that only grows: the core's route groups, then whatever
extension code adds (`tms.app` builds the application from it). Two routes that would answer the
same request (the same path, protocol and a method in common) are a loud start-up error naming
both sides (`tms.registry.Collision`), never one silently shadowing the other.

Starlette tries routes in the order they were added; the table keeps that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from tms.registry import CORE, Collision


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


def _same_requests(a: BaseRoute, b: BaseRoute) -> bool:
    if isinstance(a, Route) and isinstance(b, Route):
        if a.path != b.path:
            return False
        return a.methods is None or b.methods is None or bool(a.methods & b.methods)
    if isinstance(a, WebSocketRoute) and isinstance(b, WebSocketRoute):
        return a.path == b.path
    if isinstance(a, Mount) and isinstance(b, Mount):
        return a.path == b.path
    return False
