"""A live TMS server for MCP tests: uvicorn on 127.0.0.1 in a thread of its own, over a fresh
database, plus a JSON-RPC caller that signs requests the way SPEC's snippets do."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import asyncpg
import httpx
import uvicorn
from publishing import compact

from tms.config import Settings
from tms.nostr.events import SecretKey
from tms.rules.terms import current_terms
from tms.store.database import with_database
from tms.web.app import create_app

HEADERS: Final = {"Accept": "application/json, text/event-stream"}
TERMS: Final = current_terms()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def settings(**env: str) -> Settings:
    return Settings.from_env({"TMS_DATA_DIR": "/nonexistent-tms-data", **env})


def fresh_database(server_url: str, template_url: str) -> str:
    """A database of its own, copied from the migrated template (see conftest.py)."""
    name = f"tms_test_{uuid.uuid4().hex[:16]}"
    template = urlsplit(template_url).path.lstrip("/")

    async def create() -> None:
        conn = await asyncpg.connect(server_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return with_database(server_url, name)


@dataclass
class Live:
    url: str  # e.g. http://127.0.0.1:12345
    database_url: str

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


@contextmanager
def live_server(database_url: str, config: Settings | None = None) -> Iterator[Live]:
    """Serve the real app with uvicorn until the block ends."""
    port = free_port()
    config = replace(config or settings(), port=port)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, database_url=database_url),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, name="tms-live", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the live server did not start")
        time.sleep(0.05)
    try:
        yield Live(f"http://127.0.0.1:{port}", database_url)
    finally:
        server.should_exit = True
        thread.join(30)


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


def sign(
    key: SecretKey, kind: int, content: Mapping[str, Any], created_at: int | None = None
) -> dict[str, Any]:
    when = int(time.time()) if created_at is None else created_at
    return key.sign(kind, compact(content), when).to_dict()


def request(
    key: SecretKey, tool: str, created_at: int | None = None, **args: Any
) -> dict[str, Any]:
    return sign(key, 4707, {"tool": tool, "args": args}, created_at)


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
        return reply["result"]  # type: ignore[no-any-return]

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

    def publish(self, *events: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("publish", {"events": list(events)})
        return result

    def close(self) -> None:
        self.http.close()


def terms_event(key: SecretKey) -> dict[str, Any]:
    return sign(key, 4706, {"version": TERMS.version, "sha256": TERMS.sha256})


def here() -> Path:
    return Path(__file__).parent
