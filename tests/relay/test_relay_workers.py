"""`tms serve --workers 2`, started as an operator would (its own data directory, the embedded
PostgreSQL, a free port): it answers /healthz and the relay; a client address's connection cap
holds across both workers; a member removed loses its subscriptions on every worker; a worker
killed is replaced and its clients reconnect; SIGTERM stops everything, the database last."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from factories import (
    LOG_SIGNER,
    MEMBER,
    OWNER,
    TMS,
    UNLIMITED,
    claim,
    environment,
    free_port,
    members,
)
from relay_client import Client, seed, ws_url
from websockets.protocol import State

from tms.nostr.events import SecretKey
from tms.store.database import with_database
from tms.store.embedded import running_url

pytestmark = pytest.mark.anyio
PER_ADDRESS = 8  # TMS_MAX_CONNECTIONS_PER_ADDRESS: every client here is 127.0.0.1
MAX_CONNECTIONS = 20  # TMS_MAX_CONNECTIONS: WebSocket ones at most 18 (a tenth kept for HTTP)
SOCKETS = 18


class Served:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def workers(self) -> list[int]:
        return sorted(child.pid for child in psutil.Process(self.process.pid).children())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("workers")
    data = root / "data"
    port = free_port()
    env = environment(
        TMS_DATA_DIR=str(data),
        TMS_EMBED="off",
        TMS_LOG_KEY=LOG_SIGNER.encode(),
        TMS_MAX_CONNECTIONS_PER_ADDRESS=str(PER_ADDRESS),
        TMS_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        **UNLIMITED,
    )
    log = root / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [TMS, "serve", "--port", str(port), "--workers", "2"],
            env=env,
            stdout=out,
            stderr=out,
        )
    server = Served(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_healthy(server)
        database = running_url(data)
        assert database is not None
        asyncio.run(seed(with_database(database, "tms")))
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    assert code == 0, log.read_text()
    assert running_url(data) is None, "the embedded PostgreSQL outlived the supervisor"
    assert "stopping 2 workers" in log.read_text()


def _wait_healthy(server: Served, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while True:
        assert server.process.poll() is None, server.log.read_text()
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.get(f"{server.url}/healthz", timeout=2)
            if answer.status_code == 200 and len(server.workers()) == 2:
                return
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.2)


def now() -> int:
    return int(time.time())


async def subscriber(url: str, key: SecretKey = MEMBER, address: str | None = None) -> Client:
    """A socket of `key` with a live subscription (from `address`, a local one)."""
    where = {} if address is None else {"local_addr": (address, 0)}
    client = await Client.open(ws_url(url, "/c/rel"), **where)
    assert (await client.auth(key))[2] is True
    _, end = await client.req("live", {"kinds": [4702], "limit": 0})
    assert end == ["EOSE", "live"]
    return client


async def publish(url: str, event: dict[str, object]) -> None:
    writer = await Client.open(ws_url(url, "/c/rel"))
    try:
        ok = await writer.publish(event)
        assert ok[2] is True, ok
    finally:
        await writer.close()


async def test_two_workers_answer_healthz_and_the_relay(served: Served) -> None:
    health = httpx.get(f"{served.url}/healthz", timeout=5)
    assert health.status_code == 200 and health.json()["ok"] is True
    readers = [await subscriber(served.url) for _ in range(4)]  # spread over both workers
    try:
        said = claim(MEMBER, "rel", f"two workers {time.time_ns()}", created_at=now())
        await publish(served.url, said)
        for reader in readers:
            message = await reader.recv()
            assert message[0] == "EVENT" and message[2]["id"] == said["id"]
    finally:
        for reader in readers:
            await reader.close()


async def test_an_address_connection_cap_holds_across_workers(served: Served) -> None:
    """Busy sockets (each with a subscription) from one address: the cap's number get in,
    whichever worker each lands on; one worker alone would have let in the cap twice over."""
    held: list[Client] = []
    refused = 0
    try:
        for _ in range(PER_ADDRESS + 6):
            try:
                held.append(await subscriber(served.url))
            except Exception:  # closed at the handshake: the address holds its most
                refused += 1
        assert len(held) == PER_ADDRESS
        assert refused == 6
    finally:
        for client in held:
            await client.close()
    await asyncio.sleep(0.5)  # the counts fall as the workers see the sockets close
    again = await subscriber(served.url)
    await again.close()


async def test_a_keys_crowd_gives_way_at_the_cap_across_workers(served: Served) -> None:
    """One key's sockets from many addresses fill the WebSocket share of both workers
    together; another client's socket then gets in, and the crowd, on whichever worker, loses
    its own: the workers together hold the share, not each of them the share."""
    crowd = [await subscriber(served.url, address=f"127.0.0.{n}") for n in range(2, 2 + SOCKETS)]
    try:
        newcomer = await subscriber(served.url, OWNER)
        try:
            await asyncio.sleep(1.5)  # a worker closes its part of the excess within a second
            open_ = [c for c in crowd if c.ws.state is State.OPEN]
            assert len(open_) < SOCKETS
            assert len(open_) + 1 <= SOCKETS
            assert newcomer.ws.state is State.OPEN
        finally:
            await newcomer.close()
    finally:
        for client in crowd:
            await client.close()


async def test_a_killed_worker_is_replaced_and_its_clients_reconnect(served: Served) -> None:
    before = served.workers()
    assert len(before) == 2
    readers = [await subscriber(served.url) for _ in range(4)]
    try:
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while len(after := served.workers()) != 2 or before[0] in after:
            assert time.monotonic() < deadline, served.log.read_text()
            await asyncio.sleep(0.2)
        assert f"(pid {before[0]}) was killed by SIGKILL" in served.log.read_text()
    finally:
        for reader in readers:
            await reader.close()
    _wait_healthy(served)
    readers = [await subscriber(served.url) for _ in range(4)]  # as a client reconnects
    try:
        said = claim(MEMBER, "rel", f"after the kill {time.time_ns()}", created_at=now())
        await publish(served.url, said)
        for reader in readers:
            assert (await reader.recv())[2]["id"] == said["id"]
    finally:
        for reader in readers:
            await reader.close()


async def test_a_removal_closes_the_members_subscriptions_on_every_worker(
    served: Served,
) -> None:
    readers = [await subscriber(served.url) for _ in range(4)]
    try:
        owner = await Client.open(ws_url(served.url, "/c/rel"))
        try:
            assert (await owner.auth(OWNER))[2] is True
            dropped = members(OWNER, "rel", [], created_at=now() + 5)
            assert (await owner.publish(dropped))[2] is True
        finally:
            await owner.close()
        for reader in readers:
            gone = await reader.recv()  # the list itself may come first, then the refusal
            while gone[0] == "EVENT":
                gone = await reader.recv()
            assert gone[0] == "CLOSED" and gone[2].startswith("restricted: "), gone
    finally:
        for reader in readers:
            await reader.close()
