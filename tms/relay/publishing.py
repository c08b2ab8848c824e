"""A connection's EVENTs, each submitted through the ledger's one path as its own task, so that
the next is read without waiting for it to be answered; each is answered with its OK once it is
committed or refused.

The protocol only is here: what the ledger decides, it decides for every door (`Ledger.submit`:
the checks, the collection this relay is, the signer's rate limit, the operator's write policy,
the rules). The connection's `Turn` keeps its events in the order they came: judged in that
order, usually in one group commit (so a link may follow its evidence, and a client with many
events in flight gets them committed together); an event for other collections waits until
those before it are committed. An AUTH, REQ or COUNT first waits until every event before it is
answered (`settle`: a read after a write sees it). Writes need no AUTH: the key a connection
authenticated is handed on as who sent the event, for a write policy to see.

An EVENT's bytes (its message as read) count against the connection's memory budget and the
process's (`tms.relay.budget`) from the moment it is read until it is answered, and past either
the connection reads nothing more (`room`) until enough of its events are answered: it holds
back, it never refuses. An honest client then waits a moment for its burst to be committed, and
loses nothing: nostr-tools, for one, sends an event once and would not send a refused one again.
Sixty-four events of 16 MiB in flight once held a gigabyte outside every budget; now a
connection holds its budget and one message at most in flight. One message always passes (a
connection with nothing in flight reads the next, whatever its size), so a full-size evidence
event on an otherwise idle connection is always taken, and a process whose budget other
connections fill still takes one event at a time from each.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Final

from tms.errors import Outcome, TMSError, outcome_of
from tms.ledger import Turn
from tms.nostr.events import BODY, compact_json
from tms.relay import messages
from tms.relay.limits import MAX_IN_FLIGHT
from tms.relay.messages import EventMessage
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure
from tms.relay.shared import ROUTE, Relay
from tms.results import PublishResult
from tms.rules.admission import Door, Origin
from tms.types import KIND_JOIN, KIND_LEAVE, PubKey, Slug

# NIP-43: a join or leave is kept with the AUTH event that names this relay's collection.
REQUEST_NEEDS_AUTH: Final = (
    "auth-required: a join or leave is kept with your NIP-42 AUTH event naming this "
    "collection's relay: answer this relay's AUTH challenge with the same key first"
)
ALREADY_MEMBER: Final = "duplicate: you are already a member of this collection"


class Publishing:
    def __init__(
        self,
        relay: Relay,
        outbox: Outbox,
        *,
        slug: Slug | None,
        address: str | None,
        pubkey: Callable[[], PubKey | None] = lambda: None,
        auth_event: Callable[[], dict[str, object] | None] = lambda: None,
    ) -> None:
        """`slug`: the collection this relay is (None: the root); `address`: the client's;
        `pubkey`: the key the connection has authenticated, asked at each event; `auth_event`:
        the AUTH event it signed, kept with a NIP-43 join or leave (`with_auth`)."""
        self.relay = relay
        self.outbox = outbox
        self.slug = slug
        self.address = address
        self.pubkey = pubkey
        self.auth_event = auth_event
        self.turn = Turn()
        self._inflight: set[asyncio.Task[PublishResult]] = set()  # events not yet answered
        self.held = 0  # their bytes, in the connection's budget until each is answered
        self.holding_back = False  # reading waits for events in flight to be answered

    async def event(self, message: EventMessage, size: int) -> None:
        """Submit the event (`size`: its message's bytes, held until it is answered), then
        return only once the connection may read another message."""
        while len(self._inflight) >= MAX_IN_FLIGHT:
            await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
        event = self.with_auth(message.event)
        if event is None:
            self.outbox.send(messages.ok(message.id, False, REQUEST_NEEDS_AUTH))
            return
        origin = Origin(Door.RELAY, self.pubkey(), self.address)
        # Started in arrival order, each takes its turn: judged in that order, committed
        # together with the others waiting.
        task = asyncio.create_task(
            self.relay.ledger.submit(
                [event],
                origin=origin,
                within=self.slug,
                turn=self.turn,
                wait_for_vectors=False,
                route=ROUTE,
            )
        )
        self.outbox.budget.take(size)
        self.held += size
        joining = event.get("kind") == KIND_JOIN
        task.add_done_callback(functools.partial(self._answer, message.id, size, joining))
        self._inflight.add(task)
        await self.room()

    async def room(self) -> None:
        """Until the connection may read another message: its events in flight fit its budget
        and the process's, or none is in flight (they are answered whatever the client does,
        so this always ends)."""
        budget = self.outbox.budget
        try:
            while self._inflight and (budget.used > budget.budget or budget.process.over):
                self.holding_back = True
                await asyncio.wait(set(self._inflight), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.holding_back = False

    async def settle(self) -> None:
        """Until every event sent so far is committed or refused (and answered)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    def with_auth(self, event: dict[str, object]) -> dict[str, object] | None:
        """The event as the ledger takes it: a NIP-43 join or leave (which names no relay) with
        the AUTH event its key signed on this connection in `body`, which names this relay's
        collection (docs/architecture.md, "Membership records"); None when there is none."""
        if event.get("kind") not in (KIND_JOIN, KIND_LEAVE) or BODY in event:
            return event
        auth = self.auth_event()
        if auth is None or auth.get("pubkey") != event.get("pubkey") or self.slug is None:
            return None
        return {**event, BODY: compact_json(auth)}

    def _answer(
        self, event_id: str, size: int, joining: bool, task: asyncio.Task[PublishResult]
    ) -> None:
        self._inflight.discard(task)
        self.held -= size
        self.outbox.budget.give(size)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            if event_id in task.result()["skipped"]:
                said = ALREADY_MEMBER if joining else "duplicate: already stored"
                self.outbox.send(messages.ok(event_id, True, said))
            else:
                self.outbox.send(messages.ok(event_id, True, ""))
            return
        if isinstance(exc, TMSError) and outcome_of(exc) is Outcome.REFUSED:
            self.relay.refusals.refused(exc, ROUTE)
        self.outbox.send(messages.ok(event_id, False, failure(exc)))
