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
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from tms.errors import Outcome, TMSError, outcome_of
from tms.ledger.write.commits import Turn
from tms.relay import messages
from tms.relay.limits import MAX_IN_FLIGHT
from tms.relay.messages import EventMessage
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure
from tms.relay.shared import ROUTE, Relay
from tms.results import PublishResult
from tms.rules.admission import Door, Origin
from tms.types import PubKey, Slug


class Publishing:
    def __init__(
        self,
        relay: Relay,
        outbox: Outbox,
        *,
        slug: Slug | None,
        address: str | None,
        pubkey: Callable[[], PubKey | None] = lambda: None,
    ) -> None:
        """`slug`: the collection this relay is (None: the root); `address`: the client's;
        `pubkey`: the key the connection has authenticated, asked at each event."""
        self.relay = relay
        self.outbox = outbox
        self.slug = slug
        self.address = address
        self.pubkey = pubkey
        self.turn = Turn()
        self._inflight: set[asyncio.Task[PublishResult]] = set()  # events not yet answered

    async def event(self, message: EventMessage) -> None:
        while len(self._inflight) >= MAX_IN_FLIGHT:
            await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
        origin = Origin(Door.RELAY, self.pubkey(), self.address)
        # Started in arrival order, each takes its turn: judged in that order, committed
        # together with the others waiting.
        task = asyncio.create_task(
            self.relay.ledger.submit(
                [message.event],
                origin=origin,
                within=self.slug,
                turn=self.turn,
                wait_for_vectors=False,
            )
        )
        task.add_done_callback(functools.partial(self._answer, message.id))
        self._inflight.add(task)

    async def settle(self) -> None:
        """Until every event sent so far is committed or refused (and answered)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    def _answer(self, event_id: str, task: asyncio.Task[PublishResult]) -> None:
        self._inflight.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            if event_id in task.result()["skipped"]:
                self.outbox.send(messages.ok(event_id, True, "duplicate: already stored"))
            else:
                self.outbox.send(messages.ok(event_id, True, ""))
            return
        if isinstance(exc, TMSError) and outcome_of(exc) is Outcome.REFUSED:
            self.relay.refusals.refused(exc, ROUTE)
        self.outbox.send(messages.ok(event_id, False, failure(exc)))
