"""One client's relay connection: the messages it sends, handled in the order they arrive.

A message is parsed within bounds (`tms.relay.messages`) and goes to the part that answers it:
EVENT to `tms.relay.publishing`, AUTH to `tms.relay.auth`, REQ, COUNT and CLOSE to
`tms.relay.reading`, NEG-OPEN, NEG-MSG and NEG-CLOSE (NIP-77) to `tms.relay.negentropy`; each
but a CLOSE or NEG-CLOSE first spends one unit of the address's rate limit, and each read then
spends its key's read budget by what it reads (`tms.guard.rates`), whatever address it comes
from. EVENTs are
committed without waiting for each other; an AUTH, REQ or COUNT first waits until the events
before it are answered (a read after a write sees it). A REQ's stored answer and a COUNT then
run as tasks of their own (`tms.relay.reading`), so that a CLOSE or an EVENT behind them is not
held up, and a CLOSE, a REQ replacing it or the connection's end cancels them. Everything sent
goes through the connection's one queue (`tms.relay.outbox`), counted in bytes against its
memory budget (`tms.relay.budget`), and every event sent passes the connection's gate
(`tms.relay.gate`): what its key may read at that moment. A failure on our side (the database away)
answers the message in the form its client waits for (OK false, CLOSED, NOTICE) with `error:`,
never a dropped message.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable

from tms.errors import RateLimited, Refusal
from tms.guard.rates import neg_msg_cost, read_cost
from tms.nostr.events import is_hex64
from tms.relay import messages
from tms.relay.auth import Auth
from tms.relay.budget import Budget, Shared, size_of
from tms.relay.gate import Gate
from tms.relay.limits import OUTBOX_BYTES
from tms.relay.messages import (
    AuthMessage,
    CloseMessage,
    CountMessage,
    EventMessage,
    ProtocolError,
    Refused,
    ReqMessage,
)
from tms.relay.neg_messages import NegClose, NegMsg, NegOpen, NegRefused
from tms.relay.negentropy import Negentropy
from tms.relay.outbox import Filed, Outbox
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
        drained: Callable[[], Awaitable[None]] | None = None,
        slug: Slug | None,
        url: str,
        address: str | None,
        pubkey: PubKey | None = None,
        idle: Callable[[bool], None] | None = None,
    ) -> None:
        """`send`: one message to the client; `send_many`: several in one write, when the
        server can (`tms.http.websocket`), and `drained()` until the kernel has taken them;
        `slug`: the collection this relay is (None: the root, every collection the key reads);
        `url`: this relay's URL, as AUTH events must name it; `pubkey`: the key a login cookie
        authenticated; `idle(flag)`: told when the connection has no subscription (the server
        may then close it to make room for another)."""
        self.relay = relay
        self.address = address
        self.last_active = time.monotonic()
        self.gate = Gate()
        self.budget = Budget(relay.memory, OUTBOX_BYTES)
        self.outbox = Outbox(
            send, send_many, self.budget, relay.behind_seconds, self.gate, drained=drained
        )
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
        self.publishing = Publishing(
            relay,
            self.outbox,
            slug=slug,
            address=address,
            pubkey=lambda: self.auth.pubkey,
            auth_event=lambda: self.auth.auth_event,
        )
        self.negentropy = Negentropy(relay, self.outbox, self.gate, address=address)  # NIP-77

    # --- what the hub needs of a connection (`tms.relay.live.Client`) --------------------------

    @property
    def pubkey(self) -> PubKey | None:
        return self.auth.pubkey

    def send_live(self, sub_id: str, event: Shared, filed: Filed) -> None:
        self.outbox.send_live(sub_id, event, filed)

    def overflowed(self, sub_id: str, why: str) -> None:
        """A subscription held more than the connection's budget: it ends, not the others."""
        self.reading.unsubscribe(sub_id)
        self.outbox.send(messages.closed(sub_id, why))

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
        await self.negentropy.cancel()
        await self.reading.cancel()
        await self.outbox.stop(flush_seconds)
        self.budget.release(kept=self.publishing.held)

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
        except NegRefused as exc:
            self._refused(Refusal.INVALID)
            self.negentropy.failed(exc.sub_id, str(exc))
            return
        if isinstance(message, CloseMessage):
            self.reading.unsubscribe(message.sub_id)
            return
        if isinstance(message, NegClose):
            self.negentropy.close(message.sub_id)
            return
        if not isinstance(message, EventMessage):
            await self.publishing.settle()  # a read after a write sees it
        try:
            await self.relay.throttle.address(self.address)  # a message, whatever it asks
        except RateLimited as exc:
            self._limited(message, exc)
            return
        # A read spends its key's read budget by what it reads, asked with what the key reads
        # (`Auth.scope`): a NEG-OPEN's list is priced by its items once its scope is known.
        cost = 1
        if isinstance(message, ReqMessage | CountMessage):
            cost = read_cost(message.filters, count=isinstance(message, CountMessage))
        elif isinstance(message, NegMsg):
            cost = neg_msg_cost(len(message.message))
        scope = functools.partial(self.auth.scope, cost=cost)
        try:
            if isinstance(message, EventMessage):
                await self.publishing.event(message, size_of(text))
            elif isinstance(message, AuthMessage):
                await self.auth.authenticate(message)
            elif isinstance(message, ReqMessage):
                await self.reading.req(message, scope)
            elif isinstance(message, NegOpen):
                await self.negentropy.open(message, scope)
            elif isinstance(message, NegMsg):
                await self.negentropy.message(message, scope)
            else:
                await self.reading.count(message, scope)
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
        elif isinstance(message, NegOpen | NegMsg):
            self.negentropy.failed(message.sub_id, said)
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
