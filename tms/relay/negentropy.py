"""A connection's NIP-77 sessions: NEG-OPEN builds the list of what a filter matches and answers
as the Negentropy responder, NEG-MSG goes on, NEG-CLOSE ends it.

A session reads within the same rule and with the same refusals as a REQ: the connection's
`scope` (auth-required, restricted, rate-limited) is asked for every NEG-OPEN and NEG-MSG, its
refusal sent as NEG-ERR, and a session whose key or collections changed since it opened is
closed, as a subscription would be. NEG ids are a namespace of their own: a REQ and a NEG
session may share one.

Bounded: at most `MAX_NEG_SESSIONS` per connection, `MAX_NEG_RECORDS` items in one (NIP-77's
"blocked: too many records"), each of our messages within `NEG_FRAME_BYTES` (frameSizeLimit),
each of the client's within `MAX_NEG_MESSAGE_BYTES`. The list is built once per session
(`tms.ledger.negentropy_items`): from the collection's list this process keeps, brought up to
date with what was committed since, or read from an index; sealing it and answering a message
run in a worker thread, so that a large list never holds the event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from tms.errors import Refusal
from tms.ledger.access import ReadableCollection
from tms.ledger.negentropy_items import TooMany, negentropy_items
from tms.nostr.negentropy import NegentropyError, Responder
from tms.relay.limits import MAX_NEG_RECORDS, MAX_NEG_SESSIONS, NEG_FRAME_BYTES
from tms.relay.messages import Refused
from tms.relay.neg_messages import NegMsg, NegOpen, neg_err, neg_msg
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure
from tms.relay.reading import Scope, ScopeOf
from tms.relay.shared import ROUTE, Relay
from tms.types import PubKey, Slug

NOT_OPEN: Final = "closed: no NEG session is open with this id on this connection: NEG-OPEN first"
CHANGED: Final = "closed: what this key may read changed since NEG-OPEN: NEG-OPEN again"


@dataclass(slots=True)
class _Session:
    pubkey: PubKey
    slugs: tuple[Slug, ...]
    responder: Responder


class Negentropy:
    def __init__(self, relay: Relay, outbox: Outbox, *, address: str | None) -> None:
        """`address`: the client's, for the refusal log."""
        self.relay = relay
        self.outbox = outbox
        self.address = address
        self.sessions: dict[str, _Session] = {}

    async def open(self, message: NegOpen, scope_of: ScopeOf) -> None:
        self.close(message.sub_id)  # NIP-77: a NEG-OPEN with an open id replaces it
        scope = await self._scope(message.sub_id, scope_of)
        if scope is None:
            return
        if len(self.sessions) >= MAX_NEG_SESSIONS:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, scope.pubkey, self.address)
            self._err(
                message.sub_id,
                f"blocked: {len(self.sessions)} NEG sessions are open on this connection, this "
                f"relay's limit is {MAX_NEG_SESSIONS}: NEG-CLOSE one first",
            )
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
        session = _Session(scope.pubkey, _slugs(scope), Responder(items, NEG_FRAME_BYTES))
        self.sessions[message.sub_id] = session
        await self._answer(message.sub_id, session, message.message)

    async def message(self, message: NegMsg, scope_of: ScopeOf) -> None:
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
        self.sessions.pop(sub_id, None)

    def failed(self, sub_id: str, said: str) -> None:
        """A message of this session failed on our side: it ends, told so."""
        self._err(sub_id, said)

    async def _answer(self, sub_id: str, session: _Session, query: bytes) -> None:
        try:
            reply = await asyncio.to_thread(session.responder.respond, query)
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
        self.sessions.pop(sub_id, None)
        self.outbox.send(neg_err(sub_id, reason))


def _slugs(scope: Scope) -> tuple[Slug, ...]:
    return (scope.slug,) if isinstance(scope, ReadableCollection) else scope.slugs
