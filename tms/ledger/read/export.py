"""A collection as JSON Lines: every event exactly as signed, so each line verifies on its own
with any Nostr library, and the file can be published again into a fresh ledger as it is.

Exports draw on a pool of their own (the runtime's `export_pool`): a download holds its
connection for as long as the client reads, and stalled downloads must never block publishing.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncGenerator
from typing import Final

import asyncpg

from tms.errors import LogError
from tms.ledger.access import ReadableCollection
from tms.nostr.events import Event
from tms.rules.publish import newer
from tms.store.database import Connection, Pool
from tms.tlog.export_lines import checkpoint_line
from tms.types import KIND_MEMBERS, UNSCOPED, EventId, PubKey, Slug

EXPORT_BATCH: Final = 500  # rows fetched per round trip while streaming an export

_SQL_EXPORT: Final = """
    SELECT seq, id, pubkey, created_at, kind, tags, content, sig FROM events
    WHERE collection = $1 ORDER BY seq"""
_SQL_EXPORT_UNSCOPED: Final = f"""
    SELECT seq, id, pubkey, created_at, kind, tags, content, sig FROM events
    WHERE collection = '{UNSCOPED}' AND pubkey = ANY($1::text[]) ORDER BY seq"""
_SQL_CHECKPOINT: Final = """
    SELECT size, note FROM tlog_checkpoints WHERE collection = $1 ORDER BY size DESC LIMIT 1"""
# The witnesses' cosignatures of that checkpoint (sql/023), appended to its note's signatures.
_SQL_COSIGNATURES: Final = """
    SELECT line FROM tlog_cosignatures WHERE collection = $1 AND size = $2 ORDER BY witness"""
_SQL_ENTRIES: Final = "SELECT event_id FROM tlog_leaves WHERE collection = $1 ORDER BY idx"


class Exporter:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def lines(
        self,
        readable: ReadableCollection,
        *,
        checkpoint: bool = False,
        upto: tuple[int, str] | None = None,
    ) -> AsyncGenerator[str, None]:
        """Every event of the collection, oldest first, one signed JSON line each, exactly as
        stored; streamed from a cursor, so memory stays flat whatever the size. It holds a
        pooled connection until exhausted or closed: callers close it (`aclosing`).

        With the collection's own events come the terms and profiles of the keys that wrote in
        it, so that the file can be published again as it is (every key signs the terms before
        its first write). Those a key signed before its first event here, perhaps while it
        belonged only to another collection, come right before that first event, after the
        member list that let it in; later ones come in ledger order, while the key belongs to
        this collection (one it signed after being removed would not be accepted on replay).

        With `checkpoint`, a last line holds the collection log's latest signed checkpoint, the
        log's entries (event ids in log order) and the ids of the profile and terms lines
        (`tms.tlog.export_lines.checkpoint_line`), all read from the same snapshot as the events, so
        that `tms verify-export` needs nothing but the file. The collection's log must exist
        (`LogReads.checkpoint` builds one not built yet).

        With `upto` (a checkpoint's size and its note, cosignatures included), the file ends at
        that checkpoint instead: the log's first `size` entries and the profile and terms lines
        before them, then its checkpoint line. So an export can end with the newest checkpoint
        the witnesses cosigned (`?checkpoint=cosigned`), which `tms verify-export --policy`
        accepts, however far the log has grown since."""
        slug = readable.slug
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read"),
        ):
            signed = upto
            if upto is None and checkpoint:
                row = await conn.fetchrow(_SQL_CHECKPOINT, slug)
                signed = None if row is None else (row["size"], row["note"])
            if checkpoint and signed is None:
                raise LogError(f"collection '{slug}' has no signed checkpoint yet")
            others: list[tuple[EventId, EventId | None]] = []  # with the entry before each
            entry: EventId | None = None
            owner = await conn.fetchval("SELECT owner FROM collections WHERE slug = $1", slug)
            firsts = {
                r["pubkey"]: r["first"]
                for r in await conn.fetch(
                    "SELECT pubkey, min(seq) AS first FROM events WHERE collection = $1 "
                    "GROUP BY pubkey",
                    slug,
                )
            }
            prelude: dict[PubKey, list[asyncpg.Record]] = {}
            later: deque[asyncpg.Record] = deque()
            for row in await conn.fetch(_SQL_EXPORT_UNSCOPED, list(firsts)):
                if row["seq"] < firsts[row["pubkey"]]:
                    prelude.setdefault(row["pubkey"], []).append(row)
                else:
                    later.append(row)
            members = _Membership(owner)
            cursor = conn.cursor(_SQL_EXPORT, slug, prefetch=EXPORT_BATCH)
            written = 0  # entries so far
            async for row in cursor:
                if upto is not None and written == upto[0]:
                    break
                written += 1
                while later and later[0]["seq"] < row["seq"]:
                    if members.includes(later[0]["pubkey"]):
                        others.append((later[0]["id"], entry))
                        yield _line(later[0])
                    later.popleft()
                for early in prelude.pop(row["pubkey"], ()):
                    others.append((early["id"], entry))
                    yield _line(early)
                members.apply(row)
                entry = row["id"]
                yield _line(row)
            for row in later if upto is None or written < upto[0] else ():
                if members.includes(row["pubkey"]):
                    others.append((row["id"], entry))
                    yield _line(row)
            if signed is not None:
                size, note = signed
                entries = await _entries(conn, slug)
                if upto is not None:
                    entries = entries[:size]
                if len(entries) != size:
                    raise LogError(
                        f"the log of '{slug}' holds {len(entries)} entries, not "
                        f"the {size} its checkpoint signs"
                    )
                if upto is None:  # `upto`'s note carries its cosignatures already
                    lines = await conn.fetch(_SQL_COSIGNATURES, slug, size)
                    note += "".join(f"{r['line']}\n" for r in lines)
                yield checkpoint_line(note, entries, others)


async def _entries(conn: Connection, slug: Slug) -> list[EventId]:
    """The log's entries in order, read from the log itself (not from the events just
    exported), so that an export that lost an event is caught by its own last line."""
    return [
        row["event_id"].hex()
        async for row in conn.cursor(_SQL_ENTRIES, slug, prefetch=EXPORT_BATCH * 20)
    ]


class _Membership:
    """Who belongs to one collection as its events stream by, by the replaceable rule."""

    def __init__(self, owner: PubKey | None) -> None:
        self.owner = owner
        self.members: set[PubKey] = set()
        self.head: tuple[int, EventId] | None = None

    def apply(self, row: asyncpg.Record) -> None:
        key = (row["created_at"], row["id"])
        if row["kind"] != KIND_MEMBERS or (self.head is not None and not newer(key, self.head)):
            return
        self.head = key
        self.members = set(json.loads(row["content"])["members"])

    def includes(self, pubkey: PubKey) -> bool:
        return pubkey == self.owner or pubkey in self.members


def _line(row: asyncpg.Record) -> str:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # only profiles carry tags
    return Event(
        row["id"], row["pubkey"], row["created_at"], row["kind"], tags, row["content"], row["sig"]
    ).to_json()
