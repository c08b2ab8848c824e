"""The route table owns names: a name taken twice, or two routes that one request matches
through a converter, fail at start-up, naming both sides."""

from __future__ import annotations

import pytest
from starlette.responses import Response
from starlette.routing import Route

from tms.app import ROUTES
from tms.http.routes import RouteTable
from tms.registry import Collision


async def handler(request: object) -> Response:
    return Response()


def test_every_core_route_has_a_name_of_its_own() -> None:
    names = [getattr(route, "name", None) for route in ROUTES]
    assert all(names)
    assert len(set(names)) == len(names)


def test_a_name_taken_twice_fails() -> None:
    table = RouteTable()
    table.add(Route("/a", handler, name="same"))
    with pytest.raises(Collision, match="route name 'same'"):
        table.add(Route("/b", handler, name="same"))


def test_routes_overlapping_through_a_converter_fail_unless_declared() -> None:
    table = RouteTable()
    table.add(Route("/c/{slug:path}/checkpoint", handler, name="log checkpoint"))
    with pytest.raises(Collision, match="matching /c/c/claims/checkpoint"):
        table.add(Route("/c/{slug}/claims/{event_id}", handler, name="claim"))
    declared = RouteTable()
    declared.add(Route("/c/{slug:path}/checkpoint", handler, name="c"), answers_before=["claim"])
    declared.add(Route("/c/{slug}/claims/{event_id}", handler, name="claim"))
    assert len(declared) == 2
