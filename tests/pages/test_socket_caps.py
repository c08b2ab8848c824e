"""Relay sockets under attack from outside, on a real uvicorn over the real app and relay
(`tms.http.protocol`, `tms.http.websocket`, `tms.http.crowds`):

- a crowd of subscribed sockets of one key, each from an address of its own, fills the
  sockets' share of the server: the crowd gives way, its oldest first, and `/healthz`, a signed
  MCP read and another member's subscription are served throughout (before, a subscribed
  socket was never closed to make room, and everyone else was refused);
- a message that never ends, on a subscribed socket whose client answers pings and keeps
  sending fragments, is closed within its deadline, saying why (before, it held its bytes for
  as long as the client liked: the idle close never comes to a subscribed socket).

Clients at 127.0.0.2, 127.0.1.1... are distinct addresses on Linux's loopback (the whole of
127.0.0.0/8 is local); the server listens on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from factories import MEMBER, OWNER, Live, claim, fresh_database, live_server, members, request
from factories import settings as make_settings
from factories import terms as sign_terms
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode

from tms.http.protocol import ConnectionLimits
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio
CAP = 50  # of which the sockets may hold 45: a tenth is kept for HTTP
LIMITS = ConnectionLimits(
    head_seconds=5.0, body_seconds=1.5, max_connections=CAP, per_address=64, rate_seconds=0.5
)
WAIT = 10.0


async def seed(url: str) -> None:
    """One collection, `rel`, owned by OWNER, MEMBER a member."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.approve([OWNER.pubkey])
        await ledger.submit(
            [sign_terms(OWNER), members(OWNER, "rel", [MEMBER.pubkey]), sign_terms(MEMBER)],
            origin=OPERATOR,
        )
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url, "tms_sockets") as url:
        asyncio.run(seed(url))
        with live_server(url, make_settings(TMS_EMBED="off"), LIMITS) as server:
            yield server


def relay_url(live: Live) -> str:
    return "ws" + live.url.removeprefix("http") + "/c/rel"


async def recv(ws: ClientConnection) -> list[Any]:
    message: list[Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    return message


async def subscribed(live: Live, key: SecretKey, source: str) -> ClientConnection:
    """A socket from `source`, authenticated as `key`, subscribed to new claims."""
    url = relay_url(live)
    ws = await connect(url, max_size=None, local_addr=(source, 0), open_timeout=WAIT)
    try:
        challenge = (await recv(ws))[1]
        auth = key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge]])
        await ws.send(json.dumps(["AUTH", auth.to_dict()]))
        assert (await recv(ws))[2] is True
        await ws.send(json.dumps(["REQ", "live", {"kinds": [4702], "limit": 0}]))
        assert await recv(ws) == ["EOSE", "live"]
    except BaseException:
        await ws.close()
        raise
    return ws


async def is_open(ws: ClientConnection) -> bool:
    """Whether the server still holds `ws`: it answers a ping."""
    try:
        pong = await ws.ping()
        await asyncio.wait_for(pong, WAIT)
    except (ConnectionClosed, TimeoutError):
        return False
    return True


def signed_read(live: Live) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "list_collections",
            "arguments": {"request": request(OWNER, "list_collections")},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    return httpx.post(f"{live.url}/mcp", json=body, headers=headers, timeout=WAIT)


async def test_a_crowd_of_one_keys_sockets_from_many_addresses_gives_way(live: Live) -> None:
    """Sixty subscribed sockets of MEMBER's, each from an address of its own, after a socket of
    OWNER's: more than the server's whole cap. Before, the fiftieth filled it, every socket
    was busy and no address held two, so nobody was closed and `/healthz` was refused."""
    owner = await subscribed(live, OWNER, "127.0.0.2")
    crowd: list[ClientConnection | None] = []
    try:
        for n in range(60):
            try:
                crowd.append(await subscribed(live, MEMBER, f"127.0.1.{n + 1}"))
            except Exception:  # refused: closed, or answered 503
                crowd.append(None)
        assert all(ws is not None for ws in crowd)  # nobody is refused: the crowd gives way
        held = [await is_open(ws) for ws in crowd if ws is not None]
        # The sockets' share is 45, OWNER's one of them: the crowd's oldest went, in order.
        assert held == [False] * 16 + [True] * 44, held
        health = httpx.get(f"{live.url}/healthz", timeout=WAIT)
        assert health.status_code == 200
        read = signed_read(live)
        assert read.status_code == 200, read.text
        assert not read.json()["result"].get("isError"), read.text
        # OWNER's subscription still delivers what is published.
        async with connect(relay_url(live), local_addr=("127.0.0.3", 0)) as writer:
            await recv(writer)  # the AUTH challenge: publishing needs none
            event = claim(OWNER, "rel", "Still subscribed.", created_at=int(time.time()))
            await writer.send(json.dumps(["EVENT", event]))
            assert (await recv(writer))[2] is True
        while (message := await recv(owner))[0] != "EVENT":
            pass
        assert message[2]["id"] == event["id"]
    finally:
        for ws in [owner, *crowd]:
            if ws is not None:
                with contextlib.suppress(Exception):
                    await ws.close()


async def test_a_message_that_never_ends_is_closed_even_on_a_subscribed_socket(
    live: Live,
) -> None:
    """A 64 KiB fragment, then more fragments of 1 KiB every 50 ms (well above the minimum
    rate), never the last one, pings answered: closed once the message has had
    `body_seconds`, with a close frame saying why."""
    ws = await subscribed(live, MEMBER, "127.0.2.1")
    try:
        started = time.monotonic()
        ws.transport.write(
            Frame(Opcode.TEXT, b'["REQ","' + b"x" * 65536, fin=False).serialize(
                mask=True, extensions=[]
            )
        )
        with pytest.raises(ConnectionClosed) as closed:
            while time.monotonic() - started < WAIT:
                await asyncio.wait_for(await ws.ping(), WAIT)  # answered; raises once closed
                fragment = Frame(Opcode.CONT, b"x" * 1024, fin=False)
                ws.transport.write(fragment.serialize(mask=True, extensions=[]))
                await asyncio.sleep(0.05)
        seconds = time.monotonic() - started
        assert closed.value.rcvd is not None, closed.value
        assert closed.value.rcvd.code == 1008
        assert "not ended within 1.5 s" in closed.value.rcvd.reason
        assert LIMITS.body_seconds - 0.1 <= seconds < LIMITS.body_seconds + 5
    finally:
        await ws.close()
    assert httpx.get(f"{live.url}/healthz", timeout=WAIT).status_code == 200


async def test_an_address_that_is_the_whole_crowd_is_refused_its_next_socket(live: Live) -> None:
    """One address holds the sockets' whole share, every socket subscribed: its next socket is
    the crowd, and is answered 503 (nobody else's is closed for it); another address's still
    gets in, in place of the crowd's oldest."""
    share = LIMITS.websockets
    crowd = [await subscribed(live, MEMBER, "127.0.3.1") for _ in range(share)]
    try:
        with pytest.raises(InvalidStatus) as refused:
            await subscribed(live, MEMBER, "127.0.3.1")
        assert refused.value.response.status_code == 503
        assert b"too many WebSocket connections" in refused.value.response.body
        assert all([await is_open(ws) for ws in crowd])
        other = await subscribed(live, OWNER, "127.0.3.2")
        await other.close()
        assert not await is_open(crowd[0])
    finally:
        for ws in crowd:
            with contextlib.suppress(Exception):
                await ws.close()
