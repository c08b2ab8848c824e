"""The gate notes a rate-limited request under the name its route has in the route table, the
name the routes' own refusals are noted under after routing (`tms.pages.answers.route_of`)."""

from __future__ import annotations

import re

from starlette.applications import Starlette
from starlette.routing import Route

from tms.app import ROUTES
from tms.http.gate import route_name

EVENT_ID = "ab" * 32


def named_at(app: Starlette, path: str, method: str) -> str:
    return route_name({"type": "http", "path": path, "method": method, "app": app, "headers": []})


def test_every_route_is_named_at_the_gate_as_in_the_table() -> None:
    app = Starlette(routes=list(ROUTES))
    checked = 0
    for route in ROUTES:
        if not isinstance(route, Route) or route.path.startswith(("/healthz", "/static")):
            continue
        path = re.sub(
            r"\{(\w+)(:path)?\}", lambda m: EVENT_ID if m[1] == "event_id" else "x", route.path
        )
        method = sorted((route.methods or {"GET"}) - {"HEAD"})[0]
        assert named_at(app, path, method) == route.name, path
        checked += 1
    assert checked > 20
    assert named_at(app, "/login", "POST") == "login"
    assert named_at(app, "/login", "GET") == "login"  # the route's, whatever the method
    assert named_at(app, "/logout", "POST") == "logout"
    assert named_at(app, "/c/x/export.jsonl", "GET") == "export"
    assert named_at(app, "/nowhere", "GET") == "page"
