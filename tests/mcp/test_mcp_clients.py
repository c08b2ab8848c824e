"""The official MCP SDK client against our server: over streamable HTTP (a live uvicorn), and over
stdio (`tms stdio` as a subprocess, signing with TMS_NSEC)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from factories import LOG_SIGNER, TMS, Live, fresh_database, live_server, request, signed, terms
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import Caller, approve

from tms.nostr import nip19
from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio

SLUG = "sdk"


@pytest.fixture(scope="module")
def owner() -> SecretKey:
    return SecretKey.generate()


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str, owner: SecretKey) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url) as database, live_server(database) as server:
        approve(database, owner)
        caller = Caller(server)
        caller.publish(
            terms(owner),
            signed(owner, 0, {"name": "sdk-owner"}),
            signed(
                owner, 4702, {"collection": SLUG, "text": "Reduced DAO activity causes symptoms."}
            ),
        )
        caller.close()
        yield server


def _structured(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_the_sdk_client_over_streamable_http(live: Live, owner: SecretKey) -> None:
    async with Client(live.mcp) as client:
        tools = await client.list_tools()
        assert len(tools.tools) == 13
        by_name = {t.name: t for t in tools.tools}
        schema = by_name["search_claims"].output_schema
        assert schema is not None and schema["type"] == "object"
        assert set(schema["properties"]) == {"method", "note", "items"}
        listed = _structured(
            await client.call_tool(
                "list_collections", {"request": request(owner, "list_collections")}
            )
        )
        assert [c["slug"] for c in listed["result"]] == [SLUG]
        found = _structured(
            await client.call_tool(
                "search_claims",
                {"request": request(owner, "search_claims", collection=SLUG, text="DAO")},
            )
        )
        assert found["method"] == "vector"
        assert found["items"][0]["author"] == "sdk-owner"
        refused = await client.call_tool("list_collections", {})
        assert refused.is_error
        assert "needs a signed `request`" in refused.content[0].text
        assert "TMS_NSEC" not in refused.content[0].text  # over HTTP, no server signs for you
        prompts = await client.list_prompts()
        assert {p.name for p in prompts.prompts} == {"claims_pass", "briefing"}
        prompt = await client.get_prompt("briefing", {"collection": SLUG})
        assert SLUG in prompt.messages[0].content.text


def _stdio(live: Live, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=TMS,
        args=["stdio"],
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "TMS_DATABASE_URL": live.database_url,
            # the server's log key: otherwise stdio makes one in ./tms-data, wherever it runs
            "TMS_LOG_KEY": LOG_SIGNER.encode(),
            **env,
        },
    )


async def test_stdio_signs_calls_with_tms_nsec(live: Live, owner: SecretKey) -> None:
    nsec = nip19.nsec_encode(owner.secret)
    async with Client(_stdio(live, TMS_NSEC=nsec)) as client:
        tools = await client.list_tools()
        schema = {t.name: t.input_schema for t in tools.tools}["search_claims"]
        assert {"collection", "text", "request"} <= set(schema["properties"])
        assert "request" not in schema.get("required", [])
        listed = _structured(await client.call_tool("list_collections", {}))
        assert [c["slug"] for c in listed["result"]] == [SLUG]
        found = _structured(
            await client.call_tool(
                "search_claims", {"collection": SLUG, "text": "DAO", "method": "keyword"}
            )
        )
        assert [item["text"] for item in found["items"]] == [
            "Reduced DAO activity causes symptoms."
        ]
        # the same call twice in one second is still two requests
        again = _structured(
            await client.call_tool(
                "search_claims", {"collection": SLUG, "text": "DAO", "method": "keyword"}
            )
        )
        assert again == found
        # an explicit request is checked like any other, here signed by a stranger
        stranger = SecretKey.generate()
        outside = await client.call_tool(
            "list_claims", {"request": request(stranger, "list_claims", collection=SLUG)}
        )
        assert outside.is_error and "not a member of collection" in outside.content[0].text
        published = _structured(
            await client.call_tool(
                "publish",
                {"events": [signed(owner, 4702, {"collection": SLUG, "text": "Over stdio."})]},
            )
        )
        assert published["embedded"] == 1


async def test_stdio_without_a_key_needs_signed_requests(live: Live, owner: SecretKey) -> None:
    async with Client(_stdio(live)) as client:
        tools = await client.list_tools()
        schema = {t.name: t.input_schema for t in tools.tools}["list_claims"]
        assert schema["required"] == ["request"]
        refused = await client.call_tool("list_claims", {"collection": SLUG})
        assert refused.is_error
        assert "pass the arguments inside its signed content" in refused.content[0].text
        # The agent sees the refusal, not the server's stderr: it names TMS_NSEC (issue 27).
        assert refused.content[0].text.endswith(
            "; or have `tms stdio` sign calls for you: start it with TMS_NSEC set to the "
            "agent's nsec or 64 hex characters (`uv run tms-sign keygen` makes one), then pass "
            "the arguments directly"
        )
        bare = await client.call_tool("list_collections", {})
        assert bare.is_error
        assert "needs a signed `request`" in bare.content[0].text
        assert "start it with TMS_NSEC set" in bare.content[0].text
        # A call that signs its own request is told nothing of TMS_NSEC when that fails.
        stale = await client.call_tool(
            "list_claims", {"request": request(owner, "list_claims", collection=SLUG)}
        )
        assert not stale.is_error
        wrong = await client.call_tool(
            "list_claims", {"request": request(owner, "list_collections")}
        )
        assert wrong.is_error and "TMS_NSEC" not in wrong.content[0].text
        ok = await client.call_tool(
            "list_claims", {"request": request(owner, "list_claims", collection=SLUG)}
        )
        assert json.loads(ok.content[0].text) == ok.structured_content
