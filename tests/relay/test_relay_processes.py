"""Live across processes: two `tms serve` on one database. An event committed through any door
(the relay, MCP) of either process reaches every matching subscription of both, once each, in
commit order; a refused batch delivers nothing; and when a process's commit feed loses its
database connection, what committed meanwhile still arrives, once."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from factories import (
    LOG_SIGNER,
    MEMBER,
    OWNER,
    TMS,
    UNLIMITED,
    claim,
    environment,
    evidence,
    free_port,
    fresh_database,
    link,
)
from relay_client import Client, seed, ws_url

from tms.ledger.read.feed import APPLICATION_NAME

pytestmark = pytest.mark.anyio
HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def servers(
    pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], str]]:
    with fresh_database(pg_server_url, template_url, "tms_relay2") as database:
        asyncio.run(seed(database))
        env = environment(
            TMS_DATABASE_URL=database,
            TMS_EMBED="off",
            # The seed signed checkpoints: the servers go on with a log key, as an operator's do.
            TMS_LOG_KEY=LOG_SIGNER.encode(),
            **UNLIMITED,
        )
        logs = tmp_path_factory.mktemp("relay-processes")
        ports = [free_port(), free_port()]
        running = []
        for n, port in enumerate(ports):
            with (logs / f"server{n}.log").open("wb") as out:
                running.append(
                    subprocess.Popen(
                        [TMS, "serve", "--port", str(port)], env=env, stdout=out, stderr=out
                    )
                )
        try:
            urls = [f"http://127.0.0.1:{port}" for port in ports]
            for n, (server, url) in enumerate(zip(running, urls, strict=True)):
                _wait(server, url, logs / f"server{n}.log")
            yield urls, database
        finally:
            for server in running:
                server.terminate()
            for server in running:
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


def mcp_publish(url: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": "publish", "arguments": {"events": events}}
    response = httpx.post(f"{url}/mcp", json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def now() -> int:
    return int(time.time())


async def subscriber(url: str, *filters: dict[str, Any]) -> Client:
    client = await Client.open(ws_url(url, "/c/rel"))
    assert (await client.auth(MEMBER))[2] is True
    for n, wanted in enumerate(filters or ({"limit": 0},)):
        _, end = await client.req(f"s{n}", wanted)
        assert end[0] == "EOSE"
    return client


async def received(client: Client, count: int) -> list[list[Any]]:
    got = [await client.recv() for _ in range(count)]
    assert await client.silent(0.5)  # and nothing more: each once
    return got


async def test_any_door_of_either_process_reaches_both_once_in_order(
    servers: tuple[list[str], str],
) -> None:
    (one, two), _ = servers
    a = await subscriber(one)
    b = await subscriber(
        two, {"kinds": [4702], "limit": 0}, {"authors": [MEMBER.pubkey], "limit": 0}
    )
    try:
        ev = evidence(MEMBER, "rel", "Rain falls when clouds are heavy.", created_at=now())
        c = claim(MEMBER, "rel", f"Rain comes from clouds {time.time_ns()}", created_at=now())
        ln = link(MEMBER, "rel", ev["id"], c["id"], "clouds are heavy", created_at=now())
        async with await Client.open(ws_url(one, "/c/rel")) as writer:  # the relay of one
            for event in (ev, c):
                assert (await writer.publish(event))[2] is True
        result = mcp_publish(two, [ln])  # MCP on the other
        assert not result.get("isError"), result
        order = [ev["id"], c["id"], ln["id"]]
        assert [m[2]["id"] for m in await received(a, 3)] == order
        # b: s0 (claims) gets c; s1 (the member's events) gets all three: each once
        got = await received(b, 4)
        assert sorted((m[1], m[2]["id"]) for m in got) == sorted(
            [("s0", c["id"]), ("s1", ev["id"]), ("s1", c["id"]), ("s1", ln["id"])]
        )
        assert [m[2]["id"] for m in got if m[1] == "s1"] == order
    finally:
        await a.close()
        await b.close()


async def test_a_refused_batch_delivers_nothing(servers: tuple[list[str], str]) -> None:
    (one, two), _ = servers
    a = await subscriber(one)
    try:
        ev = evidence(MEMBER, "rel", "Snow is cold.", created_at=now())
        c = claim(MEMBER, "rel", f"Snow is cold {time.time_ns()}", created_at=now())
        bad = link(MEMBER, "rel", ev["id"], c["id"], "snow is warm", created_at=now())
        result = mcp_publish(two, [ev, c, bad])
        assert result.get("isError"), result
        assert await a.silent(1.0)
        # batches that commit together with a refused one (group commit): only theirs arrive
        good = [
            claim(MEMBER, "rel", f"grouped {n} {time.time_ns()}", created_at=now())
            for n in range(8)
        ]
        writers = [await Client.open(ws_url(two, "/c/rel")) for _ in range(8)]
        try:
            for writer, event in zip(writers, good, strict=True):
                await writer.send(["EVENT", event])
                await writer.send(
                    [
                        "EVENT",
                        link(MEMBER, "rel", ev["id"], event["id"], "nowhere", created_at=now()),
                    ]
                )
            for writer in writers:
                assert (await writer.recv())[2] is True
                assert (await writer.recv())[2] is False
        finally:
            for writer in writers:
                await writer.close()
        got = await received(a, len(good))
        assert sorted(m[2]["id"] for m in got) == sorted(e["id"] for e in good)
    finally:
        await a.close()


async def test_the_feed_catches_up_after_losing_its_connection(
    servers: tuple[list[str], str],
) -> None:
    (one, two), database = servers
    a = await subscriber(one)
    try:
        conn = await asyncpg.connect(database)
        try:
            ended = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = $1",
                APPLICATION_NAME,
            )
            assert ended == 2  # one feed per process
            # committed while no feed listens
            missed = [
                claim(MEMBER, "rel", f"while away {n} {time.time_ns()}", created_at=now())
                for n in range(5)
            ]
            result = mcp_publish(two, missed)
            assert not result.get("isError"), result
        finally:
            await conn.close()
        got = await received(a, len(missed))
        assert [m[2]["id"] for m in got] == [e["id"] for e in missed]
        after = claim(MEMBER, "rel", f"after the reconnect {time.time_ns()}", created_at=now())
        assert not mcp_publish(one, [after]).get("isError")
        assert [m[2]["id"] for m in await received(a, 1)] == [after["id"]]
    finally:
        await a.close()


async def test_a_member_list_change_reaches_open_subscriptions(
    servers: tuple[list[str], str],
) -> None:
    """A member dropped from the list stops receiving at once; one added is followed by the
    root relay without subscribing again."""
    from factories import MEMBER2, members, terms

    (one, two), _ = servers
    root = await Client.open(ws_url(one, "/"))
    try:
        assert (await root.auth(MEMBER2))[2] is True
        _, end = await root.req("all", {"kinds": [4702], "limit": 0})
        assert end[0] == "CLOSED" and end[2].startswith("restricted: ")  # reads nothing yet
        assert not mcp_publish(
            two, [members(OWNER, "rel", [MEMBER.pubkey, MEMBER2.pubkey], created_at=now())]
        ).get("isError")
        assert not mcp_publish(two, [terms(MEMBER2)]).get("isError")
        await asyncio.sleep(0.5)
        _, end = await root.req("all", {"kinds": [4702], "limit": 0})
        assert end == ["EOSE", "all"]
        a = await subscriber(one)
        try:
            c = claim(MEMBER2, "rel", f"new member speaks {time.time_ns()}", created_at=now())
            assert not mcp_publish(two, [c]).get("isError")
            assert (await root.recv())[2]["id"] == c["id"]
            assert (await a.recv())[2]["id"] == c["id"]
            dropped = members(OWNER, "rel", [MEMBER2.pubkey], created_at=now() + 1)
            assert not mcp_publish(two, [dropped]).get("isError")
            gone = await a.recv()  # the list itself may come first, then the refusal
            while gone[0] == "EVENT":
                gone = await a.recv()
            assert gone[0] == "CLOSED" and gone[2].startswith("restricted: ")
            later = claim(MEMBER2, "rel", f"after MEMBER left {time.time_ns()}", created_at=now())
            assert not mcp_publish(two, [later]).get("isError")
            assert await a.silent(0.5)
        finally:
            await a.close()
    finally:
        await root.close()
