"""A connection's NIP-77 sessions: NEG-OPEN builds the list of what a filter matches and answers
as the Negentropy responder, NEG-MSG goes on, NEG-CLOSE ends it.

A session reads within the same rule and with the same refusals as a REQ: the connection's `scope`
(auth-required, restricted, rate-limited) is asked for every NEG-OPEN and NEG-MSG, and the
operator's read filter for every NEG-OPEN (`tms.relay.reading.refused_by_filter`), their refusals
sent as NEG-ERR, and a session whose key or collections changed since it opened is closed, as a
subscription would be; a list read across a removal is not answered (the key's reader is read again
after the list, through the connection's gate). NEG ids are a namespace of their own: a REQ and a
NEG session may share one.

Bounded: at most `MAX_NEG_SESSIONS` per connection, `MAX_NEG_RECORDS` items in one (NIP-77's
"blocked: too many records"), each of our messages within `NEG_FRAME_BYTES` (frameSizeLimit), each
of the client's within `MAX_NEG_MESSAGE_BYTES`. A session's list (about 72 bytes an item) counts
against the process's memory budget (`tms.relay.budget`) while the session is open, once however
many sessions share it (`ItemCache.lease`: sessions of one collection share its kept list): a
NEG-OPEN whose list would take the process past it is refused ("blocked:", try again), unless the
process holds nothing else (one session always fits, as one message does). Before, a few hundred
sessions of two million items each could hold the machine's memory. That room is checked, and
the key pays for the list from its read budget (`tms.guard.rates.neg_open_cost`, by the items the
filter can match as the collections' counts have them), before the list is built: one key on
twenty addresses once built 421 lists over 60,000 events in 30 s, each refused only after it was
built. A NEG-MSG pays by its bytes (`neg_msg_cost`), spent with its scope. The list is built once
per session (`tms.ledger.read.negentropy_items`: from the collection's list this process keeps,
brought up to date with what was committed since, or read from an index), as a task of its own
that a NEG-CLOSE, a NEG-OPEN replacing it or the connection's end cancels (a NEG-MSG waits for
its NEG-OPEN's answer); sealing it and answering a message run on NIP-77's own few threads
(`tms.ledger.read.neg_threads`), so that a large list never holds the event loop, and a flood
of 1 MiB NEG-MSGs never queues ahead of what asyncio's default pool runs for everything else.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Final

from tms.errors import RateLimited, Refusal
from tms.guard.rates import neg_open_cost
from tms.ledger import (
    ITEM_BYTES,
    ReadableCollection,
    TooMany,
    most_items,
    negentropy_items,
    reconciling,
)
from tms.nostr.negentropy import NegentropyError, Responder
from tms.relay.gate import Gate
from tms.relay.limits import MAX_NEG_RECORDS, MAX_NEG_SESSIONS, NEG_FRAME_BYTES
from tms.relay.messages import Refused
from tms.relay.neg_messages import NegMsg, NegOpen, neg_err, neg_msg
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure, reason
from tms.relay.reading import Scope, ScopeOf, refused_by_filter
from tms.relay.shared import ROUTE, Relay
from tms.types import PubKey, Slug

NOT_OPEN: Final = "closed: no NEG session is open with this id on this connection: NEG-OPEN first"
CHANGED: Final = "closed: what this key may read changed since NEG-OPEN: NEG-OPEN again"
MEMORY_FULL: Final = (
    "blocked: this relay is short of memory for NEG sessions ({size:,} bytes for this one, "
    "{used:,} of {budget:,} held); try again shortly, or narrow the filter (since, until, kinds)"
)


@dataclass(slots=True)
class _Session:
    pubkey: PubKey
    slugs: tuple[Slug, ...]
    responder: Responder  # its list counted in the process's budget, once (`ItemCache.lease`)


class Negentropy:
    def __init__(self, relay: Relay, outbox: Outbox, gate: Gate, *, address: str | None) -> None:
        """`gate`: what the connection's key may read now; `address`: the client's, for the
        refusal log."""
        self.relay = relay
        self.outbox = outbox
        self.gate = gate
        self.address = address
        self.sessions: dict[str, _Session] = {}
        self._opening: dict[str, asyncio.Task[None]] = {}  # NEG-OPENs whose list is being read

    async def open(self, message: NegOpen, scope_of: ScopeOf) -> None:
        self.close(message.sub_id)  # NIP-77: a NEG-OPEN with an open id replaces it
        scope = await self._scope(message.sub_id, scope_of)
        if scope is None:
            return
        if len(self.sessions) + len(self._opening) >= MAX_NEG_SESSIONS:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, scope.pubkey, self.address)
            self._err(
                message.sub_id,
                f"blocked: {len(self.sessions) + len(self._opening)} NEG sessions are open on "
                f"this connection, this relay's limit is {MAX_NEG_SESSIONS}: NEG-CLOSE one first",
            )
            return
        task = asyncio.create_task(self._build(message, scope), name="tms-relay-neg-open")
        self._opening[message.sub_id] = task
        task.add_done_callback(functools.partial(self._opened, message.sub_id))

    def _opened(self, sub_id: str, task: asyncio.Task[None]) -> None:
        if self._opening.get(sub_id) is task:
            del self._opening[sub_id]
        failed = None if task.cancelled() else task.exception()
        if failed is not None:  # never unanswered
            self._err(sub_id, failure(failed))

    async def _build(self, message: NegOpen, scope: Scope) -> None:
        """The session's list, read as a task of its own (a NEG-CLOSE, a NEG-OPEN replacing it
        or the connection's end cancels it), then the answer to the client's first message."""
        refusal = await refused_by_filter(
            self.relay, scope, scope.pubkey, self.address, (message.filter,)
        )
        if refusal is not None:
            self._err(message.sub_id, refusal)
            return
        if not await self._affordable(message, scope):
            return
        try:
            items = await negentropy_items(
                self.relay.stored.pool,
                scope,
                message.filter,
                MAX_NEG_RECORDS,
                self.relay.neg_items,
            )
        except TooMany:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, scope.pubkey, self.address)
            self._err(
                message.sub_id,
                f"blocked: too many records: the filter matches more than {MAX_NEG_RECORDS:,} "
                "events, this relay's limit for one NEG session: narrow it (since, until, kinds)",
            )
            return
        except Exception as exc:  # not the client's doing (the database is away, ...)
            self._err(message.sub_id, failure(exc))
            return
        try:  # after the list's snapshot: it may hold what committed after a removal
            reader = await self.gate.refresh(self.relay.access.reader)
        except Exception as exc:
            self._err(message.sub_id, failure(exc))
            return
        readable = set() if reader is None else set(reader.slugs)
        if not all(slug in readable and self.gate.allows(slug) for slug in _slugs(scope)):
            self._err(message.sub_id, CHANGED)
            return
        lists = self.relay.neg_items
        size = lists.charge(items)  # 0 when another session holds this very list
        process = self.outbox.budget.process
        if size and process.used > 0 and process.used + size > process.budget:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, scope.pubkey, self.address)
            self._err(
                message.sub_id,
                MEMORY_FULL.format(size=size, used=process.used, budget=process.budget),
            )
            return
        lists.lease(items)
        process.take(size)
        session = _Session(scope.pubkey, _slugs(scope), Responder(items, NEG_FRAME_BYTES))
        self.sessions[message.sub_id] = session
        await self._answer(message.sub_id, session, message.message)

    async def _affordable(self, message: NegOpen, scope: Scope) -> bool:
        """Before the list is built: the key pays for the items it can hold (its read budget,
        whatever address it comes from: `tms.guard.rates.neg_open_cost`, the message's first
        unit spent already), and the process has room for them, unless the list is one a
        session holds already (shared, it takes nothing more). Else the NEG-ERR is sent, and
        nothing was read but the collections' counts."""
        try:
            most = min(
                await most_items(self.relay.stored.pool, scope, message.filter), MAX_NEG_RECORDS
            )
        except Exception as exc:  # not the client's doing (the database is away, ...)
            self._err(message.sub_id, failure(exc))
            return False
        cost = neg_open_cost(most) - 1
        if cost > 0:
            try:
                await self.relay.throttle.read(scope.pubkey, cost)
            except RateLimited as exc:
                self.relay.refusals.refused(exc, ROUTE)
                self._err(message.sub_id, reason(exc))
                return False
        process = self.outbox.budget.process
        size = most * ITEM_BYTES
        if (
            process.used > 0
            and process.used + size > process.budget
            and not self.relay.neg_items.shares(list(_slugs(scope)), message.filter)
        ):
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, scope.pubkey, self.address)
            self._err(
                message.sub_id,
                MEMORY_FULL.format(size=size, used=process.used, budget=process.budget),
            )
            return False
        return True

    async def message(self, message: NegMsg, scope_of: ScopeOf) -> None:
        opening = self._opening.get(message.sub_id)
        if opening is not None:  # after its NEG-OPEN's answer, as the client sent them
            await asyncio.wait({opening})
        session = self.sessions.get(message.sub_id)
        if session is None:
            self._err(message.sub_id, NOT_OPEN)
            return
        scope = await self._scope(message.sub_id, scope_of)
        if scope is None:
            return
        if scope.pubkey != session.pubkey or not set(session.slugs) <= set(_slugs(scope)):
            self._err(message.sub_id, CHANGED)
            return
        await self._answer(message.sub_id, session, message.message)

    def close(self, sub_id: str) -> None:
        opening = self._opening.pop(sub_id, None)
        if opening is not None:
            opening.cancel()
        self._drop(sub_id)

    async def cancel(self) -> None:
        """The connection has closed: every list still being read stops, every session's list
        is let go."""
        opening = list(self._opening.values())
        self._opening.clear()
        for task in opening:
            task.cancel()
        await asyncio.gather(*opening, return_exceptions=True)
        for sub_id in list(self.sessions):
            self._drop(sub_id)

    def _drop(self, sub_id: str) -> None:
        session = self.sessions.pop(sub_id, None)
        if session is not None:
            held = self.relay.neg_items.release(session.responder.items)
            self.outbox.budget.process.give(held)

    def failed(self, sub_id: str, said: str) -> None:
        """A message of this session failed on our side: it ends, told so."""
        self._err(sub_id, said)

    async def _answer(self, sub_id: str, session: _Session, query: bytes) -> None:
        try:
            reply = await reconciling(session.responder.respond, query)
        except NegentropyError as exc:
            self.relay.refusals.record(Refusal.INVALID, ROUTE, session.pubkey, self.address)
            self._err(sub_id, f"invalid: not a Negentropy V1 message this relay can use: {exc}")
            return
        self.outbox.send(neg_msg(sub_id, reply))

    async def _scope(self, sub_id: str, scope_of: ScopeOf) -> Scope | None:
        """What the key reads here, or None once the refusal went out as NEG-ERR (its session,
        if any, closed)."""
        try:
            return await scope_of(sub_id)
        except Refused as exc:
            self._err(sub_id, str(exc))
            return None

    def _err(self, sub_id: str, reason: str) -> None:
        self._drop(sub_id)
        self.outbox.send(neg_err(sub_id, reason))


def _slugs(scope: Scope) -> tuple[Slug, ...]:
    return (scope.slug,) if isinstance(scope, ReadableCollection) else scope.slugs
