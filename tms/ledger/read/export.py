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
from tms.ledger.read.annotations import annotated_links
from tms.nostr.events import Event
from tms.rules.annotations import AnnotatedLink
from tms.rules.export_order import Membership, is_prelude, place
from tms.store.database import Connection, Pool
from tms.tlog.export_lines import checkpoint_line
from tms.types import (
    KIND_JOIN,
    KIND_LEAVE,
    KIND_MEMBER_CHANGE,
    KIND_MEMBERS,
    UNSCOPED,
    EventId,
    Slug,
)

EXPORT_BATCH: Final = 500  # rows fetched per round trip while streaming an export

# A membership change's line carries the body its `payload` tag hashes (sql/025).
_SQL_EXPORT: Final = f"""
    SELECT e.seq, e.id, e.pubkey, e.created_at, e.kind, e.tags, e.content, e.sig, b.body
    FROM events e
    -- joined on the collection too, so that on Citus it stays on the collection's shard
    LEFT JOIN member_changes b ON b.collection = e.collection AND b.id = e.id
        AND e.kind IN ({KIND_MEMBER_CHANGE}, {KIND_JOIN}, {KIND_LEAVE})
    WHERE e.collection = $1
    ORDER BY e.seq"""
_SQL_EXPORT_UNSCOPED: Final = f"""
    SELECT seq, id, pubkey, created_at, kind, tags, content, sig, NULL AS body FROM events
    WHERE collection = '{UNSCOPED}' AND pubkey = ANY($1::text[]) ORDER BY seq"""
_SQL_CHECKPOINT: Final = """
    SELECT size, note FROM tlog_checkpoints WHERE collection = $1 ORDER BY size DESC LIMIT 1"""
# The witnesses' cosignatures of that checkpoint (sql/023), appended to its note's signatures.
_SQL_COSIGNATURES: Final = """
    SELECT line FROM tlog_cosignatures WHERE collection = $1 AND size = $2 ORDER BY witness"""
_SQL_ENTRIES: Final = "SELECT event_id FROM tlog_leaves WHERE collection = $1 ORDER BY idx"
_SQL_OWNER: Final = "SELECT owner FROM collections WHERE slug = $1"
_SQL_FIRSTS: Final = (
    "SELECT pubkey, min(seq) AS first FROM events WHERE collection = $1 GROUP BY pubkey"
)
# The places of the profile and terms lines (`places`): read without their bodies.
_SQL_UNSCOPED_PLACES: Final = f"""
    SELECT seq, id, pubkey FROM events
    WHERE collection = '{UNSCOPED}' AND pubkey = ANY($1::text[]) ORDER BY seq"""
_SQL_ENTRY_SEQ: Final = """
    SELECT e.seq FROM tlog_leaves l JOIN events e ON e.collection = l.collection
        AND e.id = encode(l.event_id, 'hex')
    WHERE l.collection = $1 AND l.idx = $2"""
_SQL_ENTRY_BEFORE: Final = """
    SELECT id FROM events WHERE collection = $1 AND seq < $2 ORDER BY seq DESC LIMIT 1"""
_SQL_MEMBER_LISTS: Final = f"""
    SELECT e.seq, e.id, e.pubkey, e.created_at, e.kind, e.tags, e.content, b.body FROM events e
    LEFT JOIN member_changes b ON b.collection = e.collection AND b.id = e.id
    WHERE e.collection = $1
      AND e.kind IN ({KIND_MEMBERS}, {KIND_MEMBER_CHANGE}, {KIND_JOIN}, {KIND_LEAVE})
    ORDER BY e.seq"""


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
            owner = await conn.fetchval(_SQL_OWNER, slug)
            firsts = {r["pubkey"]: r["first"] for r in await conn.fetch(_SQL_FIRSTS, slug)}
            # the profile and terms lines, in the order they take among the entries
            # (`tms.rules.export_order`)
            placed = deque(
                sorted(
                    await conn.fetch(_SQL_EXPORT_UNSCOPED, list(firsts)),
                    key=lambda r: place(r["seq"], firsts[r["pubkey"]]),
                )
            )
            members = Membership(owner)
            cursor = conn.cursor(_SQL_EXPORT, slug, prefetch=EXPORT_BATCH)
            written = 0  # entries so far
            async for row in cursor:
                if upto is not None and written == upto[0]:
                    break
                written += 1
                while (
                    placed
                    and place(placed[0]["seq"], firsts[placed[0]["pubkey"]])[0] <= (row["seq"])
                ):
                    other = placed.popleft()
                    if is_prelude(other["seq"], firsts[other["pubkey"]]) or members.includes(
                        other["pubkey"]
                    ):
                        others.append((other["id"], entry))
                        yield _line(other)
                members.apply_row(row)
                entry = row["id"]
                yield _line(row)
            for row in placed if upto is None or written < upto[0] else ():
                prelude = is_prelude(row["seq"], firsts[row["pubkey"]])
                if not prelude and members.includes(row["pubkey"]):
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

    def annotated_links(self, readable: ReadableCollection) -> AsyncGenerator[AnnotatedLink, None]:
        """The collection's links with what their W3C annotations name, oldest first, from one
        snapshot (`tms.ledger.read.annotations`); closed by the caller, as `lines` is."""
        return annotated_links(self.pool, readable)

    async def places(
        self, readable: ReadableCollection, held: int, size: int
    ) -> list[tuple[EventId, EventId | None]]:
        """The profile and terms lines the export places after the log's first `held` entries
        and before its entry `size + 1` (or after its last), each with the entry it follows
        (None: the first), in the export's order, as its checkpoint line's `others` lists
        them: what a mirror holding `held` entries and verifying a checkpoint of `size` writes
        among the entries it appends (`GET /c/<slug>/others`). A few indexed reads, the keys'
        first entries aside: no event's body is read."""
        slug = readable.slug
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read"),
        ):
            low = await conn.fetchval(_SQL_ENTRY_SEQ, slug, held - 1) if held > 0 else None
            if held > 0 and low is None:
                raise LogError(f"the log of '{slug}' holds fewer than {held} entries")
            high = await conn.fetchval(_SQL_ENTRY_SEQ, slug, size)  # None: no entry past it
            owner = await conn.fetchval(_SQL_OWNER, slug)
            firsts = {r["pubkey"]: r["first"] for r in await conn.fetch(_SQL_FIRSTS, slug)}
            wanted = []
            for row in await conn.fetch(_SQL_UNSCOPED_PLACES, list(firsts)):
                key = place(row["seq"], firsts[row["pubkey"]])
                if (low is None or key[0] > low) and (high is None or key[0] < high):
                    wanted.append((key, row))
            wanted.sort(key=lambda pair: pair[0])
            lists = await conn.fetch(_SQL_MEMBER_LISTS, slug) if wanted else []
            members = Membership(owner)
            out: list[tuple[EventId, EventId | None]] = []
            for key, row in wanted:
                while lists and lists[0]["seq"] < key[0]:
                    members.apply_row(lists.pop(0))
                if is_prelude(row["seq"], firsts[row["pubkey"]]) or members.includes(row["pubkey"]):
                    out.append((row["id"], await conn.fetchval(_SQL_ENTRY_BEFORE, slug, key[0])))
            return out


async def _entries(conn: Connection, slug: Slug) -> list[EventId]:
    """The log's entries in order, read from the log itself (not from the events just
    exported), so that an export that lost an event is caught by its own last line."""
    return [
        row["event_id"].hex()
        async for row in conn.cursor(_SQL_ENTRIES, slug, prefetch=EXPORT_BATCH * 20)
    ]


def _line(row: asyncpg.Record) -> str:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # only profiles carry tags
    return Event(
        row["id"],
        row["pubkey"],
        row["created_at"],
        row["kind"],
        tags,
        row["content"],
        row["sig"],
        row["body"],
    ).to_json()
