"""Each collection's transparency log, as the ledger writes it: extended in the publish
transaction, under the collection's lock, and sealed with a signed checkpoint.

`TransparencyLog.extend` is the publish hook. For the collections a batch wrote it reads, in
one statement, the last checkpoint and the frontier of the tree it signed (the perfect
subtrees the tree's size is made of, sql/006); appends the batch's events in order (their
`seq` order: one batch's events are inserted in batch order, and batches of one collection are
serialized by its lock); checks that a consistency proof from the last checkpoint to the new
tree holds, refusing to sign otherwise; signs; and writes the leaves, the completed subtrees and
the checkpoint in one more statement. Two round trips, whatever the batch holds; batches of one
collection written one after another in one transaction each find the one before.

A collection whose events were stored before the log existed gets its tree once, in `seq`
order: by `backfill` in the background at start-up, or, if a publish or a read reaches it
first, right there under the same lock (so whichever comes first builds it, and the order can
never be wrong). Publishing does not wait for the whole back-fill: only a collection not yet
built waits for its own.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Sequence
from typing import Final

from tms.errors import LogError
from tms.results import CheckpointInfo
from tms.rules.publish import Parsed
from tms.store.database import Connection, Pool
from tms.tlog.merkle import (
    EMPTY_ROOT,
    CompactRange,
    Node,
    consistency_ranges,
    frontier,
    leaf_hash,
    proof_hashes,
    rebuild,
    verify_consistency,
)
from tms.tlog.note import LogSigner
from tms.types import EventId, Slug

log = logging.getLogger(__name__)

BUILD_CHUNK: Final = 20_000  # entries hashed and written at once while a tree is built whole

# The lock `tms.ledger.writes.lock` takes for a collection: building a tree outside a publish
# must wait for publishes to the same collection, and they for it.
SQL_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))"

# The tree stores the leaves and one level of perfect subtrees in STRIDE (sql/006): a fifth of
# the rows every level would take, while a subtree between two stored levels is at most 2**3
# stored ones away. Tiles read the levels divisible by 8, all stored.
STRIDE: Final = 4

# Each collection's last checkpoint and what its frontier is made of: for each bit b of the
# size, the perfect subtree (b, (size >> b) - 1), as the stored nodes below it (at the level
# b - b % STRIDE; at level 0, the leaves' entries). A collection without a checkpoint has no row.
_SQL_STATE: Final = f"""
    SELECT s.collection, c.size, c.root, f.bit, d.idx, d.value
    FROM unnest($1::text[]) AS s(collection)
    CROSS JOIN LATERAL (SELECT size, root FROM tlog_checkpoints t
                        WHERE t.collection = s.collection ORDER BY size DESC LIMIT 1) AS c
    CROSS JOIN LATERAL generate_series(0, 62) AS f(bit)
    CROSS JOIN LATERAL (
        SELECT f.bit - f.bit % {STRIDE} AS base,
               ((c.size >> f.bit) - 1) << (f.bit % {STRIDE}) AS first,
               1 << (f.bit % {STRIDE}) AS count) AS r
    LEFT JOIN LATERAL (  -- a missing one leaves its row, so that _Tree names what is missing
        SELECT l.idx, l.event_id AS value FROM tlog_leaves l
        WHERE r.base = 0 AND l.collection = s.collection
          AND l.idx >= r.first AND l.idx < r.first + r.count
        UNION ALL
        SELECT n.idx, n.hash FROM tlog_nodes n
        WHERE r.base > 0 AND n.collection = s.collection AND n.level = r.base
          AND n.idx >= r.first AND n.idx < r.first + r.count) AS d ON true
    WHERE (c.size >> f.bit) & 1 = 1"""
_SQL_HISTORY: Final = "SELECT id FROM events WHERE collection = $1 ORDER BY seq"
# What a collection held before a batch (whose events are the last it stored, under its lock).
_SQL_BEFORE: Final = """
    SELECT id FROM events WHERE collection = $1
      AND seq < coalesce((SELECT min(seq) FROM events WHERE id = ANY($2::text[])),
                         9223372036854775807)
    ORDER BY seq"""
_SQL_WRITE: Final = """
    WITH leaves AS (
        INSERT INTO tlog_leaves (collection, idx, event_id)
        SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])),
    nodes AS (
        INSERT INTO tlog_nodes (collection, level, idx, hash)
        SELECT * FROM unnest($4::text[], $5::smallint[], $6::bigint[], $7::bytea[])),
    checkpoints AS (
        INSERT INTO tlog_checkpoints (collection, size, root, note)
        SELECT * FROM unnest($8::text[], $9::bigint[], $10::bytea[], $11::text[]))
    SELECT 1"""
_SQL_UNBUILT: Final = """
    SELECT slug FROM collections c
    WHERE NOT EXISTS (SELECT 1 FROM tlog_checkpoints t WHERE t.collection = c.slug)
    ORDER BY slug"""
_SQL_NEWEST_NOTE: Final = "SELECT note FROM tlog_checkpoints ORDER BY signed_at DESC LIMIT 1"
_SQL_HAS_CHECKPOINT: Final = "SELECT EXISTS (SELECT 1 FROM tlog_checkpoints WHERE collection = $1)"


class TransparencyLog:
    """Writes every collection's log; signs with `signer`."""

    def __init__(self, pool: Pool, signer: LogSigner) -> None:
        self.pool = pool
        self.signer = signer

    async def extend(
        self, conn: Connection, accepted: Sequence[Parsed]
    ) -> dict[Slug, CheckpointInfo]:
        """The publish hook: add the batch's accepted events to their collections' logs, in
        the transaction that stored them, and return each collection's new checkpoint."""
        added: dict[Slug, list[EventId]] = {}
        for parsed in accepted:
            if parsed.collection is not None:
                added.setdefault(parsed.collection, []).append(parsed.event.id)
        if not added:
            return {}
        trees = await _state(conn, sorted(added))
        rows = _Rows()
        for slug, ids in added.items():
            tree = trees.get(slug)
            if tree is None:  # no checkpoint yet: what it held before, then this batch
                tree = _Tree(slug, 0, EMPTY_ROOT, {})
                ids = [row["id"] for row in await conn.fetch(_SQL_BEFORE, slug, ids)] + ids
            tree.add(ids, rows)
            tree.seal(self.signer, rows)
        await rows.write(conn)
        return {info["collection"]: info for info in rows.sealed}

    async def build(self, slug: Slug) -> bool:
        """Build the log of a collection that has none yet, from its events in `seq` order, in
        a transaction of its own under the collection's lock. False if it had one already (or
        has no events)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(SQL_LOCK, slug)
            if await conn.fetchval(_SQL_HAS_CHECKPOINT, slug):
                return False
            tree = _Tree(slug, 0, EMPTY_ROOT, {})
            rows = _Rows()
            chunk: list[EventId] = []
            async for row in conn.cursor(_SQL_HISTORY, slug, prefetch=BUILD_CHUNK):
                chunk.append(row["id"])
                if len(chunk) == BUILD_CHUNK:  # hashed off the event loop, written, let go
                    await asyncio.to_thread(tree.add, chunk, rows)
                    await rows.write(conn)
                    rows, chunk = _Rows(), []
            tree.add(chunk, rows)
            if tree.size == 0:
                return False
            tree.seal(self.signer, rows)
            await rows.write(conn)
            return True

    async def check_key(self) -> bool:
        """Whether the newest stored checkpoint was signed by this server's key. A key that
        changed (TMS_LOG_KEY, or the data directory's log-key lost) is logged loudly: members
        holding the old verifier key can no longer check new checkpoints, and older ones no
        longer verify with GET /log-key."""
        note = await self.pool.fetchval(_SQL_NEWEST_NOTE)
        if note is None:
            return True
        try:
            self.signer.key.verifier().open(note)
        except LogError:
            log.warning(
                "the newest checkpoint stored was not signed by this server's log key (%s): was "
                "TMS_LOG_KEY changed, or TMS_DATA_DIR/log-key lost? Members need the new "
                "verifier key, and keep the old one for checkpoints signed before",
                self.signer.key.verifier().encode(),
            )
            return False
        return True

    async def backfill(self) -> int:
        """Give every collection stored before the log existed its tree, one collection per
        transaction; how many were built. Run once at start-up, in the background."""
        built = 0
        for row in await self.pool.fetch(_SQL_UNBUILT):
            if await self.build(row["slug"]):
                built += 1
                log.info("transparency log built for collection %s", row["slug"])
        return built


class _Tree:
    """One collection's tree as a transaction extends it: its frontier, and, while the tree
    that was signed last is not empty, every hash a consistency proof from it may need."""

    def __init__(self, slug: Slug, size: int, root: bytes, stored: dict[Node, bytes]) -> None:
        self.slug = slug
        self.old_size = size
        self.old_root = root
        try:
            nodes = rebuild(frontier(size), stored, STRIDE)
        except KeyError as missing:
            raise LogError(
                f"the log of collection '{slug}' lacks the subtree {missing} its last checkpoint "
                f"(size {size}) rests on: nothing more is signed until an operator looks"
            ) from None
        self.range = CompactRange.of(size, nodes)
        self.known = nodes if size else {}

    @property
    def size(self) -> int:
        return self.range.size

    def add(self, ids: Sequence[EventId], rows: _Rows) -> None:
        """Append events (ids in `seq` order) and record the rows that store them."""
        start = self.range.size
        entries = [bytes.fromhex(event_id) for event_id in ids]
        leaves = [leaf_hash(entry) for entry in entries]
        completed = self.range.append(leaves)
        rows.leaves(self.slug, start, entries)
        rows.nodes(self.slug, [(node, h) for node, h in completed if node[0] % STRIDE == 0])
        if self.old_size:  # kept for the consistency proof: a batch's worth at most
            self.known.update(((0, start + i), h) for i, h in enumerate(leaves))
            self.known.update(completed)

    def seal(self, signer: LogSigner, rows: _Rows) -> None:
        """Sign the new checkpoint, and record it; only once a consistency proof from the last
        one holds: a log must never sign a tree that does not extend what it signed before."""
        size, root = self.range.size, self.range.root()
        if self.old_size:
            ranges = consistency_ranges(self.old_size, size)
            proof = proof_hashes(ranges, self.known)
            if not verify_consistency(self.old_size, size, self.old_root, root, proof):
                raise LogError(
                    f"the log of collection '{self.slug}' no longer extends its checkpoint of "
                    f"size {self.old_size}: nothing more is signed until an operator looks"
                )
        note = signer.sign(self.slug, size, root)
        rows.checkpoint(self.slug, size, root, note)
        rows.sealed.append(
            {
                "collection": self.slug,
                "origin": signer.origin(self.slug),
                "size": size,
                "root": base64.b64encode(root).decode("ascii"),
                "note": note,
            }
        )


class _Rows:
    """The rows one write statement inserts, as arrays (one `unnest` per table)."""

    def __init__(self) -> None:
        self.leaf_rows: tuple[list[str], list[int], list[bytes]] = ([], [], [])
        self.node_rows: tuple[list[str], list[int], list[int], list[bytes]] = ([], [], [], [])
        self.checkpoint_rows: tuple[list[str], list[int], list[bytes], list[str]] = ([], [], [], [])
        self.sealed: list[CheckpointInfo] = []

    def leaves(self, slug: Slug, start: int, entries: Sequence[bytes]) -> None:
        collections, indexes, event_ids = self.leaf_rows
        collections.extend([slug] * len(entries))
        indexes.extend(range(start, start + len(entries)))
        event_ids.extend(entries)

    def nodes(self, slug: Slug, completed: Sequence[tuple[Node, bytes]]) -> None:
        collections, levels, indexes, hashes = self.node_rows
        for (level, index), value in completed:
            collections.append(slug)
            levels.append(level)
            indexes.append(index)
            hashes.append(value)

    def checkpoint(self, slug: Slug, size: int, root: bytes, note: str) -> None:
        for column, value in zip(self.checkpoint_rows, (slug, size, root, note), strict=True):
            column.append(value)  # type: ignore[attr-defined]

    async def write(self, conn: Connection) -> None:
        await conn.execute(_SQL_WRITE, *self.leaf_rows, *self.node_rows, *self.checkpoint_rows)


async def _state(conn: Connection, slugs: list[Slug]) -> dict[Slug, _Tree]:
    """Each collection's tree as its last checkpoint left it (absent: none yet)."""
    found: dict[Slug, tuple[int, bytes, dict[Node, bytes]]] = {}
    for row in await conn.fetch(_SQL_STATE, slugs):
        size, bit, value = row["size"], row["bit"], row["value"]
        _, _, stored = found.setdefault(row["collection"], (size, bytes(row["root"]), {}))
        if value is not None:
            base = bit - bit % STRIDE
            stored[(base, row["idx"])] = leaf_hash(value) if base == 0 else bytes(value)
    return {slug: _Tree(slug, *state) for slug, state in found.items()}
