"""A raw NIP-01 client over Python's `websockets`, for the relay tests: it sends exactly what a
test says and reads every message the relay sends, so nothing a library smooths over hides."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from factories import MEMBER, OWNER, OWNER2, members, settings, terms
from websockets.asyncio.client import ClientConnection, connect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.relay.shared import Relay, open_relay
from tms.rules.admission import OPERATOR
from tms.runtime import open_runtime
from tms.store.database import open_pool

WAIT_SECONDS: Final = 10.0


@contextlib.asynccontextmanager
async def in_process_relay(db_url: str, **options: Any) -> AsyncIterator[Relay]:
    """The relay of a process over `db_url` and no socket: a test drives a `Connection` by
    hand, holding the moments a socket would race through. `options`: `open_relay`'s."""
    async with (
        open_runtime(settings(TMS_EMBED="off"), db_url) as runtime,
        open_relay(runtime.services, db_url, **options) as relay,
    ):
        yield relay


class Said(list[list[Any]]):
    """What a hand-driven `Connection` was sent, each message parsed: pass it as `send`."""

    async def __call__(self, text: str) -> None:
        self.append(json.loads(text))


def ws_url(http_url: str, path: str = "/") -> str:
    return "ws" + http_url.removeprefix("http") + path


class Client:
    def __init__(self, ws: ClientConnection, url: str, challenge: str) -> None:
        self.ws = ws
        self.url = url
        self.challenge = challenge

    @classmethod
    async def open(cls, url: str, **options: Any) -> Client:
        ws = await connect(url, max_size=None, **options)
        first = json.loads(await asyncio.wait_for(ws.recv(), WAIT_SECONDS))
        assert first[0] == "AUTH" and isinstance(first[1], str), first
        return cls(ws, url, first[1])

    async def close(self) -> None:
        await self.ws.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, message: Any) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def recv(self, seconds: float = WAIT_SECONDS) -> list[Any]:
        message: list[Any] = json.loads(await asyncio.wait_for(self.ws.recv(), seconds))
        return message

    async def silent(self, seconds: float = 0.3) -> bool:
        """Nothing arrives within `seconds`."""
        try:
            message = await self.recv(seconds)
        except TimeoutError:
            return True
        raise AssertionError(f"unexpected message: {message}")

    async def auth(self, key: SecretKey, relay: str | None = None, **override: Any) -> list[Any]:
        tags = [
            ["relay", relay or self.url],
            ["challenge", override.pop("challenge", self.challenge)],
        ]
        when = override.pop("created_at", int(time.time()))
        event = key.sign(override.pop("kind", 22242), "", when, tags).to_dict()
        await self.send(["AUTH", event])
        return await self.recv()

    async def publish(self, event: dict[str, Any]) -> list[Any]:
        await self.send(["EVENT", event])
        return await self.recv()

    async def req(
        self, sub_id: str, *filters: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """The stored answer's events, and what ended it (EOSE or CLOSED)."""
        await self.send(["REQ", sub_id, *filters])
        events = []
        while True:
            message = await self.recv()
            if message[0] == "EVENT" and message[1] == sub_id:
                events.append(message[2])
            elif message[0] in ("EOSE", "CLOSED") and message[1] == sub_id:
                return events, message
            else:
                raise AssertionError(f"unexpected message: {message}")


async def seed(url: str) -> None:
    """One collection (`rel`, owned by OWNER, MEMBER a member) and another (`other`, OWNER2's
    alone)."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
        await ledger.submit(
            [
                terms(OWNER),
                terms(OWNER2),
                members(OWNER, "rel", [MEMBER.pubkey]),
                terms(MEMBER),
                members(OWNER2, "other", []),
            ],
            origin=OPERATOR,
        )
    finally:
        await pool.close()


def small_buffer_socket(url: str) -> socket.socket:
    """A client socket whose kernel receive buffer stays small: left to itself, Linux grows it
    (net.ipv4.tcp_rmem allows 32 MB here), and a client that does not read would take in
    everything without the server ever meeting its back-pressure."""
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connect: fixed
    sock.connect((host, int(port)))
    sock.setblocking(False)
    return sock


async def slow_reader(http_url: str, path: str, key: SecretKey) -> Client:
    """An authenticated client that reads only when the test says: while it does not, what the
    relay sends it piles up on the server (a slow stored answer)."""
    url = ws_url(http_url, path)
    ws = await connect(url, sock=small_buffer_socket(http_url), max_size=None, max_queue=1)
    first = json.loads(await asyncio.wait_for(ws.recv(), WAIT_SECONDS))
    client = Client(ws, url, first[1])
    ok = await client.auth(key)
    assert ok[0] == "OK" and ok[2] is True, ok
    return client


async def publish(database_url: str, *batches: list[dict[str, Any]]) -> None:
    """Each batch committed on its own, in turn, as any door would."""
    pool = await open_pool(database_url, min_size=1, max_size=1)
    try:
        ledger = Ledger(pool)
        for batch in batches:
            await ledger.submit(batch, origin=OPERATOR)
    finally:
        await pool.close()
