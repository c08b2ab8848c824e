"""The ledger service: the one place where batches are made permanent, and the one path every
door takes to it.

Every door submits through `Ledger.submit`, naming itself and its caller (`tms.rules.admission.
Origin`): the pages' POST /publish, MCP's `publish` over HTTP and over stdio, and the relay's EVENT,
which passes `within` (the collection its URL names) and its connection's `Turn` (its events judged
in the order they came, without one waiting for the last to be answered). A batch is checked first:
envelopes, signatures and content schemas, each content parsed once (off the event loop for big
batches), its collections read from the kinds' registry (`KINDS`), `within` held, and its signers'
rate limits spent (here and nowhere else on the path). Then the operator's write policy, when there
is one (`Admission`), is asked: it may refuse the batch (`Blocked`), or shadow-reject it (the answer
is a publish's, `tms.ledger.write.shadows`; nothing is stored; the refusal log records it). Only
then does the batch join the queue of its lock lanes (`tms.ledger.write.commits`): one transaction
with the batches waiting for the same collections locks, reads a snapshot, lets
`tms.rules.publish.judge` decide, writes everything or nothing (`tms.ledger.write.writes`). As it
commits, a batch that stored at least one event is handed to the plugins' after-commit hooks
(`CommitHook`), whether or not its caller is still waiting. Vectors for search are made after
commit, by whatever `AfterPublish` the runtime hands in.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, NamedTuple, Protocol

from tms import metrics
from tms.errors import (
    Blocked,
    Outcome,
    PublishError,
    QuoteNotFound,
    Refusal,
    one_line,
    outcome_of,
    shown,
)
from tms.ledger.locks import lock_keys
from tms.ledger.log.tree import TransparencyLog
from tms.ledger.write import snapshots, writes
from tms.ledger.write.commits import Committed as Planned
from tms.ledger.write.commits import GroupCommitter, Queued, Turn
from tms.ledger.write.shadows import shadow_result
from tms.results import PublishResult
from tms.rules.admission import Action, Admission, CommitHook, Committed, Origin
from tms.rules.expected import Expected
from tms.rules.kinds import embedded_kinds, kind_name
from tms.rules.publish import (
    Parsed,
    Plan,
    batch_texts,
    check_batch_shape,
    located_at,
    parse_events,
    with_nearest,
)
from tms.store.database import Pool
from tms.tlog.note import LogSigner
from tms.types import EventId, PubKey, Slug

log = logging.getLogger(__name__)

VERIFY_THREADS: Final = min(4, os.cpu_count() or 1)
QUOTE_THREADS: Final = 2  # evidence texts normalized at once, across all publishes
PARALLEL_FROM: Final = 64  # smaller batches are verified in one thread
# Batches this small are checked on the event loop: a BIP-340 verification takes about 50 us,
# less than handing the work to a thread and back; the content is parsed too, hence its cap.
INLINE_EVENTS: Final = 4
INLINE_CHARS: Final = 20_000
# What a write policy's refusal says when the policy gave no words of its own.
BLOCKED_BY_POLICY: Final = "refused by this server's write policy"


class CollectionSummary(NamedTuple):
    """A collection as the operator lists it."""

    slug: Slug
    owner: PubKey
    created_at: str  # ISO 8601
    evidence: int
    claims: int
    links: int
    contradictions: int
    members: int  # keys on the current member list (the owner counts only if listed)


class AfterPublish(Protocol):
    """What embeds a batch's searchable events once they are committed (tms.search.vectors)."""

    async def embed_published(self, published: Sequence[tuple[Slug, EventId]]) -> int: ...


class KeyBudget(Protocol):
    """What spends each signer's rate limit before its batch is judged (tms.guard.rates): a
    `RateLimited` refusal when one has none left."""

    async def keys(self, pubkeys: Sequence[PubKey]) -> None: ...


class RefusalRecorder(Protocol):
    """Where a shadow-rejected batch is noted (tms.guard.refusals): the client is told it was
    stored, so no door ever sees a refusal to note."""

    def record(
        self, kind: Refusal, tool: str, pubkey: str | None = None, address: str | None = None
    ) -> None: ...


class WrongCollection(PublishError):
    """An event sent to a collection's relay for another collection (`Ledger.submit`'s
    `within`): it goes to that collection's relay, or to the root."""

    def __init__(self, here: Slug, elsewhere: Slug) -> None:
        here, elsewhere = shown(here), shown(elsewhere)
        super().__init__(
            f"this relay is collection '{here}'; an event of collection '{elsewhere}' goes to "
            f"that collection's relay, /c/{elsewhere}, or to /"
        )


class Ledger:
    def __init__(
        self,
        pool: Pool,
        *,
        vectors: AfterPublish | None = None,
        log: LogSigner | None = None,
        publish_pool: Pool | None = None,
        throttle: KeyBudget | None = None,
        admission: Admission | None = None,
        refusals: RefusalRecorder | None = None,
        after_commit: CommitHook | None = None,
    ) -> None:
        """`publish_pool`: the connections publishes' transactions run on (default `pool`);
        the runtime gives them their own, with generic plans (`open_pool`). `admission`: the
        operator's write policy (None: every batch the ledger's rules accept is stored);
        `refusals`: where shadow-rejected batches are noted (None: nowhere); `after_commit`:
        what is told of each batch committed that stored something (None: nothing)."""
        self.pool = pool
        self.vectors = vectors  # None: no embedding (TMS_EMBED=off)
        self.throttle = throttle  # None: no rate limits (the operator's commands, tests)
        self.admission = admission
        self.refusals = refusals
        self.after_commit = after_commit
        # The runtime hands in the server's log key; a throwaway one serves tests and the
        # operator's commands, which never publish.
        self.log = TransparencyLog(pool, log or LogSigner.throwaway())
        self._commits = GroupCommitter(publish_pool or pool, _off_loop(_QUOTES), self.log)
        self._embedding: set[asyncio.Task[tuple[int, str | None]]] = set()  # not waited for

    def without_vectors(self) -> None:
        """Stop queueing published events for vectors (TMS_EMBED=off): nothing would take them
        off the queue. A server started with vectors on queues whatever has none then
        (`tms.search.vectors`), so nothing is lost by it."""
        self._commits.queue_vectors = False

    # --- the one path ------------------------------------------------------------------------

    async def submit(
        self,
        events: object,
        *,
        origin: Origin,
        within: Slug | None = None,
        expected: Expected | None = None,
        turn: Turn | None = None,
        wait_for_vectors: bool = True,
        now: int | None = None,
        route: str | None = None,
    ) -> PublishResult:
        """Store a batch of signed events, all or nothing (SPEC "Publishing"), from whichever
        door `origin` names. `within`: the one collection the batch may name (a collection's
        relay; profiles and terms belong to none and are welcome anywhere). `expected`: what the
        page that signed it saw of its collections (`tms.rules.expected`); a batch made against
        a state that is gone is refused. `turn`: the client's batches in the order it sent them
        (`Turn`). Without `wait_for_vectors` (the relay, whose OK means "committed") the answer
        comes at commit, its claims are embedded meanwhile, and it says `embedded: 0`.
        `route`: how the refusal log names this door's publish, as the door names its own
        refusals (None: the door's name, `origin.door`). Timed from here to the answer and
        counted by outcome and by the kinds it stores (`tms.metrics`)."""
        started = time.perf_counter()
        outcome: Outcome | None = None  # how the publish ended, as the metrics count it
        try:
            if turn is None:
                batch, action = await self._admit(events, origin, within, now)
                queued = None
                if action is not Action.SHADOW_REJECT:
                    queued = self._enqueue(batch, expected, origin, lock_keys(batch))
            else:
                async with turn.next():
                    batch, action = await self._admit(events, origin, within, now)
                    queued = None
                    if action is not Action.SHADOW_REJECT:
                        keys = lock_keys(batch)
                        queued = await turn.join(
                            keys, lambda: self._enqueue(batch, expected, origin, keys)
                        )
            if queued is None:  # shadow-rejected: a publish's answer, nothing stored
                result = await self._shadow(
                    batch, origin, route or origin.door.value, wait_for_vectors
                )
                outcome = Outcome.REFUSED
                return result
            result, plan = await self._committed(batch, queued, wait_for_vectors)
            outcome = Outcome.ACCEPTED
        except Exception as exc:
            outcome = outcome_of(exc)
            raise
        finally:  # a caller cancelled (gone) is not a publish answered: nothing is recorded
            if outcome is not None:
                _metered(outcome, started, events)
        for item in plan.accepted:
            _stored(item.event.kind).inc()
        return result

    def _enqueue(
        self,
        batch: list[Parsed],
        expected: Expected | None,
        origin: Origin,
        keys: tuple[str, ...],
    ) -> Queued:
        """The batch in its lanes' queue; once it commits, told to the after-commit hooks, whoever
        still waits for its answer (a client gone meanwhile does not stop either)."""
        queued = self._commits.enqueue(batch, expected, keys)
        if self.after_commit is not None:
            queued.add_done_callback(functools.partial(_told, self.after_commit, origin))
        return queued

    async def _admit(
        self, events: object, origin: Origin, within: Slug | None, now: int | None
    ) -> tuple[list[Parsed], Action]:
        """The batch checked (envelopes, signatures, schemas, `within`), its signers' rate
        limits spent, and the write policy's answer: a refusal raises, a shadow-rejection is
        returned."""
        now = int(time.time()) if now is None else now
        batch = await _parse_off_loop(check_batch_shape(events), now)
        if within is not None:
            _held_within(batch, within)
        if self.throttle is not None:
            # Only now, with every signature verified: a forged event spends nobody's budget.
            await self.throttle.keys([item.event.pubkey for item in batch])
        if self.admission is None:
            return batch, Action.ACCEPT
        decision = await self.admission.admit([item.event for item in batch], origin)
        if decision.action is Action.REJECT:
            blocked, signer = Blocked(decision.message or BLOCKED_BY_POLICY), batch[0].event
            if decision.event is not None and 0 <= decision.event < len(batch):
                signer = batch[decision.event].event
                blocked.located(located_at(decision.event, signer.id))
            raise blocked.refused_as(Refusal.BLOCKED, signer.pubkey)
        return batch, decision.action

    async def _shadow(
        self, batch: list[Parsed], origin: Origin, route: str, wait_for_vectors: bool
    ) -> PublishResult:
        if self.refusals is not None:
            self.refusals.record(
                Refusal.SHADOW_REJECTED,
                route,
                batch[0].event.pubkey,
                origin.address,
            )
        waits = wait_for_vectors and self.vectors is not None
        return await shadow_result(
            self.pool, batch, embedded_kinds(at_publish=True) if waits else ()
        )

    async def _committed(
        self, batch: list[Parsed], queued: Queued, wait_for_vectors: bool
    ) -> tuple[PublishResult, Plan]:
        """The queued batch's answer once its group has committed (or refused it)."""
        try:
            plan, checkpoints = await asyncio.shield(queued)
        except QuoteNotFound as refusal:
            if refusal.hinted:
                raise
            raise await self._with_nearest(refusal, batch) from None
        result: PublishResult = {
            "accepted": [p.event.id for p in plan.accepted],
            "skipped": plan.skipped,
            "collections": plan.collections,
            "checkpoints": [checkpoints[s] for s in plan.collections if s in checkpoints],
        }
        if plan.superseded:  # only then: the usual answer stays exactly SPEC's
            result["superseded"] = plan.superseded
        if not wait_for_vectors:
            result["embedded"] = 0
            searchable = self._searchable(plan)
            if searchable:  # a task only when there is something to embed
                embedding = asyncio.create_task(self._embed(searchable), name="tms-embed")
                self._embedding.add(embedding)
                embedding.add_done_callback(self._embedding.discard)
            return result, plan
        embedded, error = await self._embed(self._searchable(plan))
        if error is None:
            result["embedded"] = embedded
        else:
            result["embedding_error"] = error
        return result, plan

    async def _with_nearest(self, refusal: QuoteNotFound, batch: list[Parsed]) -> QuoteNotFound:
        """The refusal with the nearest passage of the evidence, looked for after the batch's
        transaction, outside its locks: evidence never changes, so reading it again is safe."""
        text = batch_texts(batch).get(refusal.evidence_id)
        if text is None:
            text = await self.pool.fetchval(
                snapshots.SQL_TEXT, refusal.evidence_id, writes.collections(batch)
            )
        if text is None:
            return refusal
        hinted: QuoteNotFound = await _off_loop(_QUOTES)(with_nearest, refusal, text)
        return hinted

    def _searchable(self, plan: Plan) -> list[tuple[Slug, EventId]]:
        """The claims and contradictions just committed that a publish embeds (what search
        reads); none without vectors (TMS_EMBED=off)."""
        if self.vectors is None:
            return []
        waited_for = embedded_kinds(at_publish=True)
        return [
            (p.collection, p.event.id)
            for p in plan.accepted
            if p.event.kind in waited_for and p.collection is not None
        ]

    async def _embed(self, searchable: list[tuple[Slug, EventId]]) -> tuple[int, str | None]:
        """Vectors for `searchable`, within the wait budget; evidence is left to the background
        catch-up. A failure is reported, never raised: the events are stored, and their vectors
        are caught up later."""
        if self.vectors is None or not searchable:
            return 0, None
        try:
            return await self.vectors.embed_published(searchable), None
        except Exception as exc:
            log.warning("embedding after publish failed: %s", exc)
            reason = one_line(exc, 300)
            return 0, f"embedding failed ({reason}); the events are stored, vectors come later"

    # --- operator --------------------------------------------------------------------------

    async def approve(self, pubkeys: Sequence[PubKey]) -> list[PubKey]:
        """Approve keys; returns those that were not approved before."""
        rows = await self.pool.fetch(
            """INSERT INTO approvals (pubkey) SELECT unnest($1::text[])
               ON CONFLICT DO NOTHING RETURNING pubkey""",
            list(pubkeys),
        )
        return [row["pubkey"] for row in rows]

    async def revoke(self, pubkeys: Sequence[PubKey]) -> list[PubKey]:
        rows = await self.pool.fetch(
            "DELETE FROM approvals WHERE pubkey = ANY($1::text[]) RETURNING pubkey", list(pubkeys)
        )
        return [row["pubkey"] for row in rows]

    async def approved(self) -> list[tuple[PubKey, str]]:
        rows = await self.pool.fetch(
            "SELECT pubkey, approved_at FROM approvals ORDER BY approved_at, pubkey"
        )
        return [(row["pubkey"], row["approved_at"].isoformat()) for row in rows]

    async def collections(self) -> list[CollectionSummary]:
        """Every collection, oldest first, for the operator (`tms collections`): one row each,
        its counts kept by sql/009 and its current member list's size."""
        rows = await self.pool.fetch(
            """SELECT c.slug, c.owner, c.created_at,
                      coalesce(n.evidence, 0) AS evidence, coalesce(n.claims, 0) AS claims,
                      coalesce(n.links, 0) AS links,
                      coalesce(n.contradictions, 0) AS contradictions,
                      (SELECT count(*) FROM memberships m WHERE m.collection = c.slug) AS members
               FROM collections c LEFT JOIN collection_counts n ON n.collection = c.slug
               ORDER BY c.created_at, c.slug"""
        )
        return [
            CollectionSummary(
                row["slug"],
                row["owner"],
                row["created_at"].isoformat(),
                row["evidence"],
                row["claims"],
                row["links"],
                row["contradictions"],
                row["members"],
            )
            for row in rows
        ]

    async def collection_exists(self, slug: Slug) -> bool:
        """For the operator's backup command, which may export any collection."""
        return bool(await self.pool.fetchval("SELECT 1 FROM collections WHERE slug = $1", slug))


# Separate pools for separate jobs: signature checks never queue behind quote matching, and
# neither shares asyncio's default pool with anything else (fetching has worker processes).
_VERIFY: Final = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="tms-verify")
_QUOTES: Final = ThreadPoolExecutor(QUOTE_THREADS, thread_name_prefix="tms-quotes")


def _metered(outcome: Outcome, started: float, events: object) -> None:
    """A publish's time to its answer (from `started`) and its batch size, by outcome:
    accepted, refused (a `TMSError`: a rule, a schema, a rate limit, a write policy; or a
    shadow-rejection), unavailable (the database lost) or error (`tms.errors.outcome_of`)."""
    seconds = _SECONDS.get(outcome)
    if seconds is None:
        seconds = _SECONDS[outcome] = metrics.PUBLISH_SECONDS.labels(outcome)
    seconds.observe(time.perf_counter() - started)
    if type(events) is list:
        metrics.PUBLISH_EVENTS.observe(len(events))


def _stored(kind: int) -> Any:
    """The count of events stored of this kind (`tms.metrics.EVENTS_STORED`), its child looked
    up once: it is counted for every event."""
    counter = _STORED.get(kind)
    if counter is None:
        counter = _STORED[kind] = metrics.EVENTS_STORED.labels(kind_name(kind))
    return counter


# The metrics' children by label, looked up once (prometheus_client's `labels` costs more than
# the observation itself).
_SECONDS: Final[dict[Outcome, Any]] = {}
_STORED: Final[dict[int, Any]] = {}


def _told(hook: CommitHook, origin: Origin, queued: Queued) -> None:
    """Hand a committed batch to the after-commit hooks, when it stored something (a refused
    batch, or one whose every event was stored before, is nobody's news)."""
    if queued.cancelled() or queued.exception() is not None:
        return
    planned: Planned = queued.result()
    plan = planned[0]
    if plan.accepted:
        ids = tuple(item.event.id for item in plan.accepted)
        hook.submit(Committed(ids, tuple(plan.collections), origin))


def _held_within(batch: Sequence[Parsed], slug: Slug) -> None:
    """Every event of a collection's relay names that collection (or none: profiles, terms)."""
    for position, item in enumerate(batch):
        elsewhere = item.collection
        if elsewhere is not None and elsewhere != slug:
            raise (
                WrongCollection(slug, elsewhere)
                .located(located_at(position, item.event.id))
                .refused_as(Refusal.INVALID, item.event.pubkey)
            )


def _off_loop(pool: ThreadPoolExecutor) -> Callable[..., Awaitable[Any]]:
    def run(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(pool, function, *args)

    return run


async def _parse_off_loop(raw: list[object], now: int) -> list[Parsed]:
    """Envelopes, signatures and schemas are CPU work: keep the event loop free meanwhile.
    coincurve releases the GIL while it verifies, so a big batch is split across threads."""
    if len(raw) <= INLINE_EVENTS and _content_chars(raw) <= INLINE_CHARS:
        return parse_events(raw, now)  # a thread hop would cost more than the work itself
    run = _off_loop(_VERIFY)
    if len(raw) < PARALLEL_FROM:
        parsed: list[Parsed] = await run(parse_events, raw, now)
        return parsed
    size = -(-len(raw) // VERIFY_THREADS)
    chunks = [(raw[i : i + size], i) for i in range(0, len(raw), size)]
    results = await asyncio.gather(
        *(run(parse_events, chunk, now, offset) for chunk, offset in chunks),
        return_exceptions=True,
    )
    parsed = []
    for result in results:  # in batch order, so the first error is the earliest event's
        if isinstance(result, BaseException):
            raise result
        parsed.extend(result)
    return parsed


def _content_chars(raw: list[object]) -> int:
    return sum(
        len(c) if isinstance(e, dict) and isinstance(c := e.get("content"), str) else 0 for e in raw
    )
