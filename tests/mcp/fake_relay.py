"""A relay and log server that lies, for `tms mirror` to meet: one collection's events served
over NIP-01 and NIP-77 on `/c/<slug>`, its log's checkpoint signed with a key of its own and its
entry tiles over HTTP, as a TMS server serves them, each of which a test may make lie
(`Lies`). Real parts: the project's Negentropy responder, its note signer and Merkle tree,
uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tms.nostr.events import Event
from tms.nostr.negentropy import Items, Responder
from tms.tlog.merkle import leaf_hash, root_of
from tms.tlog.note import LogSigner, NoteSigner
from tms.tlog.tiles import ENTRIES, TILE_WIDTH, entry_bundle, parse_tile_path

SLUG = "lab"


@dataclass
class Lies:
    """What the fake does other than serve its log honestly."""

    endless_neg: bool = False  # every NIP-77 answer: the whole range differs, again
    size: int | None = None  # the checkpoint's size (its root: of the honest entries)
    log_key_bytes: int = 0  # /log-key: this many bytes of junk, streamed
    notices: float = 0.0  # after NEG-OPEN: a NOTICE this often, and nothing else
    trickle: float = 0.0  # /checkpoint: one byte this often, for ever
    unasked: list[dict[str, Any]] = field(default_factory=list)  # sent with every REQ's answer
    extra: list[dict[str, Any]] = field(default_factory=list)  # offered by NIP-77 and served
    live_flood: Callable[[int], dict[str, Any]] | None = None  # the n-th live event, for ever
    failing_tiles: set[int] = field(default_factory=set)  # entry tiles answered 503


class FakeRelay:
    def __init__(self, events: list[dict[str, Any]], lies: Lies | None = None) -> None:
        self.events = events
        self.lies = lies or Lies()
        self.signer = LogSigner(NoteSigner.generate("127.0.0.1"), "127.0.0.1")
        self.entries = [bytes.fromhex(e["id"]) for e in events]
        self.tiles_read: list[int] = []
        self.url = ""

    @property
    def served(self) -> list[dict[str, Any]]:
        return self.events + self.lies.extra

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/log-key", self.log_key),
                Route(f"/c/{SLUG}/checkpoint", self.checkpoint),
                Route(f"/c/{SLUG}/tile/{{tile:path}}", self.tile),
                Route(f"/c/{SLUG}/others", self.others),
                Route(f"/c/{SLUG}", self.info),
                WebSocketRoute(f"/c/{SLUG}", self.relay),
            ]
        )

    async def info(self, request: Request) -> Response:
        return JSONResponse({"name": "fake", "limitation": {}})

    async def log_key(self, request: Request) -> Response:
        if self.lies.log_key_bytes:
            total = self.lies.log_key_bytes

            async def junk() -> AsyncIterator[bytes]:
                for _ in range(0, total, 65536):
                    yield b"x" * 65536

            return StreamingResponse(junk(), media_type="text/plain")
        return PlainTextResponse(self.signer.key.verifier().encode() + "\n")

    async def checkpoint(self, request: Request) -> Response:
        if self.lies.trickle:
            pause = self.lies.trickle

            async def slow() -> AsyncIterator[bytes]:
                while True:
                    yield b"1"
                    await asyncio.sleep(pause)

            return StreamingResponse(slow(), media_type="text/plain")
        size = self.lies.size if self.lies.size is not None else len(self.entries)
        root = root_of(leaf_hash(e) for e in self.entries)
        return PlainTextResponse(self.signer.sign(SLUG, size, root))

    async def others(self, request: Request) -> Response:
        """Where the export would place profiles and terms: its events are all entries."""
        return JSONResponse({"others": []})

    async def tile(self, request: Request) -> Response:
        tile = parse_tile_path(request.path_params["tile"])
        assert tile is not None and tile.level == ENTRIES, request.path_params["tile"]
        self.tiles_read.append(tile.index)
        if tile.index in self.lies.failing_tiles:
            return PlainTextResponse("not now", 503)
        start = tile.index * TILE_WIDTH
        ids = self.entries[start : start + tile.width]
        if len(ids) < tile.width:  # past the honest log: made up, as a lying log would
            ids = [(tile.index * TILE_WIDTH + i).to_bytes(32, "big") for i in range(tile.width)]
        return Response(entry_bundle(ids))

    async def relay(self, ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps(["AUTH", "challenge"]))
        flood: asyncio.Task[None] | None = None
        try:
            while True:
                message = json.loads(await ws.receive_text())
                if message[0] == "AUTH":
                    await ws.send_text(json.dumps(["OK", message[1]["id"], True, ""]))
                elif message[0] in ("NEG-OPEN", "NEG-MSG"):
                    await self._neg(ws, message)
                elif message[0] == "REQ":
                    if "ids" not in message[2] and self.lies.live_flood is not None:
                        await ws.send_text(json.dumps(["EOSE", message[1]]))
                        if flood is None:
                            flood = asyncio.create_task(self._flood(ws, message[1]))
                        continue
                    await self._req(ws, message)
        except WebSocketDisconnect:
            pass
        finally:
            if flood is not None:
                flood.cancel()

    async def _neg(self, ws: WebSocket, message: list[Any]) -> None:
        sub = message[1]
        if self.lies.notices:
            while True:
                await ws.send_text(json.dumps(["NOTICE", "still thinking"]))
                await asyncio.sleep(self.lies.notices)
        if self.lies.endless_neg:
            # the whole range (bound: infinity) differs, as a fingerprint nobody has
            reply = bytes([0x61, 0x00, 0x00, 0x01]) + bytes(16)
            await ws.send_text(json.dumps(["NEG-MSG", sub, reply.hex()]))
            return
        if message[0] == "NEG-OPEN":
            items = Items.of((e["created_at"], bytes.fromhex(e["id"])) for e in self.served)
            self.responder = Responder(items, 512 * 1024)
            query = message[3]
        else:
            query = message[2]
        reply = self.responder.respond(bytes.fromhex(query))
        await ws.send_text(json.dumps(["NEG-MSG", sub, reply.hex()]))

    async def _req(self, ws: WebSocket, message: list[Any]) -> None:
        sub = message[1]
        wanted = set(message[2].get("ids", ()))
        for event in self.lies.unasked:
            await ws.send_text(json.dumps(["EVENT", sub, event]))
        for event in self.served:
            if event["id"] in wanted:
                await ws.send_text(json.dumps(["EVENT", sub, event]))
        await ws.send_text(json.dumps(["EOSE", sub]))

    async def _flood(self, ws: WebSocket, sub: str) -> None:
        make = self.lies.live_flood
        assert make is not None
        n = 0
        while True:
            await ws.send_text(json.dumps(["EVENT", sub, make(n)]))
            n += 1
            if n % 50 == 0:
                await asyncio.sleep(0)


@contextmanager
def serving(fake: FakeRelay) -> Iterator[FakeRelay]:
    """The fake under uvicorn in a thread of its own, on a port the OS picks."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host="127.0.0.1", port=0, log_level="critical", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="fake-relay", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake relay did not start")
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        fake.url = f"ws://127.0.0.1:{port}/c/{SLUG}"
        yield fake
    finally:
        server.should_exit = True
        server.force_exit = True
        thread.join(30)


def event_id(event: dict[str, Any]) -> str:
    return Event.from_dict(event).id
