"""Reading a collection's transparency log: its latest checkpoint, inclusion and consistency
proofs, and tiles in the C2SP tlog-tiles layout.

Every read takes the `ReadableCollection` that `tms.ledger.access` made when it checked the
caller, and every statement names that one collection. A proof is computed from the stored
perfect subtrees (sql/006): the ranges `tms.tlog.merkle` says it needs, their subtrees read in
one statement of index look-ups, so a proof costs the same at a million entries as at ten. Every
answer is bounded: at most 63 levels of hashes for a proof, 256 hashes for a tile.
"""

from __future__ import annotations

import base64
import json
from typing import Final

from tms.errors import LogError
from tms.ledger.access import ReadableCollection
from tms.ledger.log.cosigned import Cosigned
from tms.ledger.log.tree import STRIDE, TransparencyLog
from tms.nostr.events import Event
from tms.results import CheckpointInfo, ConsistencyProof, InclusionProof, ReceiptInfo
from tms.store.database import Connection, Pool
from tms.tlog import tiles
from tms.tlog.merkle import (
    Node,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    nodes_for,
    proof_hashes,
    rebuild,
    stored_below,
)
from tms.tlog.receipt import make_receipt
from tms.tlog.tiles import Tile
from tms.types import EventId, Slug

_SQL_LATEST: Final = """
    SELECT size, root, note FROM tlog_checkpoints WHERE collection = $1
    ORDER BY size DESC LIMIT 1"""
_SQL_AT: Final = "SELECT size, root, note FROM tlog_checkpoints WHERE collection = $1 AND size = $2"
# The latest checkpoint and the entry's leaf index, in one round trip.
_SQL_LATEST_AND_LEAF: Final = """
    SELECT size, root, note,
           (SELECT idx FROM tlog_leaves WHERE event_id = $2::bytea AND collection = $1) AS idx
    FROM tlog_checkpoints WHERE collection = $1 ORDER BY size DESC LIMIT 1"""
# One index look-up per subtree (a lateral join, so the plan can never become a scan): the
# perfect subtrees above the leaves from tlog_nodes, the leaves' entries from tlog_leaves.
_SQL_NODES: Final = """
    SELECT u.level, u.idx, n.hash AS value
    FROM unnest($2::smallint[], $3::bigint[]) AS u(level, idx)
    CROSS JOIN LATERAL (SELECT hash FROM tlog_nodes t
                        WHERE t.collection = $1 AND t.level = u.level AND t.idx = u.idx) AS n
    UNION ALL
    SELECT 0, l.idx, l.event_id
    FROM tlog_leaves l WHERE l.collection = $1 AND l.idx = ANY($4::bigint[])"""
# The event as signed, and its place in its collection's log.
_SQL_ENTRY: Final = """
    SELECT e.id, e.pubkey, e.created_at, e.kind, e.tags, e.content, e.sig, l.idx
    FROM tlog_leaves l JOIN events e ON e.collection = l.collection AND e.id = $3
    WHERE l.collection = $1 AND l.event_id = $2::bytea"""
_SQL_TILE_NODES: Final = """
    SELECT hash FROM tlog_nodes
    WHERE collection = $1 AND level = $2 AND idx >= $3 AND idx < $4 ORDER BY idx"""
_SQL_TILE_LEAVES: Final = """
    SELECT event_id FROM tlog_leaves
    WHERE collection = $1 AND idx >= $2 AND idx < $3 ORDER BY idx"""


class LogReads:
    """Read queries over every collection's log; builds a log not built yet when asked for."""

    def __init__(self, pool: Pool, log: TransparencyLog, cosigned: Cosigned | None = None) -> None:
        """`cosigned`: the witnesses' cosignatures (None: this server names no witnesses)."""
        self.pool = pool
        self.log = log
        self.cosigned = cosigned or Cosigned(pool, None)

    async def witnessed(self, readable: ReadableCollection) -> CheckpointInfo:
        """The checkpoint a member is shown (`tms.ledger.log.cosigned`): the newest meeting the
        witness policy's quorum, else the newest any witness cosigned, else the latest signed;
        with the cosignatures it carries and whether they make the quorum."""
        latest = await self.checkpoint(readable)
        if self.cosigned.policy is None:
            return {**latest, "witnessed_by": [], "quorum": None}
        best = await self.cosigned.best(readable.slug)
        if best is None:
            return {**latest, "witnessed_by": [], "quorum": False}
        info = self._info(readable.slug, best.size, best.root, best.note)
        return {**info, "witnessed_by": list(best.witnessed_by), "quorum": best.quorum}

    async def checkpoint(self, readable: ReadableCollection) -> CheckpointInfo:
        """The collection's latest signed checkpoint."""
        return await self._checkpoint(readable.slug)

    async def _checkpoint(self, slug: Slug) -> CheckpointInfo:
        row = await self.pool.fetchrow(_SQL_LATEST, slug)
        if row is None:  # stored before the log existed, and the back-fill is not there yet
            await self.log.build(slug)
            row = await self.pool.fetchrow(_SQL_LATEST, slug)
            if row is None:
                raise LogError(f"collection '{slug}' has no log yet: it has no events")
        return self._info(slug, row["size"], row["root"], row["note"])

    async def inclusion(
        self, readable: ReadableCollection, event_id: EventId
    ) -> InclusionProof | None:
        """Where the event sits in its collection's log, proved against the latest checkpoint;
        None if it is not an entry of that log."""
        slug = readable.slug
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(_SQL_LATEST_AND_LEAF, slug, bytes.fromhex(event_id))
            if row is None:  # a log not built yet: built now, then read again
                await self._checkpoint(slug)
                row = await conn.fetchrow(_SQL_LATEST_AND_LEAF, slug, bytes.fromhex(event_id))
            if row is None or row["idx"] is None:
                return None
            size, index = row["size"], row["idx"]
            checkpoint = self._info(slug, size, row["root"], row["note"])
            ranges = inclusion_ranges(index, size)
            hashes = await _hashes(conn, slug, nodes_for(ranges))
        return {
            "leaf_index": index,
            "tree_size": size,
            "hashes": [_b64(h) for h in proof_hashes(ranges, hashes)],
            "checkpoint": checkpoint,
        }

    async def receipt(self, readable: ReadableCollection, event_id: EventId) -> ReceiptInfo | None:
        """A C2SP tlog-proof receipt for one event of the collection (`tms.tlog.receipt`),
        proved against the checkpoint a member is shown (`witnessed`: with witnesses, the
        newest the quorum cosigned, its cosignatures in the note) when that checkpoint holds
        the event, else against the latest signed one (an event newer than any cosigned
        checkpoint: its receipt is cosigned once the witnesses have caught up). None if the
        event is not an entry of this collection's log."""
        slug = readable.slug
        shown = await self.witnessed(readable)  # builds a log not built yet
        row = await self.pool.fetchrow(_SQL_ENTRY, slug, bytes.fromhex(event_id), event_id)
        if row is None:
            return None
        index = row["idx"]
        checkpoint = shown
        if index >= shown["size"]:
            latest = await self._checkpoint(slug)
            quorum = None if shown.get("quorum") is None else False
            checkpoint = {**latest, "witnessed_by": [], "quorum": quorum}
        if index >= checkpoint["size"]:
            return None  # stored after the latest checkpoint was read: not proved yet
        size = checkpoint["size"]
        ranges = inclusion_ranges(index, size)
        async with self.pool.acquire() as conn:
            hashes = await _hashes(conn, slug, nodes_for(ranges))
        tags = [] if row["tags"] == "[]" else json.loads(row["tags"])
        event = Event(
            row["id"], row["pubkey"], row["created_at"], row["kind"], tags, row["content"],
            row["sig"],
        )  # fmt: skip
        return {
            "collection": slug,
            "event_id": event_id,
            "leaf_index": index,
            "tree_size": size,
            "witnessed_by": checkpoint.get("witnessed_by", []),
            "quorum": checkpoint.get("quorum"),
            "receipt": make_receipt(event, index, proof_hashes(ranges, hashes), checkpoint["note"]),
        }

    async def consistency(
        self, readable: ReadableCollection, old: int, new: int | None
    ) -> ConsistencyProof:
        """The proof that the log at `old` entries is a prefix of the log at `new` (default:
        the latest checkpoint's size), with the checkpoint signed at `new` if there is one."""
        slug = readable.slug
        latest = await self._checkpoint(slug)
        new = latest["size"] if new is None else new
        if not 0 <= old <= new <= latest["size"]:
            raise LogError(
                f"no consistency proof from {old} to {new} entries: the log of '{slug}' has "
                f"{latest['size']}; ask for 0 <= old_size <= new_size <= {latest['size']}"
            )
        ranges = consistency_ranges(old, new)
        async with self.pool.acquire() as conn:
            hashes = await _hashes(conn, slug, nodes_for(ranges))
            if new == latest["size"]:
                signed: CheckpointInfo | None = latest
            else:
                row = await conn.fetchrow(_SQL_AT, slug, new)
                signed = None if row is None else self._info(slug, new, row["root"], row["note"])
        return {
            "collection": slug,
            "old_size": old,
            "new_size": new,
            "hashes": [_b64(h) for h in proof_hashes(ranges, hashes)],
            "checkpoint": signed,
        }

    async def tile(self, readable: ReadableCollection, tile: Tile) -> bytes | None:
        """The tile's bytes (hashes, or an entry bundle), or None if the log does not hold it
        yet."""
        slug = readable.slug
        size = (await self._checkpoint(slug))["size"]
        if not tiles.available(tile, size):
            return None
        first, end = tile.first, tile.first + tile.width
        if tile.level >= 1:
            rows = await self.pool.fetch(_SQL_TILE_NODES, slug, tile.tree_level, first, end)
            data = [bytes(r["hash"]) for r in rows]
        else:
            rows = await self.pool.fetch(_SQL_TILE_LEAVES, slug, first, end)
            entries = [bytes(r["event_id"]) for r in rows]
            if tile.level == tiles.ENTRIES:
                return tiles.entry_bundle(entries) if len(entries) == tile.width else None
            data = [leaf_hash(entry) for entry in entries]
        return b"".join(data) if len(data) == tile.width else None

    def _info(self, slug: Slug, size: int, root: bytes, note: str) -> CheckpointInfo:
        return {
            "collection": slug,
            "origin": note.split("\n", 1)[0],
            "size": size,
            "root": _b64(root),
            "note": note,
        }


async def _hashes(conn: Connection, slug: Slug, nodes: set[Node]) -> dict[Node, bytes]:
    """The hashes of these perfect subtrees of the collection's tree, from the stored ones."""
    wanted = {below for node in nodes for below in stored_below(node, STRIDE)}
    above = sorted(node for node in wanted if node[0] > 0)
    leaves = sorted(index for level, index in wanted if level == 0)
    rows = await conn.fetch(
        _SQL_NODES, slug, [lv for lv, _ in above], [i for _, i in above], leaves
    )
    stored = {
        (r["level"], r["idx"]): leaf_hash(bytes(r["value"]))
        if r["level"] == 0
        else bytes(r["value"])
        for r in rows
    }
    try:
        return rebuild(nodes, stored, STRIDE)
    except KeyError as missing:
        raise LogError(f"the log of collection '{slug}' lacks the subtree {missing}") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
