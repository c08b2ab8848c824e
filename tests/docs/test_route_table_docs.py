"""docs/architecture.md's route table is the app's: every route, in the order Starlette tries
it, by its name, with the door it is counted under and the routes it answers before."""

from __future__ import annotations

from pathlib import Path

from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from tms.app import ROUTES
from tms.http.routes import methods_of, name_of

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def row(route: BaseRoute) -> str:
    name = name_of(route)
    if isinstance(route, Route):
        methods, path = methods_of(route), route.path
    elif isinstance(route, WebSocketRoute):
        methods, path = "WebSocket", route.path
    else:
        assert isinstance(route, Mount)
        methods, path = "GET", f"{route.path}/..."
    served = ROUTES.get(name)
    assert served is not None
    before = ", ".join(f"`{other}`" for other in sorted(ROUTES.answers_before(name)))
    return f"| `{name}` | {methods} | `{path}` | `{served.door}` | {before} |"


def table() -> str:
    head = "| Name | Methods | Path | Door | Answers before |\n|---|---|---|---|---|\n"
    return head + "\n".join(row(route) for route in ROUTES) + "\n"


def test_the_docs_route_table_is_the_apps() -> None:
    assert table() in ARCHITECTURE.read_text()
