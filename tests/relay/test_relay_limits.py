"""The relay under limits: a subscriber that never reads is closed, never buffered without end;
rate limits apply to relay messages and land in the refusal log (route `relay`); idle
connections end; the connection cap and the head deadline cover WebSocket connections; and the
browser's login cookie authenticates a same-origin socket only."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from factories import MEMBER, OWNER, Live, claim, evidence, fresh_database, live_server, settings
from relay_client import Client, seed, ws_url
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tms.http.login import COOKIE, Keyring
from tms.http.protocol import ConnectionLimits
from tms.ledger.sessions import Sessions
from tms.relay.limits import OUTBOX_BYTES
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio
SECRET = secrets.token_hex(32)
MAX_CONNECTIONS = 12


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    config = settings(
        TMS_EMBED="off",
        TMS_SECRET=SECRET,
        TMS_RATE_ADDRESS="300/minute",
        TMS_RATE_KEY="20/minute",
        TMS_RELAY_IDLE_SECONDS="2",
        TMS_RELAY_BEHIND_SECONDS="2",
    )
    limits = ConnectionLimits(head_seconds=1.0, max_connections=MAX_CONNECTIONS)
    with fresh_database(pg_server_url, template_url, "tms_relay3") as url:
        asyncio.run(seed(url))
        with live_server(url, config, limits) as server:
            yield server


def now() -> int:
    return int(time.time())


def small_buffer_socket(url: str) -> socket.socket:
    """A client socket whose kernel receive buffer stays small: left to itself, Linux grows it
    (net.ipv4.tcp_rmem allows 32 MB here), and a client that never reads would then take in
    everything the test sends without the server ever meeting its back-pressure."""
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connect: fixed
    sock.connect((host, int(port)))
    sock.setblocking(False)
    return sock


async def test_a_subscriber_that_never_reads_is_closed(live: Live) -> None:
    text = "A long document. " * 90_000  # about 1.5 MB per event
    lazy = await connect(
        ws_url(live.url, "/c/rel"),
        sock=small_buffer_socket(live.url),
        max_size=None,
        max_queue=1,
    )
    try:
        challenge = json.loads(await lazy.recv())[1]
        event = MEMBER.sign(
            22242, "", now(), [["relay", ws_url(live.url, "/c/rel")], ["challenge", challenge]]
        )
        await lazy.send(json.dumps(["AUTH", event.to_dict()]))
        assert json.loads(await lazy.recv())[2] is True
        await lazy.send(json.dumps(["REQ", "all", {"limit": 0}]))
        assert json.loads(await lazy.recv()) == ["EOSE", "all"]
        async with await Client.open(ws_url(live.url, "/c/rel")) as writer:
            for n in range(3 * OUTBOX_BYTES // len(text)):
                ev = evidence(OWNER, "rel", f"{n} {text}", created_at=now())
                assert (await writer.publish(ev))[2] is True
        await asyncio.sleep(4)  # the relay gives up on it
        seen = []
        with pytest.raises(ConnectionClosed):
            while True:
                seen.append(json.loads(await asyncio.wait_for(lazy.recv(), 10)))
        assert len(seen) < 3 * OUTBOX_BYTES // len(text)  # not everything was kept for it
        notices = [m for m in seen if m[0] == "NOTICE"]
        assert all("closing this connection" in m[1] for m in notices)
    finally:
        await lazy.close()
    assert httpx.get(live.url + "/healthz").status_code == 200


async def test_an_idle_connection_ends_with_a_notice(live: Live) -> None:
    client = await Client.open(ws_url(live.url, "/"))
    notice = await client.recv(10)
    assert notice[0] == "NOTICE" and "idle" in notice[1]
    with pytest.raises(ConnectionClosed):
        await client.recv(10)


async def test_the_connection_cap_closes_idle_sockets_first(live: Live) -> None:
    idle = [await Client.open(ws_url(live.url, "/")) for _ in range(MAX_CONNECTIONS)]
    try:
        # one more connection: the longest idle one makes room, and the server answers
        assert httpx.get(live.url + "/healthz").status_code == 200
        with pytest.raises(ConnectionClosed):
            await idle[0].recv(5)
    finally:
        for client in idle:
            await client.close()


def test_a_slow_upgrade_head_is_cut_off(live: Live) -> None:
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
        raw.settimeout(5)
        started = time.monotonic()
        assert raw.recv(100) == b""  # closed by the head deadline
        assert time.monotonic() - started < 4


async def test_the_login_cookie_authenticates_a_same_origin_socket_only(live: Live) -> None:
    cookie, id_sha256 = Keyring(SECRET.encode()).new_session()
    pool = await open_pool(live.database_url, min_size=1, max_size=1)
    try:
        await Sessions(pool).open(id_sha256, MEMBER.pubkey, datetime.now(UTC) + timedelta(hours=1))
    finally:
        await pool.close()
    headers = {"Cookie": f"{COOKIE}={cookie}"}
    same = await Client.open(
        ws_url(live.url, "/c/rel"), additional_headers={**headers, "Origin": live.url}
    )
    async with same:
        _, end = await same.req("s", {"kinds": [4705]})
        assert end == ["EOSE", "s"]
    hijack = {**headers, "Origin": "https://evil.example"}
    other = await Client.open(ws_url(live.url, "/c/rel"), additional_headers=hijack)
    async with other:
        _, end = await other.req("s", {"kinds": [4705]})
        assert end[0] == "CLOSED" and end[2].startswith("auth-required: ")


async def test_rate_limits_apply_to_relay_messages_and_are_logged(live: Live) -> None:
    """Last in this module: it spends the address's whole budget."""
    async with await Client.open(ws_url(live.url, "/c/rel")) as client:
        answers = []
        for n in range(25):  # the key's budget: 20 a minute
            event = claim(MEMBER, "rel", f"fast {n} {time.time_ns()}", created_at=now())
            answers.append(await client.publish(event))
        by_key = [a for a in answers if a[2] is False]
        assert by_key and all(a[3].startswith("rate-limited: ") for a in by_key)
        assert "this key" in by_key[0][3]
        for n in range(300):  # the address's: 300 a minute
            await client.send(["COUNT", f"c{n}", {}])
        ends = [await client.recv() for _ in range(300)]
        by_address = [e for e in ends if e[2].startswith("rate-limited: ")]
        assert by_address and "this address" in by_address[0][2]
    await asyncio.sleep(1.5)  # the refusal log writes every second
    conn = await asyncpg.connect(live.database_url)
    try:
        logged = await conn.fetchval(
            "SELECT coalesce(sum(count), 0) FROM refusals"  # rate limits: counted a row a minute
            " WHERE tool = 'relay' AND kind = 'rate_limited'"
        )
    finally:
        await conn.close()
    assert logged >= len(by_key) + len(by_address)
