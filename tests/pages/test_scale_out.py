"""Two `tms serve` processes on one database behind a reverse proxy, as docs/operating.md's
"Several servers" describes: what one stores the other reads, a request used on one is refused
on the other, a login made through one holds on the other, NIP-98 is signed for the proxy's
public URL, and the client's address comes from X-Forwarded-For because the proxy is trusted,
with rate limits counted by each process and refusals logged in the one database.

The proxy is a few lines of ASGI here (round robin, appending the peer to X-Forwarded-For, as
nginx's `$proxy_add_x_forwarded_for` does, and naming the backend that answered)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from factories import (
    TMS,
    claim,
    environment,
    free_port,
    fresh_database,
    key,
    nip98_header,
    request,
    terms,
)
from starlette.types import Receive, Scope, Send

HEADERS = {"Accept": "application/json, text/event-stream"}
HOP_BY_HOP = {b"host", b"content-length", b"connection", b"transfer-encoding"}
OWNER = key(0xE1)


class Proxy:
    """Round robin over `backends`, as a reverse proxy in front of several servers."""

    def __init__(self, backends: list[str]) -> None:
        self.backends = backends
        self.turn = itertools.cycle(range(len(backends)))
        self.http: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                self.http = httpx.AsyncClient(timeout=60)
                await send({"type": "lifespan.startup.complete"})
            assert self.http is not None
            await self.http.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in HOP_BY_HOP]
        forwarded = [v for k, v in headers if k == b"x-forwarded-for"]
        peer = scope["client"][0].encode()
        headers = [(k, v) for k, v in headers if k != b"x-forwarded-for"]
        headers.append((b"x-forwarded-for", b", ".join([*forwarded, peer])))
        backend = next(self.turn)
        query = scope["query_string"].decode()
        url = self.backends[backend] + scope["raw_path"].decode() + (f"?{query}" if query else "")
        assert self.http is not None
        answer = await self.http.request(scope["method"], url, headers=headers, content=body)
        out = [
            (k.encode(), v.encode())
            for k, v in answer.headers.multi_items()
            if k.encode() not in HOP_BY_HOP and k != "content-encoding"
        ]
        out.append((b"x-backend", str(backend).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})


@contextlib.contextmanager
def serving(app: Proxy, port: int) -> Iterator[None]:
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.02)
        yield
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def site(
    pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The proxy's URL and the one database, with two `tms serve` behind the proxy."""
    with fresh_database(pg_server_url, template_url, "tms_scale") as database:
        asyncio.run(_sql(database, "INSERT INTO approvals (pubkey) VALUES ($1)", OWNER.pubkey))
        proxy_port = free_port()
        public = f"http://127.0.0.1:{proxy_port}"
        env = environment(
            TMS_DATABASE_URL=database,
            TMS_SECRET=secrets.token_hex(32),  # the same on every server: logins hold on both
            TMS_BASE_URL=public,
            TMS_TRUSTED_PROXIES="127.0.0.1",
            TMS_EMBED="off",
            TMS_RATE_ADDRESS="4/minute",
            TMS_RATE_KEY="off",
        )
        ports = [free_port(), free_port()]
        logs = tmp_path_factory.mktemp("scale-out")
        servers = []
        for n, port in enumerate(ports):
            with (logs / f"server{n}.log").open("wb") as log:
                servers.append(
                    subprocess.Popen(
                        [TMS, "serve", "--port", str(port)], env=env, stdout=log, stderr=log
                    )
                )
        try:
            backends = [f"http://127.0.0.1:{port}" for port in ports]
            for n, (server, backend) in enumerate(zip(servers, backends, strict=True)):
                _wait(server, backend, logs / f"server{n}.log")
            with serving(Proxy(backends), proxy_port):
                yield public, database
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                assert server.wait(30) == 0


def _wait(server: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, log.read_text()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        assert time.monotonic() < deadline, "tms serve did not answer within 60 s"
        time.sleep(0.1)


async def _sql(url: str, statement: str, *args: object) -> list[Any]:
    conn = await asyncpg.connect(url)
    try:
        return list(await conn.fetch(statement, *args))
    finally:
        await conn.close()


def call(client: httpx.Client, tool: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    """(the backend that answered, the tool's result)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": tool, "arguments": arguments}
    response = client.post("/mcp", json=body, headers=HEADERS)
    assert response.status_code == 200, response.text
    return response.headers["x-backend"], response.json()["result"]


def test_two_servers_one_database_behind_a_proxy(site: tuple[str, str]) -> None:
    public, _ = site
    with httpx.Client(base_url=public, headers={"X-Forwarded-For": "198.51.100.20"}) as client:
        # A batch stored through one server is read through the other.
        said = claim(OWNER, "lab", "Stored by one, read by the other.")
        first, stored = call(client, "publish", {"events": [terms(OWNER), said]})
        assert not stored.get("isError"), stored
        second, read = call(
            client, "get_event", {"request": request(OWNER, "get_event", id=said["id"])}
        )
        assert first != second
        assert read["structuredContent"]["result"]["id"] == said["id"]
        # A request used on one server is refused on the other.
        used = request(OWNER, "list_collections")
        one, _ = call(client, "list_collections", {"request": used})
        other, replay = call(client, "list_collections", {"request": used})
        assert one != other and replay["content"][0]["text"].startswith("request was already used")
    # NIP-98 is signed for the public URL, and answered by either server.
    url = f"{public}/c/lab/export.jsonl"
    answered = set()
    for _ in range(2):
        event = OWNER.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
        export = httpx.get(
            url,
            headers={"Authorization": nip98_header(event), "X-Forwarded-For": "198.51.100.21"},
        )
        assert export.status_code == 200, export.text
        assert said["id"] in export.text
        answered.add(export.headers["x-backend"])
    assert answered == {"0", "1"}


def test_a_login_through_one_server_holds_on_the_other(site: tuple[str, str]) -> None:
    public, _ = site
    with httpx.Client(base_url=public, headers={"X-Forwarded-For": "198.51.100.22"}) as client:
        challenge = client.get("/login/challenge").json()
        assert challenge["url"].startswith(f"{public}/login?nonce=")
        event = OWNER.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        login = client.post(
            challenge["url"], headers={"Authorization": nip98_header(event), "Origin": public}
        )
        assert login.status_code == 200, login.text
        homes = [client.get("/") for _ in range(2)]
        assert {home.headers["x-backend"] for home in homes} == {"0", "1"}
        assert all('name="tms-csrf"' in home.text for home in homes)  # logged in on both


def test_rate_limits_count_per_process_by_the_forwarded_address(site: tuple[str, str]) -> None:
    public, database = site
    address = "203.0.113.50"
    with httpx.Client(base_url=public, headers={"X-Forwarded-For": address}) as client:
        statuses = [client.get("/terms").status_code for _ in range(10)]
    # 4 a minute on each of the two servers: 8 pass, then both refuse.
    assert statuses == [200] * 8 + [429] * 2
    with httpx.Client(base_url=public, headers={"X-Forwarded-For": "203.0.113.51"}) as other:
        assert other.get("/terms").status_code == 200  # another client, its own budget
    # Both processes add to the minute's one row (two rows if the minute turned meanwhile).
    deadline = time.monotonic() + 15
    while True:
        rows = asyncio.run(_sql(database, _REFUSED, address))
        if sum(r["count"] for r in rows) >= 2:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    assert {(r["kind"], r["tool"]) for r in rows} == {
        ("rate_limited", "terms")
    }  # /terms, named in the route table
    assert sum(r["count"] for r in rows) == 2 and len(rows) <= 2


_REFUSED = "SELECT kind, tool, count FROM refusals WHERE address = $1 ORDER BY seq"
