"""The HTTP route table as a value that only grows, and the one place a route's name is owned:
the core's route groups, then the enabled plugins' routes, added to a copy of it (`tms.app`
builds the application from that; docs/architecture.md prints the core's, and a test holds the
two equal).

Every route has a name no other route has. That name, and what the table says of the route (the
door it is counted under in `tms_requests_total`, whether the address budget is spent on it and
how much), is what the gate, the metrics and the refusal log use for a request (`routed`): a
request is matched against the table once, never sorted by its path's shape.

Start-up fails loudly (`tms.registry.Collision`, naming both sides) on a name taken twice, and
on two routes that would both answer a request: the same path (parameters compared by place
whatever their names and converters), the same protocol and a method in common; or two paths
that differ but still match one request through a converter (`{name:path}` spans slashes: the
log's `/c/{slug:path}/checkpoint` and the claim page's `/c/{slug}/claims/{event_id}` both match
`/c/x/claims/checkpoint`). Starlette tries routes in the order they were added, and the table
keeps that order, so such an overlap is only allowed where the earlier route says it answers
first (`answers_before`, the names of the routes it shadows in part): the overlap is then a
decision in the table, printed beside it in docs/architecture.md, never an accident.

Overlaps through converters are found by probing: each route's parameters are filled in with
the other route's literal segments (and a plain word), and the paths so made are tried against
the other route. It finds the overlaps literal segments make, which is how routes here differ.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from starlette.routing import BaseRoute, Match, Mount, Route, WebSocketRoute
from starlette.types import Scope

from tms.registry import CORE, Collision

_PARAMETER: Final = re.compile(r"\{([^}:]*)(?::([^}]*))?\}")
_PROBE_WORD: Final = "x"
ROUTED: Final = "tms.route"  # the scope's key for the request's `Routed`, matched once

# The doors requests are counted under (`tms_requests_total`'s `door` label, docs/operating.md).
PAGES: Final = "pages"
RELAY: Final = "relay"
UNNAMED: Final = "page"  # what the refusal log calls a request no route answers


@dataclass(frozen=True, slots=True)
class Routed:
    """What the doors' plumbing knows of a request's route: its name (the refusal log's), the
    door it is counted under, and what it spends of its address's budget (0: never limited)."""

    name: str
    door: str
    units: int = 1


NOWHERE_HTTP: Final = Routed(UNNAMED, PAGES)
NOWHERE_WEBSOCKET: Final = Routed(UNNAMED, RELAY)


@dataclass(frozen=True, slots=True)
class _Entry:
    route: BaseRoute
    by: str
    routed: Routed
    answers_before: frozenset[str]


class RouteTable:
    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._named: dict[str, _Entry] = {}

    def add(
        self,
        route: BaseRoute,
        *,
        by: str = CORE,
        door: str = PAGES,
        units: int = 1,
        answers_before: Iterable[str] = (),
    ) -> None:
        """Add a route counted under `door`, spending `units` of the address budget (0: never
        limited); `Collision` for one that would answer a request another answers (unless one
        of the two names the other in its `answers_before`) or for a name taken."""
        name = name_of(route)
        entry = _Entry(route, by, Routed(name, door, units), frozenset(answers_before))
        for other in self._entries:
            if _same_requests(route, other.route):
                raise Collision("route", describe(route), other.by, by, describe(other.route))
        for other in self._entries:
            declared = name in other.answers_before or other.routed.name in entry.answers_before
            if not declared and overlap(route, other.route) is not None:
                raise Collision(
                    "route",
                    f"{describe(route)} (matching {overlap(route, other.route)})",
                    other.by,
                    by,
                    describe(other.route),
                )
        if name in self._named:
            taken = self._named[name]
            raise Collision("route name", name, taken.by, by, name)
        self._entries.append(entry)
        self._named[name] = entry

    def extend(
        self,
        routes: Iterable[BaseRoute],
        *,
        by: str = CORE,
        door: str = PAGES,
        units: Mapping[str, int] | None = None,
        answers_before: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """Add routes counted under `door`, each with its `units` (1 unless named there) and
        its `answers_before` by its name."""
        for route in routes:
            name = name_of(route)
            self.add(
                route,
                by=by,
                door=door,
                units=(units or {}).get(name, 1),
                answers_before=(answers_before or {}).get(name, ()),
            )

    def copy(self) -> RouteTable:
        """A table holding this one's routes (each by whom it was added) that grows on its own:
        a server's, to which its plugins add, leaving the core's untouched."""
        copied = RouteTable()
        copied._entries = list(self._entries)
        copied._named = dict(self._named)
        return copied

    def get(self, name: str) -> Routed | None:
        """What the table says of the route named `name` (None: no such route)."""
        entry = self._named.get(name)
        return None if entry is None else entry.routed

    def answers_before(self, name: str) -> frozenset[str]:
        """The routes the route named `name` is declared to answer before where both match."""
        return self._named[name].answers_before

    def __iter__(self) -> Iterator[BaseRoute]:
        return (entry.route for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def routed(scope: Scope) -> Routed:
    """The route of a request as the gate, the metrics and the refusal log name it: the route
    of the app's table that answers it (one of another method when none of its method does,
    as Starlette's router picks), else `NOWHERE_*`. Matched once per request (kept in the
    scope); an app built without a `RouteTable` in `state.routes` counts its routes as pages."""
    found = scope.get(ROUTED)
    if isinstance(found, Routed):
        return found
    app = scope.get("app")
    nowhere = NOWHERE_WEBSOCKET if scope["type"] == "websocket" else NOWHERE_HTTP
    partial: BaseRoute | None = None
    chosen: BaseRoute | None = None
    for route in getattr(getattr(app, "router", None), "routes", ()):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            chosen = route
            break
        if match is Match.PARTIAL and partial is None:
            partial = route
    chosen = chosen or partial
    if chosen is None:
        result = nowhere
    else:
        table = getattr(getattr(app, "state", None), "routes", None)
        name = name_of(chosen)
        known = table.get(name) if isinstance(table, RouteTable) else None
        result = known or Routed(name, nowhere.door)
    scope[ROUTED] = result
    return result


def name_of(route: BaseRoute) -> str:
    name = getattr(route, "name", None)
    return name if isinstance(name, str) and name else describe(route)


def describe(route: BaseRoute) -> str:
    """A route as a collision names it: `GET /c/{slug}`, `WebSocket /`, `mount /static`."""
    if isinstance(route, Route):
        return f"{methods_of(route)} {route.path}"
    if isinstance(route, WebSocketRoute):
        return f"WebSocket {route.path}"
    if isinstance(route, Mount):
        return f"mount {route.path}"
    return repr(route)


def methods_of(route: Route) -> str:
    """A route's methods as the table prints them (HEAD, which Starlette adds to GET, left out)."""
    return ",".join(sorted(route.methods - {"HEAD"})) if route.methods else "any method"


def same_path(path: str) -> str:
    """A path as collisions compare it: parameters alike whatever their names and converters
    (`/c/{slug}` and `/c/{name:path}` both match `/c/x`). A trailing slash makes another path,
    as Starlette matches it (`/c/{slug}/` is the relay's route for clients that add one)."""
    return _PARAMETER.sub("{}", path)


def _same_requests(a: BaseRoute, b: BaseRoute) -> bool:
    if isinstance(a, Route) and isinstance(b, Route):
        if same_path(a.path) != same_path(b.path):
            return False
        return _methods_meet(a, b)
    if isinstance(a, WebSocketRoute) and isinstance(b, WebSocketRoute):
        return same_path(a.path) == same_path(b.path)
    if isinstance(a, Mount) and isinstance(b, Mount):
        return same_path(a.path) == same_path(b.path)
    return False


def _methods_meet(a: Route, b: Route) -> bool:
    return a.methods is None or b.methods is None or bool(a.methods & b.methods)


def overlap(a: BaseRoute, b: BaseRoute) -> str | None:
    """A path both routes match (with a method in common), found by probing; None if none."""
    pair: tuple[Route, Route] | tuple[WebSocketRoute, WebSocketRoute]
    if isinstance(a, Route) and isinstance(b, Route):
        if not _methods_meet(a, b):
            return None
        pair = (a, b)
    elif isinstance(a, WebSocketRoute) and isinstance(b, WebSocketRoute):
        pair = (a, b)
    else:
        return None
    for one, other in (pair, pair[::-1]):
        for probe in _probes(one.path, _words(other.path)):
            if other.path_regex.match(probe) and one.path_regex.match(probe):
                return probe
    return None


def _words(path: str) -> list[str]:
    """The literal segments of a path template, the values probes fill parameters with."""
    literal = _PARAMETER.sub("/", path)
    return sorted({word for word in literal.split("/") if word} | {_PROBE_WORD})


def _probes(path: str, words: list[str]) -> Iterator[str]:
    """Paths `path` may match, its parameters filled in with `words` (a `path` converter's also
    with two of them, for it spans a slash)."""
    parameters = list(_PARAMETER.finditer(path))
    choices: list[list[str]] = []
    for parameter in parameters:
        if parameter[2] == "path":
            spans = [f"{first}/{second}" for first in words for second in words]
            choices.append([*words, *spans])
        elif parameter[2] in ("int", "float"):
            choices.append(["1"])
        else:
            choices.append(words)
    pieces = _PARAMETER.split(path)[::3]  # the literal text around the parameters
    for filling in itertools.product(*choices):
        yield "".join(
            piece + (filling[i] if i < len(filling) else "") for i, piece in enumerate(pieces)
        )
