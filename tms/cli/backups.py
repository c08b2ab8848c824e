"""`tms collections` and `tms export`: what a backup needs, from the database whether or not the
server is running. `collections` lists every collection (or, with `--slugs`, the names a backup
loop exports); `export` writes one collection as JSON Lines on stdout, with `--checkpoint` ending
with the signed line that `tms verify-export` checks it against, or with `--format annotations`
its links as W3C Web Annotations, the document `GET /c/<slug>/annotations.jsonld` serves."""

from __future__ import annotations

import os
import sys
from contextlib import aclosing
from datetime import datetime
from typing import Final

from tms.cli.database import open_ledger
from tms.cli.notation import utc
from tms.nostr import nip19

FORMATS: Final = ("jsonl", "annotations")  # `tms export --format`; jsonl the default
COLUMNS: Final = (
    "slug", "owner", "evidence", "claims", "links", "contradictions", "members", "created",
)  # fmt: skip


async def collections(slugs_only: bool) -> int:
    """Every collection, as an aligned table under a header (or the slugs alone)."""
    async with open_ledger() as ledger:
        found = await ledger.collections()
    if not found:
        print(
            "tms: no collections yet (an approved key creates one by naming a new slug)",
            file=sys.stderr,
        )
        return 0
    if slugs_only:
        for row in found:
            print(row.slug)
        return 0
    table = [COLUMNS] + [
        (
            row.slug,
            nip19.npub_encode(row.owner),
            *(f"{n:,}" for n in (row.evidence, row.claims, row.links, row.contradictions)),
            f"{row.members:,}",
            utc(datetime.fromisoformat(row.created_at)),
        )
        for row in found
    ]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS))]
    for cells in table:
        print(
            "  ".join(
                _aligned(cell, width, i)
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    return 0


def _aligned(cell: str, width: int, column: int) -> str:
    """Counts to the right, text to the left."""
    return cell.rjust(width) if 2 <= column <= 6 else cell.ljust(width)


async def export(slug: str, checkpoint: bool, form: str = "jsonl") -> int:
    """The collection's JSON Lines on stdout, streamed from one consistent snapshot; with
    `checkpoint`, ending with the log's signed checkpoint line (`tms verify-export`). With
    `form` "annotations", its links as one W3C `AnnotationCollection` instead, its IRI the URL
    this server serves it at (`TMS_BASE_URL`, else `http://TMS_HOST:TMS_PORT`)."""
    from tms.config import Settings
    from tms.ledger import Access, Exporter
    from tms.rules.annotations import collection_of, pieces
    from tms.rules.content import SLUG_PATTERN

    if checkpoint and form == "annotations":
        print("tms: --checkpoint goes with the JSON Lines export only", file=sys.stderr)
        return 2

    out = sys.stdout.buffer
    try:
        async with open_ledger() as ledger:
            if not SLUG_PATTERN.fullmatch(slug) or not await ledger.collection_exists(slug):
                print(f"tms: no such collection {slug!r}", file=sys.stderr)
                return 1
            readable = Access(ledger.pool).unsafe_for_operator(slug)
            if form == "annotations":
                settings = Settings.from_env()
                origin = settings.base_url or f"http://{settings.host}:{settings.port}"
                links = Exporter(ledger.pool).annotated_links(readable)
                async with aclosing(links):
                    async for piece in pieces(collection_of(origin, slug), links):
                        out.write(piece.encode())
                out.flush()
                return 0
            if checkpoint:
                await ledger.log.build(slug)  # if the start-up back-fill has not reached it
            lines = Exporter(ledger.pool).lines(readable, checkpoint=checkpoint)
            async with aclosing(lines):
                async for line in lines:
                    out.write(f"{line}\n".encode())
        out.flush()
    except BrokenPipeError:  # the reader went away (`tms export x | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
