"""Calling a live TMS server's `/mcp` the way SPEC's snippets do (raw JSON-RPC, one POST per
call), and approving keys in its database as the operator does."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import asyncpg
import httpx
from factories import EventDict, Live, request

from tms.nostr.events import SecretKey

HEADERS: Final = {"Accept": "application/json, text/event-stream"}


def approve(database_url: str, *keys: SecretKey) -> None:
    """The operator approves these keys (as `tms approve` does)."""

    async def run() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.executemany(
                "INSERT INTO approvals (pubkey) VALUES ($1) ON CONFLICT DO NOTHING",
                [(k.pubkey,) for k in keys],
            )
        finally:
            await conn.close()

    asyncio.run(run())


class Caller:
    """Raw JSON-RPC over HTTP, the way SPEC's snippets call: one POST per call."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.http = httpx.Client(timeout=60)

    def rpc(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            body["params"] = params
        response = self.http.post(self.live.mcp, json=body, headers=HEADERS)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        reply: dict[str, Any] = response.json()
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def raw(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.rpc("tools/call", {"name": tool, "arguments": arguments})

    def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        result = self.raw(tool, arguments)
        assert not result.get("isError"), result["content"][0]["text"]
        return result["structuredContent"]

    def error(self, tool: str, arguments: Mapping[str, Any]) -> str:
        result = self.raw(tool, arguments)
        assert result.get("isError") is True, result
        assert "structuredContent" not in result or result["structuredContent"] is None
        text: str = result["content"][0]["text"]
        return text

    def tool(self, key: SecretKey, name: str, **args: Any) -> Any:
        return self.call(name, {"request": request(key, name, **args)})

    def tool_error(self, key: SecretKey, name: str, **args: Any) -> str:
        return self.error(name, {"request": request(key, name, **args)})

    def publish(self, *events: EventDict) -> dict[str, Any]:
        result: dict[str, Any] = self.call("publish", {"events": list(events)})
        return result

    def close(self) -> None:
        self.http.close()
