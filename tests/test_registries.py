"""The registries extension code adds to (the HTTP route table, the MCP tools, the MCP prompts)
refuse a name taken twice at once, with one line naming the sort, the name and both sides."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute

from tms.app import ROUTES
from tms.mcp.prompts import PROMPTS
from tms.mcp.tools import TOOLS
from tms.registry import Collision, Registry


async def _page(request: Any) -> Response:
    return PlainTextResponse("plugin")


def test_a_tool_or_prompt_name_taken_twice_names_both_sides() -> None:
    publish = TOOLS["publish"]
    with pytest.raises(Collision) as caught:
        TOOLS.register("publish", publish, by="plugin 'notes'")
    assert str(caught.value) == (
        "MCP tool 'publish' of plugin 'notes' collides with MCP tool 'publish' of the core"
    )
    assert TOOLS["publish"] is publish and TOOLS.registered_by("publish") == "the core"
    with pytest.raises(Collision, match="MCP prompt 'briefing' of plugin b collides"):
        PROMPTS.register("briefing", PROMPTS["claims_pass"], by="plugin b")
    copied = TOOLS.copy()  # a server's: it grows on its own
    copied.register("notes", publish, by="plugin 'notes'")
    assert "notes" in copied and "notes" not in TOOLS
    assert copied.registered_by("publish") == "the core"
    ours: Registry[int] = Registry("thing")
    ours.register("a", 1, by="plugin a")
    with pytest.raises(
        Collision, match="thing 'a' of plugin b collides with thing 'a' of plugin a"
    ):
        ours.register("a", 2, by="plugin b")
    assert dict(ours) == {"a": 1}


def test_a_route_answering_what_another_answers_names_both_sides() -> None:
    table = ROUTES.copy()  # the core's own table has no collision (it is built at import)
    with pytest.raises(Collision) as caught:
        table.add(Route("/submit", _page, methods=["GET"]), by="plugin pages")
    assert str(caught.value) == (
        "route 'GET /submit' of plugin pages collides with route 'GET /submit' of the core"
    )
    with pytest.raises(Collision, match="route 'WebSocket /' of plugin ws collides"):
        table.add(WebSocketRoute("/", _page), by="plugin ws")
    with pytest.raises(Collision, match="'GET /mcp' of plugin p collides with route 'any method"):
        table.add(Route("/mcp", _page), by="plugin p")
    # parameters compare by place, whatever their names
    with pytest.raises(Collision, match=re.escape("'GET /c/{name}/claims/{x}' of plugin p")):
        table.add(Route("/c/{name}/claims/{x}", _page, methods=["GET"]), by="plugin p")
    # another method on the same path, or another path, is no collision
    table.add(Route("/submit", _page, methods=["DELETE"], name="unsubmit"), by="plugin pages")
    table.add(Route("/plugins/notes", _page, methods=["GET"], name="notes"), by="plugin pages")
    assert len(table) == len(ROUTES) + 2


def test_a_kind_number_taken_twice_is_refused() -> None:
    from dataclasses import replace

    from tms.rules.kinds import KINDS
    from tms.types import KIND_CLAIM

    claim = KINDS[KIND_CLAIM]
    with pytest.raises(Collision) as caught:
        KINDS.add(replace(claim, name="assertion"))
    assert str(caught.value) == "kind '4702' of the core collides with kind '4702' of the core"
    with pytest.raises(Collision):
        KINDS[KIND_CLAIM] = claim
    assert KINDS[KIND_CLAIM] is claim and KINDS[KIND_CLAIM].name == "claim"
