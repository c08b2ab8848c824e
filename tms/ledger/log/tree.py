"""Each collection's transparency log, as the ledger writes it: extended in the publish
transaction, under the collection's lock, and sealed with a signed checkpoint.

`TransparencyLog.prepare` is the publish hook. For the collections a batch touches, the
publish's snapshot statement also reads (`STATE_SQL`) the last checkpoint and the frontier of
the tree it signed (the perfect subtrees the tree's size is made of, sql/006); the hook appends
the batch's accepted events in order (their `seq` order: one batch's events are inserted in
batch order, and batches of one collection are serialized by its lock); checks that a
consistency proof from the last checkpoint to the new tree holds, refusing to sign otherwise;
signs; and hands the publish's write statement the leaves, the completed subtrees and the
checkpoint to insert (`LogRows.rows`). No round trip of its own, whatever the batch holds,
once the log's origin is settled (below). `extend` does the same in two round trips, for a
transaction that is not a publish.

The origin every checkpoint names, `<host>/c/<slug>`, is the database's, not the settings':
the host is recorded (sql/018 `tlog_origin`) by the first publish that signs a checkpoint,
with the host the server was configured with (`Settings.log_host`), and every later checkpoint
names the recorded one, whatever `TMS_BASE_URL` says by then. A checkpoint a member kept
names it too, so it keeps verifying against later ones (`tms verify-export` wants one origin
per log). Until a process has seen the row committed, its signing publishes read it first
(one round trip, two when they record it); `check_origin`, at start, reads it once and says
loudly when the configured host differs.

A collection whose events were stored before the log existed gets its tree once, in `seq`
order: by `backfill` in the background at start-up, or, if a publish or a read reaches it
first, right there under the same lock (so whichever comes first builds it, and the order can
never be wrong). Publishing does not wait for the whole back-fill: only a collection not yet
built waits for its own.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from tms.errors import LogError
from tms.ledger.locks import hold_locks
from tms.ledger.statement import Rows, Statement
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
from tms.tlog.note import THROWAWAY_HOST, LogSigner
from tms.types import EventId, Slug

log = logging.getLogger(__name__)

BUILD_CHUNK: Final = 20_000  # entries hashed and written at once while a tree is built whole

# The tree stores the leaves and one level of perfect subtrees in STRIDE (sql/006): a fifth of
# the rows every level would take, while a subtree between two stored levels is at most 2**3
# stored ones away. Tiles read the levels divisible by 8, all stored.
STRIDE: Final = 4

# Each collection's last checkpoint and what its frontier is made of: for each bit b of the
# size, the perfect subtree (b, (size >> b) - 1), as the stored nodes below it (at the level
# b - b % STRIDE; at level 0, the leaves' entries). A collection without a checkpoint has no row.
_SQL_STATE_ROWS: Final = f"""
    SELECT s.collection, c.size, c.root, f.bit, d.idx, d.value
    FROM unnest({{collections}}) AS s(collection)
    CROSS JOIN LATERAL (SELECT size, root FROM tlog_checkpoints t
                        WHERE t.collection = s.collection AND t.collection = ANY({{collections}})
                        ORDER BY size DESC LIMIT 1) AS c
    CROSS JOIN LATERAL generate_series(0, 62) AS f(bit)
    CROSS JOIN LATERAL (
        SELECT f.bit - f.bit % {STRIDE} AS base,
               ((c.size >> f.bit) - 1) << (f.bit % {STRIDE}) AS first,
               1 << (f.bit % {STRIDE}) AS count) AS r
    LEFT JOIN LATERAL (  -- a missing one leaves its row, so that _Tree names what is missing
        SELECT l.idx, l.event_id AS value FROM tlog_leaves l
        WHERE r.base = 0 AND l.collection = s.collection AND l.collection = ANY({{collections}})
          AND l.idx >= r.first AND l.idx < r.first + r.count
        UNION ALL
        SELECT n.idx, n.hash FROM tlog_nodes n
        WHERE r.base > 0 AND n.collection = s.collection AND n.collection = ANY({{collections}})
          AND n.level = r.base
          AND n.idx >= r.first AND n.idx < r.first + r.count) AS d ON true
    WHERE (c.size >> f.bit) & 1 = 1"""
_SQL_STATE: Final = _SQL_STATE_ROWS.format(collections="$1::text[]")
# The same rows as one JSON value, for the publish's snapshot statement (binary as base64).
STATE_SQL: Final = f"""(
    SELECT json_agg(json_build_array(collection, size, encode(root, 'base64'), bit, idx,
                                     encode(value, 'base64')))
    FROM ({_SQL_STATE_ROWS}) AS state)"""
_SQL_HISTORY: Final = "SELECT id FROM events WHERE collection = $1 ORDER BY seq"
# What a collection held before a batch (whose events are not stored yet, or the last it stored:
# under its lock either way).
_SQL_BEFORE: Final = """
    SELECT id FROM events WHERE collection = $1
      AND seq < coalesce((SELECT min(seq) FROM events
                          WHERE collection = $1 AND id = ANY($2::text[])),
                         9223372036854775807)
    ORDER BY seq"""
# The columns of the log's three tables and their types, for their inserts (`LogRows.rows`).
_LEAF_COLUMNS: Final = (("collection", "text"), ("idx", "bigint"), ("event_id", "bytea"))
_NODE_COLUMNS: Final = (
    *(("collection", "text"), ("level", "smallint"), ("idx", "bigint"), ("hash", "bytea")),
)
_CP_COLUMNS: Final = (
    *(("collection", "text"), ("size", "bigint"), ("root", "bytea"), ("note", "text")),
)
# Collections with no checkpoint: read from each collection's counts row (sql/009: every
# collection has one from its creation), which sits beside its log (on Citus, on one worker:
# a question each worker answers for its own collections).
_SQL_UNBUILT: Final = """
    SELECT n.collection AS slug FROM collection_counts n
    WHERE NOT EXISTS (SELECT 1 FROM tlog_checkpoints t WHERE t.collection = n.collection)
    ORDER BY 1"""
_SQL_NEWEST_NOTE: Final = "SELECT note FROM tlog_checkpoints ORDER BY signed_at DESC LIMIT 1"
_SQL_HAS_CHECKPOINT: Final = "SELECT EXISTS (SELECT 1 FROM tlog_checkpoints WHERE collection = $1)"
_SQL_ORIGIN: Final = "SELECT host FROM tlog_origin"  # sql/018: one row, or none yet
_SQL_RECORD_ORIGIN: Final = "INSERT INTO tlog_origin (host) VALUES ($1) ON CONFLICT DO NOTHING"


class TransparencyLog:
    """Writes every collection's log; signs with `signer`."""

    def __init__(self, pool: Pool, signer: LogSigner) -> None:
        self.pool = pool
        self.signer = signer  # its host becomes the recorded one (`_adopt`)
        self.configured = signer.host  # what the settings asked for
        self.settled = False  # whether the recorded host was seen committed

    @property
    def records_origin(self) -> bool:
        """Whether a signing publish may still have to record the origin (`_origin`): its
        write must then share a transaction with the checkpoints it signs."""
        return not self.settled and self.configured != THROWAWAY_HOST

    def _adopt(self, host: str) -> None:
        if host != self.signer.host:
            self.signer = dataclasses.replace(self.signer, host=host)

    async def _origin(self, conn: Connection) -> None:
        """Make sure the checkpoints about to be signed in `conn`'s transaction name the
        database's origin: the recorded host, or, when none is, this server's, recorded in the
        same transaction (so that a publish that fails records nothing). Another server
        recording at the same moment makes this one wait and take its host: the row is one."""
        if self.settled:
            return
        host = await conn.fetchval(_SQL_ORIGIN)
        if host is not None:  # committed by an earlier transaction: it stays
            self._adopt(host)
            self.settled = True
            return
        if self.configured == THROWAWAY_HOST:  # an operator command's or a test's: never kept
            return
        await conn.execute(_SQL_RECORD_ORIGIN, self.configured)
        self._adopt(await conn.fetchval(_SQL_ORIGIN))

    async def check_origin(self) -> str | None:
        """At start: take the recorded origin, if any, and say loudly when the configured one
        differs (the recorded one is kept: changing it would disown every checkpoint signed).
        Returns the recorded host (None: no checkpoint signed yet; the first records this
        server's)."""
        host: str | None = await self.pool.fetchval(_SQL_ORIGIN)
        if host is None:
            log.info(
                "no checkpoint signed yet: the first will record the log origin %s/c/<slug>",
                self.configured,
            )
            return None
        self._adopt(host)
        self.settled = True
        if host != self.configured:
            log.warning(
                "the transparency logs' origin recorded in the database is %s/c/<slug>, but this "
                "server is configured for %s/c/<slug> (TMS_BASE_URL, else TMS_HOST or --host): "
                "checkpoints keep naming %s, so that those members kept still verify; "
                "see docs/transparency-log.md, 'Choosing the origin'",
                host,
                self.configured,
                host,
            )
        return host

    async def prepare(
        self, conn: Connection, accepted: Sequence[Parsed], state: list[list[Any]] | None
    ) -> LogRows:
        """The publish hook: the rows that add a batch's accepted events to their collections'
        logs, and each collection's new checkpoint, signed; `state` is what `STATE_SQL` read
        for (at least) those collections in this transaction, under their locks. The rows are
        written by the statement that stores the events: until then, nothing is stored."""
        added: dict[Slug, list[EventId]] = {}
        for parsed in accepted:
            if parsed.collection is not None:
                added.setdefault(parsed.collection, []).append(parsed.event.id)
        rows = LogRows()
        if not added:
            return rows
        await self._origin(conn)
        trees = _trees(_decoded(state or ()))
        for slug, ids in added.items():
            tree = trees.get(slug)
            if tree is None:  # no checkpoint yet: what it held before, then this batch
                tree = _Tree(slug, 0, EMPTY_ROOT, {})
                ids = [row["id"] for row in await conn.fetch(_SQL_BEFORE, slug, ids)] + ids
            tree.add(ids, rows)
            tree.seal(self.signer, rows)
        return rows

    async def extend(
        self, conn: Connection, accepted: Sequence[Parsed]
    ) -> dict[Slug, CheckpointInfo]:
        """`prepare` and write, for events already stored in this transaction: each
        collection's new checkpoint."""
        slugs = sorted({p.collection for p in accepted if p.collection is not None})
        state = [list(row) for row in await conn.fetch(_SQL_STATE, slugs)]
        rows = await self.prepare(conn, accepted, state)
        await rows.write(conn)
        return rows.checkpoints()

    async def build(self, slug: Slug) -> bool:
        """Build the log of a collection that has none yet, from its events in `seq` order, in
        a transaction of its own under the collection's lock. False if it had one already (or
        has no events)."""
        async with self.pool.acquire() as conn, conn.transaction():
            # Building a tree outside a publish waits for publishes to the collection, and
            # they for it: the lock a publish takes.
            await hold_locks(conn, [slug])
            if await conn.fetchval(_SQL_HAS_CHECKPOINT, slug):
                return False
            tree = _Tree(slug, 0, EMPTY_ROOT, {})
            rows = LogRows()
            chunk: list[EventId] = []
            async for row in conn.cursor(_SQL_HISTORY, slug, prefetch=BUILD_CHUNK):
                chunk.append(row["id"])
                if len(chunk) == BUILD_CHUNK:  # hashed off the event loop, written, let go
                    await asyncio.to_thread(tree.add, chunk, rows)
                    await rows.write(conn)
                    rows, chunk = LogRows(), []
            tree.add(chunk, rows)
            if tree.size == 0:
                return False
            await self._origin(conn)
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
            ).refused_as(None) from None  # the server's fault, not the caller's refusal
        self.range = CompactRange.of(size, nodes)
        self.known = nodes if size else {}

    @property
    def size(self) -> int:
        return self.range.size

    def add(self, ids: Sequence[EventId], rows: LogRows) -> None:
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

    def seal(self, signer: LogSigner, rows: LogRows) -> None:
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
                ).refused_as(None)  # the server's fault, not the caller's refusal
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


class LogRows:
    """The rows one write statement inserts, as columns (one source of rows per table), and
    the checkpoints they seal."""

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

    def checkpoints(self) -> dict[Slug, CheckpointInfo]:
        return {info["collection"]: info for info in self.sealed}

    async def write(self, conn: Connection) -> None:
        """The rows, in a statement of their own (building a tree outside a publish)."""
        statement = Statement()
        for n, rows in enumerate(self.rows()):
            statement.insert(f"tlog_{n}", rows)
        if statement.parts:
            await conn.execute(statement.sql(), *statement.args)

    def rows(self) -> list[Rows]:
        """The rows of each of the log's tables that has some, for a write (the publish's, or
        `write`'s)."""
        tables = (
            ("tlog_leaves", _LEAF_COLUMNS, self.leaf_rows),
            ("tlog_nodes", _NODE_COLUMNS, self.node_rows),
            ("tlog_checkpoints", _CP_COLUMNS, self.checkpoint_rows),
        )
        return [
            Rows(table, columns, list(zip(*rows, strict=True)))
            for table, columns, rows in tables
            if rows[0]
        ]


def _decoded(state: Iterable[Sequence[Any]]) -> Iterator[tuple[Slug, int, bytes, int, int, Any]]:
    """`STATE_SQL`'s JSON rows as `_SQL_STATE`'s (binary values arrive in base64 there)."""
    for slug, size, root, bit, idx, value in state:
        if isinstance(root, str):
            root = base64.b64decode(root)
            value = None if value is None else base64.b64decode(value)
        yield slug, size, root, bit, idx, value


def _trees(state: Iterable[tuple[Slug, int, bytes, int, int, Any]]) -> dict[Slug, _Tree]:
    """Each collection's tree as its last checkpoint left it (absent: none yet)."""
    found: dict[Slug, tuple[int, bytes, dict[Node, bytes]]] = {}
    for slug, size, root, bit, idx, value in state:
        _, _, stored = found.setdefault(slug, (size, bytes(root), {}))
        if value is not None:
            base = bit - bit % STRIDE
            stored[(base, idx)] = leaf_hash(value) if base == 0 else bytes(value)
    return {slug: _Tree(slug, *found_state) for slug, found_state in found.items()}
