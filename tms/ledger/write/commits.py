"""Group commit: batches for the same collections that arrive while a transaction runs are
judged together in the next one.

Publishes to one collection are serialized by its lock, so each used to wait for the ones before
it to take the lock, read, write and commit in turn. Here they wait in a queue instead (one per
set of lock keys, a "lane"), and the lane's task takes everything waiting at once: one lock,
one snapshot of what all the batches touch, every batch judged in arrival order against the
state the ones before it left (a refused batch leaves nothing behind: `judge` takes back what it
changed), one write for all that passed, committed as one (`tms.ledger.write.writes` says how).
Each caller still gets its own answer: its batch accepted whole, or its own refusal; the others
are not touched by it. An acknowledged event is committed: no caller hears "accepted" before
the commit.

Should the group's write fail for any reason but a lost database, its batches are tried again
one by one, each written on its own, so that an error rolls back only the batch that causes
it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tms.errors import PublishError, is_database_down
from tms.ledger.locks import lock_keys
from tms.ledger.log.tree import STATE_SQL, TransparencyLog
from tms.ledger.write import claim_keys, routed, snapshots, writes
from tms.ledger.write.snapshots import OffLoop
from tms.results import CheckpointInfo
from tms.rules.expected import Expected, check_expected
from tms.rules.publish import Parsed, Plan, Ref, Snapshot, judge
from tms.store import citus
from tms.store.database import Connection, Pool
from tms.types import Slug

MAX_GROUP_BATCHES: Final = 1000
MAX_GROUP_EVENTS: Final = 2000  # a group stops growing here (one batch may be 1,000 alone)


# A batch's plan, with the checkpoints its transaction signed (its group's: they cover it).
Committed = tuple[Plan, dict[Slug, CheckpointInfo]]
Queued = asyncio.Future[Committed]  # a batch in its lane's queue, until it is committed or not


class Turn:
    """One client's batches, taken in the order it sent them (a relay connection's EVENTs,
    which it does not wait to be answered before sending the next).

    Each batch's checks (`Ledger.submit`) begin once the batch before it has joined its lane's
    queue or failed, so they join their queues in the order they were sent and are judged in
    that order, usually committed together (a link may follow its evidence). A batch for other
    lanes than the one before it first waits until the batches queued before it are committed:
    what it may depend on is stored before it is judged."""

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None  # done once the last batch has queued
        self._lanes: tuple[str, ...] = ()
        # The last batch this client queued. Its lane commits its batches in the order they
        # were queued, and a batch for other lanes waits for the ones before it, so once this
        # one is committed, all of the client's batches are.
        self._queued: Queued | None = None

    def next(self) -> Place:
        """A batch's place in line, taken now (`async with` it: entered once the batch before
        it has queued or failed)."""
        before = self._last
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last = mine
        return Place(self, before, mine)

    async def join(self, lanes: tuple[str, ...], enqueue: Callable[[], Queued]) -> Queued:
        """Queue a batch for `lanes` (inside `next`), after the batches queued before it for
        other lanes are committed."""
        last = self._queued
        if lanes != self._lanes and last is not None and not last.done():
            await asyncio.wait((last,))
        self._lanes = lanes
        queued = enqueue()
        self._queued = queued
        return queued


class Place:
    """A batch's place in its client's line (`Turn.next`). A plain class rather than a
    generator's context manager: one is entered for every event a relay connection sends."""

    __slots__ = ("_before", "_mine", "_turn")

    def __init__(
        self, turn: Turn, before: asyncio.Future[None] | None, mine: asyncio.Future[None]
    ) -> None:
        self._turn = turn
        self._before = before
        self._mine = mine

    async def __aenter__(self) -> None:
        before = self._before
        if before is not None and not before.done():
            try:
                await asyncio.shield(before)  # a batch that gives up never cancels its elder
            except BaseException:
                self.leave()
                raise

    async def __aexit__(self, *exc: object) -> None:
        self.leave()

    def leave(self) -> None:
        """The next batch's turn (what leaving the block does)."""
        if not self._mine.done():
            self._mine.set_result(None)
        if self._turn._last is self._mine:
            self._turn._last = None


@dataclass(slots=True)
class _Waiting:
    batch: list[Parsed]
    done: asyncio.Future[Committed]
    expected: Expected | None = None  # what the batch's page saw (`tms.rules.expected`)


@dataclass(slots=True)
class _Lane:
    waiting: list[_Waiting] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class GroupCommitter:
    def __init__(self, pool: Pool, quotes_off_loop: OffLoop, log: TransparencyLog) -> None:
        self.pool = pool
        self.run = quotes_off_loop
        self.log = log
        self._lanes: dict[tuple[str, ...], _Lane] = {}
        self._routed: bool | None = None  # writes one statement per table (tms.ledger.write.routed)
        self.queue_vectors = True  # False with TMS_EMBED=off: no vectors, so no embedding queue

    def enqueue(
        self,
        batch: list[Parsed],
        expected: Expected | None = None,
        keys: tuple[str, ...] | None = None,
    ) -> Queued:
        """The batch in its lane's queue, now: what it becomes, once judged and (if it passes)
        committed, or its `PublishError` (or the database's error). `expected`: the
        collections' state the batch was made against, checked under their locks before the
        rules judge it; `keys`: its lock keys, when the caller has them already. Batches
        enqueued in an order are judged in that order."""
        if keys is None:
            keys = lock_keys(batch)
        lane = self._lanes.get(keys)
        if lane is None:
            lane = self._lanes[keys] = _Lane()
        waiting = _Waiting(batch, asyncio.get_running_loop().create_future(), expected)
        lane.waiting.append(waiting)
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(keys, lane), name="tms-commit")
        return waiting.done

    async def _drain(self, keys: tuple[str, ...], lane: _Lane) -> None:
        try:
            while lane.waiting:
                group = _take(lane.waiting)
                await self._commit_group(group)
        finally:
            lane.task = None
            if not lane.waiting:
                self._lanes.pop(keys, None)

    async def _commit_group(self, group: list[_Waiting]) -> None:
        try:
            outcomes = await self._transaction(group, settle=True)
        except Exception as exc:
            if len(group) == 1 or is_database_down(exc):
                for waiting in group:
                    _settle(waiting, exc)
                return
            for waiting in group:  # one by one: an error stays with the batch that caused it
                try:
                    [outcome] = await self._transaction([waiting])
                except Exception as single:
                    outcome = single
                _settle(waiting, outcome)
            return
        for waiting, outcome in zip(group, outcomes, strict=True):
            _settle(waiting, outcome)

    async def _transaction(
        self, group: Sequence[_Waiting], *, settle: bool = False
    ) -> list[Committed | Exception]:
        """The group locked, judged and written (`tms.ledger.write.writes`): on a single
        PostgreSQL, the locks and the snapshot in one round trip and the write in one more,
        which commits on its own; with `settle`, each caller gets its answer then, before the
        locks are let go. On Citus, or while the log's origin may have to be recorded, in one
        transaction."""
        everything = [item for waiting in group for item in waiting.batch]
        async with self.pool.acquire() as conn:
            if self._routed is None:  # learnt once: whether the ledger is on Citus
                self._routed = await citus.is_distributed(conn)
            keys = lock_keys(everything)
            if self._routed or self.log.records_origin:
                async with writes.locked_transaction(conn, keys, routed=self._routed):
                    return await self._judged_and_written(conn, group, everything, None)
            async with writes.session_locks(conn):
                outcomes = await self._judged_and_written(conn, group, everything, keys)
                if settle:  # committed: answered now, the locks let go after
                    for waiting, outcome in zip(group, outcomes, strict=True):
                        _settle(waiting, outcome)
                return outcomes

    async def _judged_and_written(
        self,
        conn: Connection,
        group: Sequence[_Waiting],
        everything: list[Parsed],
        lock: Sequence[str] | None,
    ) -> list[Committed | Exception]:
        """Under the locks (taken with the snapshot when `lock` names them): read, judge each
        batch, write all that passed."""
        outcomes: list[Plan | Exception] = []
        snapshot, read = await snapshots.snapshot(conn, everything, {"log": STATE_SQL}, lock=lock)
        snapshot.quotes = await snapshots.quotes(conn, everything, self.run)
        members_before = {slug: set(keys) for slug, keys in snapshot.members.items()}
        passed = _judged(group, snapshot, outcomes)
        merged = _merge([plan for _, plan in passed])
        signed: dict[Slug, CheckpointInfo] = {}
        if merged.accepted:
            log_rows = await self.log.prepare(conn, merged.accepted, read["log"])
            keys = await claim_keys.key_rows(merged.accepted, self.run)  # sql/013
            # Announced in the same transaction, whichever way it wrote: delivered at commit
            # (the relay's live subscriptions, tms.ledger.read.feed). The one statement of a
            # single PostgreSQL announces what it wrote itself.
            also = [*log_rows.rows(), keys]
            if self._routed:
                written = await routed.write(
                    conn, merged, members_before, also, queue_vectors=self.queue_vectors
                )
                await writes.notify(conn, written)
            else:
                await writes.write(
                    conn,
                    merged,
                    members_before,
                    also,
                    announce=True,
                    queue_vectors=self.queue_vectors,
                )
            signed = log_rows.checkpoints()
        return [o if isinstance(o, Exception) else (o, signed) for o in outcomes]


def _judged(
    group: Sequence[_Waiting], snapshot: Snapshot, outcomes: list[Plan | Exception]
) -> list[tuple[_Waiting, Plan]]:
    """Each batch of the group judged in order against the state the ones before it that
    passed left, its plan or its refusal appended to `outcomes`; the batches that passed, with
    their plans. All on the one snapshot: `judge` leaves it as it was when it refuses a batch,
    so the cost of a group grows with its events, not with the square of its batches."""
    passed: list[tuple[_Waiting, Plan]] = []
    for waiting in group:
        try:
            if waiting.expected:
                check_expected(waiting.batch, snapshot, waiting.expected)
            plan = judge(waiting.batch, snapshot)
        except PublishError as exc:
            outcomes.append(exc)
            continue
        _stored(snapshot, plan)
        outcomes.append(plan)
        passed.append((waiting, plan))
    return passed


def _take(waiting: list[_Waiting]) -> list[_Waiting]:
    """The next group: the oldest batches, up to the group's limits (one at least)."""
    group = [waiting.pop(0)]
    events = len(group[0].batch)
    while (
        waiting
        and len(group) < MAX_GROUP_BATCHES
        and events + len(waiting[0].batch) <= MAX_GROUP_EVENTS
    ):
        events += len(waiting[0].batch)
        group.append(waiting.pop(0))
    return group


def _stored(snapshot: Snapshot, plan: Plan) -> Snapshot:
    """The snapshot once `plan` is written: its events stored, and citable by later batches.
    (The judge has already applied the rest: terms, owners, members, heads, profiles.)"""
    for item in plan.accepted:
        snapshot.stored_ids.add(item.event.id)
        if item.collection is not None:
            snapshot.refs[item.event.id] = Ref(item.event.kind, item.collection)
    return snapshot


def _merge(plans: Sequence[Plan]) -> Plan:
    """One plan writing all of `plans`, in order; later member lists replace earlier ones (the
    judge only records a list that is newer than the one it found)."""
    merged = Plan()
    for plan in plans:
        merged.accepted += plan.accepted
        merged.new_collections += plan.new_collections
        merged.member_lists.update(plan.member_lists)
        merged.anchors.update(plan.anchors)
    return merged


def _settle(waiting: _Waiting, outcome: Committed | BaseException) -> None:
    done = waiting.done
    if done.done():
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
        # Marked as read: a caller that went away does not stop its batch, and its refusal
        # is just not heard (a caller still waiting gets it all the same).
        done.exception()
    else:
        done.set_result(outcome)
