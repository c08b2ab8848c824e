"""A connection's EVENTs: checked one by one, then committed without waiting for each other.

Those for the same collections join its queue in arrival order and are judged in that order,
usually in one group commit (so a link may follow its evidence, and a client with many events in
flight gets them committed together); an event for other collections waits until those before
it are answered, and so does an AUTH, REQ or COUNT (`settle`: a read after a write sees it).
Writes need no AUTH. Each event goes through the two halves of `Ledger.publish`, called apart:
`Ledger.check` (envelope, signature, schema, the signer's rate limit) at once, in arrival order,
then `Ledger.commit` as a task of its own, without waiting for the one before, so that a
connection's events join their collection's queue in order and commit together. The rules that
judge them are `publish`'s own: a one-event batch is judged exactly as any batch.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Final

from tms.errors import Refusal, TMSError, shown
from tms.ledger.writes import lock_keys
from tms.relay import messages
from tms.relay.limits import MAX_IN_FLIGHT
from tms.relay.messages import EventMessage
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure, reason
from tms.relay.shared import ROUTE, Relay
from tms.results import PublishResult
from tms.types import KIND_PROFILE, KIND_TERMS, Slug

UNSCOPED_KINDS: Final = frozenset({KIND_PROFILE, KIND_TERMS})  # of no collection: any relay


class Publishing:
    def __init__(
        self, relay: Relay, outbox: Outbox, *, slug: Slug | None, address: str | None
    ) -> None:
        """`slug`: the collection this relay is (None: the root); `address`: the client's, for
        the refusal log."""
        self.relay = relay
        self.outbox = outbox
        self.slug = slug
        self.address = address
        self._inflight: set[asyncio.Task[PublishResult]] = set()  # events not yet answered
        self._lane: tuple[str, ...] = ()  # the lock keys of the events in flight

    async def event(self, message: EventMessage) -> None:
        elsewhere = self._other_collection(message.event)
        if elsewhere is not None:
            self.relay.refusals.record(Refusal.INVALID, ROUTE, None, self.address)
            here = shown(self.slug or "")
            said = (
                f"invalid: this relay is collection '{here}'; an event of collection "
                f"'{elsewhere}' goes to that collection's relay, /c/{elsewhere}, or to /"
            )
            self.outbox.send(messages.ok(message.id, False, said))
            return
        ledger = self.relay.ledger
        try:
            batch = await ledger.check([message.event])
        except TMSError as exc:
            self.relay.refusals.refused(exc, ROUTE)
            self.outbox.send(messages.ok(message.id, False, reason(exc)))
            return
        keys = lock_keys(batch)
        if keys != self._lane:  # another collection: what it may depend on commits first
            await self.settle()
        while len(self._inflight) >= MAX_IN_FLIGHT:
            await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
        # Started in arrival order, each takes its place in its collection's queue before it
        # first waits: judged in that order, committed together with the others waiting.
        task = asyncio.create_task(ledger.commit(batch, wait_for_vectors=False))
        task.add_done_callback(functools.partial(self._answer, message.id))
        self._inflight.add(task)
        self._lane = keys

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
        elif isinstance(exc, TMSError):
            self.relay.refusals.refused(exc, ROUTE)
            self.outbox.send(messages.ok(event_id, False, reason(exc)))
        else:
            self.outbox.send(messages.ok(event_id, False, failure(exc)))

    def _other_collection(self, event: dict[str, object]) -> str | None:
        """On a collection's relay, the collection another event names (None: this one, or
        none: profiles and terms, or what the ledger will refuse anyway)."""
        if self.slug is None or event.get("kind") in UNSCOPED_KINDS:
            return None
        content = event.get("content")
        if not isinstance(content, str):
            return None
        try:
            named = json.loads(content).get("collection")
        except (ValueError, AttributeError, RecursionError):
            return None
        if isinstance(named, str) and named != self.slug:
            return shown(named)
        return None
