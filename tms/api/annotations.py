"""`GET /c/<slug>/annotations.jsonld`: a collection's links as W3C Web Annotations, one
`AnnotationCollection` (`tms.rules.annotations` says what each annotation holds).

Read and sent as the export is: the caller proves membership first (NIP-98, or the login
cookie; a collection closed to the caller answers as a missing one), holds one of the export
slots for as long as the download lasts (one at a time per key, a few in all), and the body
streams from one snapshot in chunks made in the export's turn (`tms.guard.exports`), so memory
stays flat and other downloads and publishing keep going whatever the collection's size.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, aclosing
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tms.api.routes import (
    EXPORT_CHUNK_BYTES,
    GET,
    ClosingStreamingResponse,
    readable_by_caller,
    runtime_of,
)
from tms.guard.exports import Exports, ExportsBusy
from tms.http.origin import signed_origin
from tms.http.statuses import Refused
from tms.ledger import Exporter, ReadableCollection
from tms.pages.door import PRIVATE
from tms.rules.annotations import MEDIA_TYPE, PATH_TAIL, Collection, collection_of, pieces

NAME: Final = "annotations"


async def annotation_collection(request: Request) -> Response:
    """The collection's links as an `AnnotationCollection` (JSON-LD, the anno profile)."""
    readable = await readable_by_caller(request)
    runtime = runtime_of(request)
    name = f"{readable.slug}.annotations.jsonld"
    headers = {**PRIVATE, "Content-Disposition": f'attachment; filename="{name}"'}
    if request.method == "HEAD":
        return Response(media_type=MEDIA_TYPE, headers=headers)
    origin = signed_origin(request, request.app.state.settings.base_url)
    held = AsyncExitStack()
    try:
        await held.enter_async_context(runtime.exports.slot(readable.pubkey))
    except ExportsBusy as exc:
        raise Refused(503, str(exc), {"Retry-After": str(exc.retry_after)}) from None
    body = _chunked(document(runtime.exporter, readable, collection_of(origin, readable.slug)))
    return ClosingStreamingResponse(
        _paced(body, runtime.exports), media_type=MEDIA_TYPE, headers=headers, held=held
    )


async def document(
    exporter: Exporter, readable: ReadableCollection, collection: Collection
) -> AsyncGenerator[str, None]:
    """The document in pieces, read from one snapshot; closed by its consumer, it closes the
    read."""
    links = exporter.annotated_links(readable)
    async with aclosing(links):
        async for piece in pieces(collection, links):
            yield piece


async def _chunked(pieces: AsyncGenerator[str, None]) -> AsyncGenerator[bytes, None]:
    """The pieces gathered into chunks of about `EXPORT_CHUNK_BYTES`."""
    async with aclosing(pieces):
        chunk: list[bytes] = []
        size = 0
        async for piece in pieces:
            data = piece.encode()
            chunk.append(data)
            size += len(data)
            if size >= EXPORT_CHUNK_BYTES:
                yield b"".join(chunk)
                chunk, size = [], 0
        if chunk:
            yield b"".join(chunk)


async def _paced(
    chunks: AsyncGenerator[bytes, None], exports: Exports
) -> AsyncGenerator[bytes, None]:
    """Each chunk made in the export's turn on the exports' lane and paced after it, as the
    export's are; sending waits outside it."""
    async with aclosing(chunks):
        while True:
            async with exports.turn():
                chunk = await anext(chunks, None)
            if chunk is None:
                return
            yield chunk


# `path`, as the export's: a slug with a slash in it gets the same 404 as any other bad slug.
ROUTES: Final = [
    Route(f"/c/{{slug:path}}/{PATH_TAIL}", annotation_collection, methods=GET, name=NAME)
]
