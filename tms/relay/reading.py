"""A connection's reads: REQ (a stored answer, then live events), COUNT (NIP-45) and CLOSE.

Each read runs within what the connection's key may read (`tms.relay.auth`: a `Reader`, or the
one collection this relay is), asked once per message; each event it sends passes the
connection's gate as it is queued (`tms.relay.gate`), and each page of a stored answer, and
each COUNT, is followed by a fresh reader, so that nothing of a collection the key was removed
from goes out after the removal, whatever was in flight (a COUNT across it is `CLOSED`). A
REQ's live filters are registered with the hub before the stored answer is read
(`tms.relay.live`), so nothing committed meanwhile is missed or sent twice. A filter with
`search` (NIP-50) is answered once, ranked by the ledger's own search over claims and
contradictions, and is not live.

A stored answer and a COUNT run as tasks of their own, `MAX_READS` at once per connection (the
others wait their turn): a CLOSE or an EVENT behind them is not held up, and a CLOSE, a REQ
that replaces the id, or the connection's end cancels them, so abandoned work stops. A stored
answer is sent page by page, each event as it is read (a large content is read only when its
turn comes, and no more than `BIG_LOADS` at once in the process; a page's rows count against
the connection's budget until sent), and only event ids are kept to send none twice. A new REQ
is refused while the connection is over its memory budget, or the process is and no connection
that reads nothing gives way to it (`tms.relay.budget`).
The filters a read holds count against the connection's budget too: a live subscription's while
it is open, a COUNT's or a search's while it waits its turn and runs (a hundred COUNTs of 10 MB
of filters each once waited uncounted).

Before a read runs, the operator's read filter, when there is one (`Relay.read_filter`, the
plugins', `tms.extension`), is asked about it (`refused_by_filter`), first thing in the read's
own task: its refusal is the read's `CLOSED` after `blocked:`, and nothing of it was sent.

A filter of ids whose `limit` (if any) covers them all is answered whole, a page of ids at a time
(`PAGE`), each looked up once by the ids' index, in the ids' order rather than newest first
(each id is one event at most: a sync's fetch of what NIP-77 said it lacks). Up to `MAX_IDS` ids
a filter (200,000: as many as a message holds), priced by their pages
(`tms.guard.rates.read_cost`) and held within the connection's budget like any filter, compactly
(`tms.nostr.filters.Ids`); the ids of what a stored answer sent are kept compactly too (`Sent`),
so a REQ of 200,000 ids holds about 13 MB at most, never its rows or their ids as strings.

A reconnecting client that asks `since` its last event gets at most `limit` (`MAX_LIMIT`) per
filter, newest as stored first, and `since` compares the signer's `created_at`, not the order
stored: an exact catch-up is NIP-77's (`tms.relay.negentropy`), as `/docs` says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, Final

from tms.errors import Refusal
from tms.ledger import BIG_BYTES, PAGE, ReadableCollection, Reader, Stored, not_a_reader
from tms.nostr.filters import Filter, Ids, id_pages
from tms.relay import members, messages
from tms.relay.budget import size_of
from tms.relay.limits import DEFAULT_LIMIT, MAX_READS, MAX_SEARCH_RESULTS, MAX_SUBSCRIPTIONS
from tms.relay.live import Client, Subscription
from tms.relay.messages import CountMessage, Refused, ReqMessage
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure
from tms.relay.shared import ROUTE, Relay
from tms.rules.admission import Door, Origin, Read
from tms.rules.kinds import KINDS, searchable_kinds
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, UNSCOPED, Slug

FEED_WAIT_SECONDS: Final = 10.0
FEED_NOT_READY: Final = (
    "error: live delivery is not ready (the database is not answering yet); try again shortly"
)
NOT_LIVE: Final = (
    "unsupported: search results are not live (NIP-50 ranks what is stored); REQ again "
    "without search to follow new events"
)

Scope = Reader | ReadableCollection
ScopeOf = Callable[[str], Awaitable[Scope]]  # what the key reads here, or `Refused` for the id


class Reading:
    def __init__(
        self,
        relay: Relay,
        outbox: Outbox,
        client: Client,
        *,
        address: str | None,
        idle: Callable[[bool], None] | None,
    ) -> None:
        """`client`: the connection, as live subscriptions hold it; `address`: the client's,
        for the refusal log; `idle(flag)`: told when the connection has no subscription (the
        server may then close it to make room for another)."""
        self.relay = relay
        self.outbox = outbox
        self.client = client
        self.address = address
        self._idle = idle
        self.subs: dict[str, Subscription] = {}
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}  # (REQ or COUNT, id)
        self._held: dict[asyncio.Task[None], int] = {}  # bytes of filters each task holds
        self._reads = asyncio.Semaphore(MAX_READS)  # answered at once; the others wait their turn

    async def req(self, message: ReqMessage, scope_of: ScopeOf) -> None:
        self.unsubscribe(message.sub_id)  # NIP-01: a REQ with an open id replaces it
        scope = await scope_of(message.sub_id)
        moves = self.client.gate.moves  # what the key reads, as `scope` says it
        if len(self.subs) >= MAX_SUBSCRIPTIONS:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, self.client.pubkey, self.address)
            raise Refused(
                message.sub_id,
                f"invalid: {len(self.subs)} subscriptions are open on this connection, this "
                f"relay's max_subscriptions is {MAX_SUBSCRIPTIONS}: CLOSE one first",
            )
        searchable = searchable_kinds()
        for wanted in message.filters:
            if (
                wanted.search is not None
                and wanted.kinds is not None
                and not wanted.kinds & searchable
            ):
                covered = " and ".join(f"{KINDS[n].plural} (kind {n})" for n in sorted(searchable))
                raise Refused(message.sub_id, f"invalid: search covers {covered} only")
        self._may_start(message.sub_id)
        try:
            await asyncio.wait_for(self.relay.feed.ready.wait(), FEED_WAIT_SECONDS)
        except TimeoutError:
            raise Refused(message.sub_id, FEED_NOT_READY) from None
        live = [f for f in message.filters if f.search is None]
        slugs = [scope.slug] if isinstance(scope, ReadableCollection) else scope.slugs
        sub = Subscription(self.client, message.sub_id, live, slugs)
        once = sum(f.size for f in message.filters if f.search is not None)  # held till answered
        self._fits(message.sub_id, sub.cost + once)
        if live:
            await self.relay.hub.add(sub)
            self.subs[message.sub_id] = sub
            if len(self.subs) == 1 and self._idle is not None:
                self._idle(False)
            if self.client.gate.moves != moves:  # it changed while this one registered, unseen
                self.client.membership_changed()
        self._start(("REQ", message.sub_id), self._answer(message, scope, sub, bool(live)), once)

    async def _answer(
        self, message: ReqMessage, scope: Scope, sub: Subscription, live: bool
    ) -> None:
        """The stored answer, then EOSE, then what arrived meanwhile (or CLOSED: not live)."""
        sent = Sent()
        try:
            refusal = await self._filtered(scope, message.filters)
            if refusal is not None:  # nothing sent yet: the live events wait for the EOSE
                self.unsubscribe(message.sub_id)
                self.outbox.send(messages.closed(message.sub_id, refusal))
                return
            for wanted in message.filters:
                await self._stored(message.sub_id, scope, wanted, sent)
            views = self.relay.hub.views
            collection = isinstance(scope, ReadableCollection)
            if views is not None and collection and members.asks(message.filters):
                assert isinstance(scope, ReadableCollection)  # NIP-43: what it says of members
                await self._views(message.sub_id, scope, views, message.filters, sent)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.unsubscribe(message.sub_id)
            self.outbox.send(messages.closed(message.sub_id, failure(exc)))
            return
        self.outbox.send(messages.eose(message.sub_id))
        if live:
            sub.flush(sent)
        else:
            self.outbox.send(messages.closed(message.sub_id, NOT_LIVE))

    async def _stored(self, sub_id: str, scope: Scope, wanted: Filter, sent: Sent) -> None:
        """One filter's stored answer, newest first (search: best first), each event once."""
        if wanted.search is not None:
            found = await self._search(scope, wanted)
            readable = await self._readable(scope)  # after the search's reads
            for stored in found:
                if stored.event.id not in sent and await self.outbox.room(BIG_BYTES):
                    self._queue(sub_id, scope, stored, sent, readable)
            return
        if wanted.ids is not None and (wanted.limit is None or wanted.limit >= len(wanted.ids)):
            # Every id asked for (each is at most one event): a page of ids at a time, each
            # looked up once by the ids' index, pages in the ids' order. Paged by `seq` instead,
            # a REQ of 3,000 ids looked all 3,000 up again for each page of 100 it sent.
            # Only a page of them as strings at once: up to `MAX_IDS` are held compactly (`Ids`).
            for page in id_pages(wanted.ids, PAGE):
                if self.outbox.ending is not None:
                    return
                some = replace(wanted, ids=page, limit=None)
                await self._page(sub_id, scope, some, None, PAGE, sent)
            return
        left = DEFAULT_LIMIT if wanted.limit is None else wanted.limit
        before: int | None = None
        while left > 0 and self.outbox.ending is None:
            size = min(left, PAGE)
            rows = await self._page(sub_id, scope, wanted, before, size, sent)
            if len(rows) < size:
                return
            left -= len(rows)
            before = rows[-1]["seq"]

    async def _views(
        self,
        sub_id: str,
        scope: ReadableCollection,
        views: members.MemberViews,
        filters: tuple[Filter, ...],
        sent: Sent,
    ) -> None:
        """The relay's own events about the collection's members that the filters ask for by
        kind (`tms.relay.members`), as the key may read them once they are made."""
        found = await views.stored_answer(scope.slug, filters)
        readable = await self._readable(scope)
        for view in found:
            if view.event.id not in sent:
                stored = Stored(view.seq, scope.slug, view.event)
                self._queue(sub_id, scope, stored, sent, readable)

    async def _page(
        self,
        sub_id: str,
        scope: Scope,
        wanted: Filter,
        before: int | None,
        size: int,
        sent: Sent,
    ) -> list[Any]:
        """One page of a stored answer read and queued, each row once there is room for it;
        its rows, to go on from."""
        budget = self.client.budget
        await budget.process.room(0, budget)  # while the process is over: wait, or made way
        rows = await self.relay.stored.rows(scope, wanted, before=before, size=size)
        readable = await self._readable(scope)  # after the page's snapshot
        held = [size_of(row["content"] or "") for row in rows]
        budget.take(sum(held))  # the page, until each row is sent
        try:
            for n, row in enumerate(rows):
                if row["id"] not in sent and self._allowed(row["collection"], scope, readable):
                    await self._row(sub_id, scope, row, sent, readable)
                budget.give(held[n])
                held[n] = 0
        finally:
            budget.give(sum(held))
        return rows

    async def _row(
        self, sub_id: str, scope: Scope, row: Any, sent: Sent, readable: frozenset[Slug]
    ) -> None:
        """One stored event, once there is room for it, if the key may still read it then. A
        large content is read only once there is room for its size (the row's), by at most
        `BIG_LOADS` at once in the process, and queued at once: nothing large waits in memory
        for a client to read."""
        if row["content"] is None:
            if not await self.outbox.room(row["size"]):
                return
            async with self.relay.loads:
                stored = await self.relay.stored.stored(row)
            self._queue(sub_id, scope, stored, sent, readable)
            return
        stored = await self.relay.stored.stored(row)  # its content is in the row, counted
        if await self.outbox.room(size_of(row["content"]), counted=True):
            self._queue(sub_id, scope, stored, sent, readable)

    def _queue(
        self, sub_id: str, scope: Scope, stored: Stored, sent: Sent, readable: frozenset[Slug]
    ) -> None:
        filed = UNSCOPED if stored.collection is None else stored.collection
        if self._allowed(filed, scope, readable):  # as it is queued: the gate's say now
            sent.add(stored.event.id)
            where = frozenset(_slugs(scope)) if filed == UNSCOPED else filed  # and as written
            self.outbox.send_stored(messages.event(sub_id, stored.event.to_json()), where)

    async def _readable(self, scope: Scope) -> frozenset[Slug]:
        """What the key reads now, read from the database (through the gate)."""
        reader = await self.client.gate.refresh(self.relay.access.reader)
        return frozenset() if reader is None else frozenset(reader.slugs)

    def _allowed(self, filed: str, scope: Scope, readable: frozenset[Slug]) -> bool:
        """An event filed under `filed` may go out: its collection was readable after the
        page was read, and the gate still allows it (profiles and terms: one of the scope's
        collections is)."""
        gate = self.client.gate
        if filed == UNSCOPED:
            return any(slug in readable and gate.allows(slug) for slug in _slugs(scope))
        return filed in readable and gate.allows(filed)

    async def _search(self, scope: Scope, wanted: Filter) -> list[Stored]:
        assert wanted.search is not None
        kinds = (wanted.kinds or frozenset({KIND_CLAIM})) & searchable_kinds()
        limit = min(MAX_SEARCH_RESULTS, DEFAULT_LIMIT if wanted.limit is None else wanted.limit)
        if limit <= 0:
            return []
        readables = (
            [scope]
            if isinstance(scope, ReadableCollection)
            else [scope.collection(slug) for slug in scope.slugs]
        )
        search = self.relay.search
        hits: list[tuple[float, str]] = []
        for readable in readables:
            for kind in sorted(kinds):
                if kind == KIND_CLAIM:  # the ledger's own searches, for the kinds that have one
                    found = await search.claims(readable, wanted.search, "vector", limit)
                    hits.extend((_score(item), item["id"]) for item in found["items"])
                elif kind == KIND_CONTRADICTION:
                    for info in await search.contradictions(readable, wanted.search, limit):
                        hits.append((_score(info), info["id"]))
                else:  # any other searchable kind, by its entry (`Search.events`)
                    hits.extend(await search.events(readable, kind, wanted.search, limit))
        hits.sort()
        ranked = [event_id for _, event_id in hits]
        found_events = await self.relay.stored.by_ids(scope, ranked)
        return [s for s in found_events if wanted.matches(s.event)][:limit]

    async def count(self, message: CountMessage, scope_of: ScopeOf) -> None:
        self._cancel(("COUNT", message.sub_id))
        scope = await scope_of(message.sub_id)
        if any(f.search is not None for f in message.filters):
            raise Refused(message.sub_id, "invalid: COUNT does not take search (NIP-50)")
        self._may_start(message.sub_id)
        held = sum(f.size for f in message.filters)  # until it is answered
        self._fits(message.sub_id, held)
        self._start(("COUNT", message.sub_id), self._count(message, scope), held)

    async def _count(self, message: CountMessage, scope: Scope) -> None:
        """The number, if every collection it counted is still readable after the count's
        snapshot (as a stored answer's page is): one removed meanwhile may have events after
        the removal in it, so the COUNT is `CLOSED` as a REQ would be."""
        try:
            refusal = await self._filtered(scope, message.filters)
            if refusal is not None:
                self.outbox.send(messages.closed(message.sub_id, refusal))
                return
            number = await self.relay.stored.count(scope, message.filters)
            readable = await self._readable(scope)  # after the count's snapshot
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.outbox.send(messages.closed(message.sub_id, failure(exc)))
            return
        lost = [slug for slug in _slugs(scope) if not self._allowed(slug, scope, readable)]
        if lost:
            said = f"restricted: {not_a_reader(lost[0])}"
            self.outbox.send(messages.closed(message.sub_id, said))
            return
        self.outbox.send(messages.count(message.sub_id, number))

    async def _filtered(self, scope: Scope, filters: tuple[Filter, ...]) -> str | None:
        return await refused_by_filter(self.relay, scope, self.client.pubkey, self.address, filters)

    def _may_start(self, sub_id: str) -> None:
        """`Refused` when this connection has enough waiting to be answered, or memory is
        short."""
        if len(self.tasks) >= MAX_SUBSCRIPTIONS:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, self.client.pubkey, self.address)
            raise Refused(
                sub_id,
                f"invalid: {len(self.tasks)} REQs or COUNTs wait to be answered on this "
                f"connection, at most {MAX_SUBSCRIPTIONS}: wait for an EOSE or COUNT",
            )
        full = self.client.budget.refusal()
        if full is not None:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, self.client.pubkey, self.address)
            raise Refused(sub_id, full)

    def _fits(self, sub_id: str, cost: int) -> None:
        """`Refused` when filters of `cost` bytes would take the connection past its budget."""
        budget = self.client.budget
        if budget.used + cost > budget.budget:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, self.client.pubkey, self.address)
            raise Refused(
                sub_id,
                f"invalid: these filters hold {cost:,} bytes, more than this connection's "
                f"{max(0, budget.budget - budget.used):,} left of {budget.budget:,}: CLOSE a "
                "subscription, wait for an answer, or ask for fewer values",
            )

    def _start(self, key: tuple[str, str], work: Coroutine[Any, Any, None], held: int) -> None:
        """`work` as a task of its own, its filters' `held` bytes counted against the
        connection's budget until it ends: a REQ or COUNT waiting its turn holds them too."""
        task = asyncio.create_task(self._in_turn(work), name=f"tms-relay-{key[0].lower()}")
        self.tasks[key] = task
        self.client.budget.take(held)
        self._held[task] = held
        task.add_done_callback(lambda done: self._finished(key, done, work))

    async def _in_turn(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            async with self._reads:
                await work
        finally:
            work.close()  # cancelled before its turn: never started, never warned of

    def _let_go(self, task: asyncio.Task[None]) -> None:
        self.client.budget.give(self._held.pop(task, 0))

    def _finished(
        self, key: tuple[str, str], task: asyncio.Task[None], work: Coroutine[Any, Any, None]
    ) -> None:
        work.close()  # cancelled before `_in_turn` began: never started, never warned of
        self._let_go(task)
        if self.tasks.get(key) is task:
            del self.tasks[key]
        failed = None if task.cancelled() else task.exception()
        if failed is not None:  # never unanswered
            self.outbox.send(messages.closed(key[1], failure(failed)))

    def _cancel(self, key: tuple[str, str]) -> None:
        task = self.tasks.pop(key, None)
        if task is not None:
            task.cancel()
            self._let_go(task)

    def unsubscribe(self, sub_id: str) -> None:
        """CLOSE (or a REQ replacing the id, or a refusal): its work stops, it leaves the hub."""
        self._cancel(("REQ", sub_id))
        sub = self.subs.pop(sub_id, None)
        if sub is not None:
            self.relay.hub.remove(sub)
            if not self.subs and self._idle is not None:
                self._idle(True)

    def leave(self) -> None:
        """The connection is closing: every subscription leaves the hub."""
        for sub in self.subs.values():
            self.relay.hub.remove(sub)
        self.subs.clear()

    async def cancel(self) -> None:
        """The connection has closed: every stored answer and COUNT still running stops."""
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            task.cancel()
            self._let_go(task)
        await asyncio.gather(*tasks, return_exceptions=True)


async def refused_by_filter(
    relay: Relay,
    scope: Scope,
    pubkey: str | None,
    address: str | None,
    filters: tuple[Filter, ...],
) -> str | None:
    """The read filter's refusal of a REQ, COUNT or NEG-OPEN, after NIP-01's `blocked:` (and
    noted in the refusal log), or None: no filter, or it lets the read through. `collection` is
    this relay's (`/c/<slug>`), None for the root."""
    read_filter = relay.read_filter
    if read_filter is None:
        return None
    collection = scope.slug if isinstance(scope, ReadableCollection) else None
    shown = tuple(wanted.to_dict() for wanted in filters)
    refusal = await read_filter.check(Read(Origin(Door.RELAY, pubkey, address), collection, shown))
    if refusal is None:
        return None
    relay.refusals.record(Refusal.BLOCKED, ROUTE, pubkey, address)
    return f"blocked: {refusal}"


class Sent:
    """The ids of the events a stored answer sent, so that none goes out twice (a later filter,
    the live events held meanwhile): the latest in a set, packed (`Ids`, 32 bytes each) every
    `PACK_AT`, so a REQ of 200,000 ids keeps 6.4 MB of them rather than about 30 MB of strings."""

    PACK_AT: Final = 4096

    def __init__(self) -> None:
        self._fresh: set[str] = set()
        self._packed: Ids | None = None

    def add(self, event_id: str) -> None:
        self._fresh.add(event_id)
        if len(self._fresh) >= self.PACK_AT:
            packed = self._packed
            self._packed = Ids.of(self._fresh) if packed is None else packed.merged(self._fresh)
            self._fresh = set()

    def __contains__(self, event_id: object) -> bool:
        packed = self._packed
        return event_id in self._fresh or (packed is not None and event_id in packed)


def _slugs(scope: Scope) -> tuple[Slug, ...]:
    return (scope.slug,) if isinstance(scope, ReadableCollection) else scope.slugs


def _score(item: object) -> float:
    """Best first: the smallest distance, or the highest rank."""
    assert isinstance(item, dict)
    if "distance" in item:
        return float(item["distance"])
    return -float(item.get("rank", 0.0))
