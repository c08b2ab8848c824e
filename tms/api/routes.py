"""The routes bots and tools read over plain HTTP: health, the terms, a collection's export,
and its transparency log (the key checkpoints are signed with, checkpoints, consistency proofs,
tlog-tiles). A member proves who asks with a NIP-98 header, or a browser with its login cookie;
a collection closed to the caller answers exactly as a missing one (`tms.pages.answers`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import AsyncExitStack, aclosing
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tms.errors import shown
from tms.guard.exports import Exports, ExportsBusy
from tms.http.login import request_url
from tms.http.statuses import Refused
from tms.ledger import Exporter, ReadableCollection
from tms.nostr import nip98
from tms.nostr.events import is_hex64
from tms.pages.door import PRIVATE, door_of, json_error
from tms.rules.terms import current_terms
from tms.runtime import Runtime
from tms.tlog.receipt import EXTENSION as RECEIPT_EXTENSION
from tms.tlog.receipt import MEDIA_TYPE as RECEIPT_MEDIA_TYPE
from tms.tlog.tiles import parse_tile_path
from tms.types import EventId, PubKey

EXPORT_MEDIA_TYPE: Final = "application/jsonl"  # JSON Lines; one signed event per line
EXPORT_CHUNK_BYTES: Final = 64 * 1024  # lines are sent in chunks of about this size
# A tile never changes once the log holds it (tlog-tiles); it is still a member's to see.
IMMUTABLE: Final = {"Cache-Control": "private, max-age=31536000, immutable"}
NOTE_MEDIA_TYPE: Final = "text/plain; charset=utf-8"
MAX_SIZE_DIGITS: Final = 19  # a tree size in a query: bigint's range
COSIGNED: Final = "cosigned"  # ?checkpoint=cosigned: the export ends at the witnessed one


async def healthz(request: Request) -> Response:
    runtime = runtime_of(request)
    problem = await runtime.health.problem()
    if problem is not None:
        runtime.services.outage.failed("the health check", problem)
        body = {"ok": False, "database": f"unreachable: {problem}"}
        return JSONResponse(body, 503, headers=PRIVATE)
    runtime.services.outage.answered()
    vectors = runtime.services.search.status
    return JSONResponse({"ok": True, "database": "reachable", "vectors": vectors}, headers=PRIVATE)


async def terms(request: Request) -> Response:
    return JSONResponse(current_terms())


async def export(request: Request) -> Response:
    """Every event of the collection, oldest first, exactly as stored. Membership is checked
    before the first byte goes out; the body then streams from a database cursor. With
    `?checkpoint=1` the last line is the log's checkpoint line (`tms verify-export`), at its
    latest signed checkpoint; with `?checkpoint=cosigned` the file ends at the checkpoint the
    collection's `/checkpoint` shows (with witnesses: the newest the quorum cosigned, else the
    newest any witness cosigned), so that `tms verify-export --policy` accepts it while a
    witness lags or is down."""
    readable = await readable_by_caller(request)
    runtime = runtime_of(request)
    flag = request.query_params.get("checkpoint", "0")
    if flag not in ("0", "1", COSIGNED):
        raise Refused(400, "checkpoint must be 0, 1 or cosigned")
    # Two names, so that both downloads can sit side by side (`tms verify-export` wants the
    # checkpointed one).
    name = f"{readable.slug}.checkpoint.jsonl" if flag != "0" else f"{readable.slug}.jsonl"
    headers = {**PRIVATE, "Content-Disposition": f'attachment; filename="{name}"'}
    if request.method == "HEAD":
        return Response(media_type=EXPORT_MEDIA_TYPE, headers=headers)
    upto: tuple[int, str] | None = None
    if flag == "1":
        await runtime.services.tlog.checkpoint(readable)  # builds a log not built yet
    elif flag == COSIGNED:
        shown = await runtime.services.tlog.witnessed(readable)  # builds one too
        upto = (shown["size"], shown["note"])
    # The slot is held until the response has streamed (or the client hung up): one export at
    # a time per key (RateLimited: a 429), a few at a time in all (ExportsBusy: a 503).
    held = AsyncExitStack()
    try:
        await held.enter_async_context(runtime.exports.slot(readable.pubkey))
    except ExportsBusy as exc:
        raise Refused(503, str(exc), {"Retry-After": str(exc.retry_after)}) from None
    return ClosingStreamingResponse(
        _export_body(runtime.exporter, readable, flag != "0", runtime.exports, upto),
        media_type=EXPORT_MEDIA_TYPE,
        headers=headers,
        held=held,
    )


async def log_key(request: Request) -> Response:
    """The verifier key of every checkpoint this server signs: public, one line."""
    key = runtime_of(request).ledger.log.signer.key.verifier().encode()
    return PlainTextResponse(key + "\n", media_type=NOTE_MEDIA_TYPE)


async def checkpoint(request: Request) -> Response:
    """The collection log's checkpoint, as tlog-tiles serves it: the signed note. With
    witnesses, the newest one they cosigned, their lines included, and `TMS-Witnessed-By`
    and `TMS-Quorum` saying who and whether that is the policy's quorum; `?witnessed=0`: the
    latest signed, witnessed yet or not."""
    readable = await readable_by_caller(request)
    flag = request.query_params.get("witnessed", "1")
    if flag not in ("0", "1"):
        raise Refused(400, "witnessed must be 0 or 1")
    tlog = runtime_of(request).services.tlog
    info = await (tlog.witnessed(readable) if flag == "1" else tlog.checkpoint(readable))
    headers = dict(PRIVATE)
    if "quorum" in info:
        headers["TMS-Witnessed-By"] = ", ".join(info.get("witnessed_by", [])) or "nobody"
        headers["TMS-Quorum"] = {True: "met", False: "not met", None: "no policy"}[info["quorum"]]
    return PlainTextResponse(info["note"], media_type=NOTE_MEDIA_TYPE, headers=headers)


async def consistency(request: Request) -> Response:
    """`?old=M[&new=N]`: the proof that the log at M entries is a prefix of it at N (default:
    the latest checkpoint's size), as `get_consistency` returns it (a `LogError`, a 400, for
    sizes the log cannot prove)."""
    readable = await readable_by_caller(request)
    sizes = [request.query_params.get(name) for name in ("old", "new")]
    if sizes[0] is None or not all(_size(text) for text in sizes if text is not None):
        raise Refused(400, "old (and new) must be tree sizes: ?old=M or ?old=M&new=N")
    old, new = (None if text is None else int(text) for text in sizes)
    assert old is not None
    proof = await runtime_of(request).services.tlog.consistency(readable, old, new)
    return JSONResponse(proof, headers=PRIVATE)


async def receipt(request: Request) -> Response:
    """A receipt for one event of the collection: a C2SP tlog-proof (`.tlog-proof`) carrying
    the event, its index, its inclusion path and the checkpoint `/checkpoint` serves (with
    witnesses, the quorum's cosignatures in it, and the same two headers saying who), for `tms
    verify-receipt` to check offline. An id that is not an entry of this collection's log is
    the 404 of a missing event."""
    readable = await readable_by_caller(request)
    event_id = request.path_params["event_id"]
    info = None
    if is_hex64(event_id):
        info = await runtime_of(request).services.tlog.receipt(readable, EventId(event_id))
    if info is None:
        return json_error(f"no event {shown(event_id)!r} in collection '{readable.slug}'", 404)
    name = f"{event_id[:16]}{RECEIPT_EXTENSION}"
    headers = {**PRIVATE, "Content-Disposition": f'attachment; filename="{name}"'}
    headers["TMS-Witnessed-By"] = ", ".join(info["witnessed_by"]) or "nobody"
    headers["TMS-Quorum"] = {True: "met", False: "not met", None: "no policy"}[info["quorum"]]
    return PlainTextResponse(info["receipt"], media_type=RECEIPT_MEDIA_TYPE, headers=headers)


async def others(request: Request) -> Response:
    """`?held=K&size=N`: the profile and terms lines the export places after the log's first K
    entries and before its entry N + 1 (or after its last), each with the entry it follows, in
    the export's order (`Exporter.places`): `{"others": [["<id>", "<id>" | null], ...]}`, as
    the export's checkpoint line lists them. A mirror holding K entries and verifying a
    checkpoint of N places them so, and its copy is the export byte for byte."""
    readable = await readable_by_caller(request)
    sizes = [request.query_params.get(name) for name in ("held", "size")]
    if not all(text is not None and _size(text) for text in sizes):
        raise Refused(400, "held and size must be tree sizes: ?held=K&size=N")
    held, size = (int(text) for text in sizes if text is not None)
    if held > size:
        raise Refused(400, "held must be at most size")
    placed = await runtime_of(request).exporter.places(readable, held, size)
    return JSONResponse({"others": [list(pair) for pair in placed]}, headers=PRIVATE)


async def tile(request: Request) -> Response:
    """One tile or entry bundle of the collection's log (C2SP tlog-tiles), or 404 while the
    log does not hold it; the same 404 for any path that names no tile."""
    readable = await readable_by_caller(request)
    wanted = parse_tile_path(request.path_params["tile"])
    tlog = runtime_of(request).services.tlog
    data = None if wanted is None else await tlog.tile(readable, wanted)
    if data is None:
        return json_error("no such tile", 404)
    return Response(data, media_type="application/octet-stream", headers=IMMUTABLE)


# --- who asks ----------------------------------------------------------------------------------


async def caller(request: Request) -> PubKey:
    """Who asks: a bot signs NIP-98 (`AuthError`, a 401, when it does not hold up); a
    browser sends its login cookie."""
    if "authorization" not in request.headers:
        session = await door_of(request).session(request)
        if session is not None:
            return session.pubkey
    return nip98.check_authorization(
        request.headers.get("authorization"),
        url=request_url(request, request.app.state.settings.base_url),
        method=request.method,
        now=int(time.time()),
    )


async def readable_by_caller(request: Request) -> ReadableCollection:
    """The collection the path names, if the caller may read it (`NotAReader`, the one 404,
    for one that does not exist, is closed to the caller, or cannot be named so). The caller's
    key spends its rate limit first (`RateLimited`: a 429)."""
    pubkey = await caller(request)
    services = runtime_of(request).services
    await services.throttle.key(pubkey)
    return await services.access.collection(pubkey, request.path_params["slug"])


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _size(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= MAX_SIZE_DIGITS


# --- streaming an export -----------------------------------------------------------------------


async def _export_body(
    exporter: Exporter,
    readable: ReadableCollection,
    checkpoint: bool,
    exports: Exports,
    upto: tuple[int, str] | None = None,
) -> AsyncGenerator[bytes, None]:
    """The export in chunks of about `EXPORT_CHUNK_BYTES`, each made in the export's turn on
    the exports' lane and paced after it (`tms.guard.exports`); sending waits outside it."""
    lines = exporter.lines(readable, checkpoint=checkpoint, upto=upto)
    async with aclosing(lines):
        done = False
        while not done:
            chunk: list[bytes] = []
            size = 0
            async with exports.turn():
                done = True
                async for line in lines:
                    data = f"{line}\n".encode()
                    chunk.append(data)
                    size += len(data)
                    if size >= EXPORT_CHUNK_BYTES:
                        done = False
                        break
            if chunk:
                yield b"".join(chunk)


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body when the response ends for any reason (a client that hangs up mid-export
    included), so the export's cursor, transaction and pooled connection go back at once rather
    than whenever the garbage collector gets to the generator."""

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        *,
        media_type: str,
        headers: Mapping[str, str],
        held: AsyncExitStack,
    ) -> None:
        super().__init__(body, media_type=media_type, headers=headers)
        self._body = body
        self._held = held  # what the response holds until it ends: the export's slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self._body.aclose()
            finally:
                await self._held.aclose()


GET: Final = ["GET"]

# The table's groups, by the door each is counted under (`tms.app` adds them in this order).
HEALTH: Final = [Route("/healthz", healthz, methods=GET, name="health")]
TERMS: Final = [Route("/terms", terms, methods=GET, name="terms")]
# `path`, so that a slug with a slash in it gets the same 404 as any other bad slug
# and where it places profiles and terms, which `tms mirror` reads each sync
EXPORT: Final = [
    Route("/c/{slug:path}/export.jsonl", export, methods=GET, name="export"),
    Route("/c/{slug:path}/others", others, methods=GET, name="export others"),
]
# each collection's transparency log
LOG: Final = [
    Route("/log-key", log_key, methods=GET, name="log key"),
    Route("/c/{slug:path}/checkpoint", checkpoint, methods=GET, name="log checkpoint"),
    Route("/c/{slug:path}/consistency", consistency, methods=GET, name="log consistency"),
    Route("/c/{slug:path}/receipt/{event_id}", receipt, methods=GET, name="log receipt"),
    Route("/c/{slug:path}/tile/{tile:path}", tile, methods=GET, name="log tile"),
]
# Their slugs span slashes, so these also match paths of the log's tiles and the reading pages
# (`/c/x/claims/checkpoint`): they come first in the table and answer such a path, with the 404
# of a slug no collection has.
# A receipt's event id is one segment, so `/c/x/receipt/checkpoint` is the log's checkpoint
# route's (of the slug `x/receipt`, which no collection has).
ANSWERS_BEFORE: Final = {
    **{
        name: ("log tile", "claim", "evidence", "log receipt")
        for name in ("export", "export others", "annotations", "log checkpoint", "log consistency")
    },
    "log receipt": ("log tile", "claim", "evidence"),
}
