"""One client's relay connection: the messages it sends, handled in the order they arrive.

A message is parsed within bounds (`tms.relay.messages`) and goes to the part that answers it:
EVENT to `tms.relay.publishing`, AUTH to `tms.relay.auth`, REQ, COUNT and CLOSE to
`tms.relay.reading`; each but a CLOSE first spends the address's rate limit. EVENTs are
committed without waiting for each other; an AUTH, REQ or COUNT first waits until the events
before it are answered (a read after a write sees it). Everything sent goes through the
connection's one bounded queue (`tms.relay.outbox`). A failure on our side (the database away)
answers the message in the form its client waits for (OK false, CLOSED, NOTICE) with `error:`,
never a dropped message.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from tms.errors import RateLimited, Refusal
from tms.guard.rates import read_cost
from tms.nostr.events import is_hex64
from tms.relay import messages
from tms.relay.auth import Auth
from tms.relay.messages import (
    AuthMessage,
    CloseMessage,
    CountMessage,
    EventMessage,
    ProtocolError,
    Refused,
    ReqMessage,
)
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure, reason
from tms.relay.publishing import Publishing
from tms.relay.reading import Reading
from tms.relay.shared import ROUTE, Relay
from tms.types import PubKey, Slug


class Connection:
    def __init__(
        self,
        relay: Relay,
        send: Callable[[str], Awaitable[None]],
        *,
        send_many: Callable[[list[str]], Awaitable[None]] | None = None,
        slug: Slug | None,
        url: str,
        address: str | None,
        pubkey: PubKey | None = None,
        idle: Callable[[bool], None] | None = None,
    ) -> None:
        """`send`: one message to the client; `send_many`: several in one write, when the
        server can (`tms.http.websocket`); `slug`: the collection this relay is (None: the
        root, every collection the key reads); `url`: this relay's URL, as AUTH events must
        name it; `pubkey`: the key a login cookie authenticated; `idle(flag)`: told when the
        connection has no subscription (the server may then close it to make room for
        another)."""
        self.relay = relay
        self.address = address
        self.last_active = time.monotonic()
        self.outbox = Outbox(send, send_many)
        self.reading = Reading(relay, self.outbox, self, address=address, idle=idle)
        self.auth = Auth(
            relay,
            self.outbox,
            self.reading,
            self,
            slug=slug,
            url=url,
            address=address,
            pubkey=pubkey,
        )
        self.publishing = Publishing(relay, self.outbox, slug=slug, address=address)

    # --- what the hub needs of a connection (`tms.relay.live.Client`) --------------------------

    @property
    def pubkey(self) -> PubKey | None:
        return self.auth.pubkey

    def send_live(self, message: str) -> None:
        self.outbox.send(message)

    def behind(self, why: str) -> None:
        self.outbox.behind(why)

    def membership_changed(self) -> None:
        self.auth.membership_changed()

    # --- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        self.outbox.start()
        self.outbox.send(messages.auth(self.auth.challenge))
        await self.auth.open()

    async def close(self, flush_seconds: float = 0.0) -> None:
        """Leave the hub; with `flush_seconds`, give what is queued (a closing NOTICE) that
        long to go out."""
        self.reading.leave()
        self.relay.hub.clients.discard(self)
        self.auth.close()
        await self.outbox.stop(flush_seconds)

    def idle_for(self) -> float | None:
        """Seconds since the last message, while nothing is subscribed (None: not idle)."""
        return None if self.reading.subs else time.monotonic() - self.last_active

    # --- handling -------------------------------------------------------------------------------

    async def handle(self, text: str) -> None:
        """One message from the client, answered in NIP-01's words."""
        self.last_active = time.monotonic()
        try:
            message = messages.parse(text)
        except ProtocolError as exc:
            self._refused(Refusal.INVALID)
            if exc.event_id is not None:
                self.outbox.send(messages.ok(exc.event_id, False, str(exc)))
            else:
                self.outbox.send(messages.notice(str(exc)))
            return
        except Refused as exc:
            self._refused(Refusal.INVALID)
            self.outbox.send(messages.closed(exc.sub_id, str(exc)))
            return
        if isinstance(message, CloseMessage):
            self.reading.unsubscribe(message.sub_id)
            return
        if not isinstance(message, EventMessage):
            await self.publishing.settle()  # a read after a write sees it
        try:
            cost = 1
            if isinstance(message, ReqMessage | CountMessage):  # reads: priced by their size
                cost = read_cost(message.filters, count=isinstance(message, CountMessage))
            await self.relay.throttle.address(self.address, cost)
        except RateLimited as exc:
            self._limited(message, exc)
            return
        try:
            if isinstance(message, EventMessage):
                await self.publishing.event(message)
            elif isinstance(message, AuthMessage):
                await self.auth.authenticate(message)
            elif isinstance(message, ReqMessage):
                await self.reading.req(message, self.auth.scope)
            else:
                await self.reading.count(message, self.auth.scope)
        except Refused as exc:
            self.outbox.send(messages.closed(exc.sub_id, str(exc)))
        except Exception as exc:  # not the client's doing (the database is away, ...)
            self._failed_on(message, failure(exc))

    def _failed_on(self, message: messages.ClientMessage, said: str) -> None:
        """Answer a message that failed on our side, in the form the client waits for."""
        if isinstance(message, ReqMessage | CountMessage):
            self.reading.unsubscribe(message.sub_id)
            self.outbox.send(messages.closed(message.sub_id, said))
        elif isinstance(message, EventMessage):
            self.outbox.send(messages.ok(message.id, False, said))
        elif isinstance(message, AuthMessage) and isinstance(message.event, dict):
            event_id = message.event.get("id")
            if isinstance(event_id, str) and is_hex64(event_id):
                self.outbox.send(messages.ok(event_id, False, said))
            else:
                self.outbox.send(messages.notice(said))
        else:
            self.outbox.send(messages.notice(said))

    def _limited(self, message: messages.ClientMessage, exc: RateLimited) -> None:
        self.relay.refusals.record(Refusal.RATE_LIMITED, ROUTE)
        self._failed_on(message, reason(exc))

    def _refused(self, kind: Refusal) -> None:
        self.relay.refusals.record(kind, ROUTE, None, self.address)
