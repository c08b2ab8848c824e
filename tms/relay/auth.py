"""Who a connection is, and what it may read: NIP-42 AUTH, or the login cookie of a same-origin
browser (`tms.relay.endpoint`), and the reader capability made from that key.

Reads (REQ, COUNT) need an authenticated key that may read; the capability is made anew for
each of them (`scope`), and whenever a member list may have changed what the key reads
(`membership_changed`, from the hub): the subscriptions then follow it, or close. A change that
arrives while one is being read is read again after it, never dropped. Each capability read
passes through the connection's gate (`tms.relay.gate`), which refuses one read across a member
list the hub already applied. A connection that authenticates as another key closes the
subscriptions it opened as the first.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Final

from tms.errors import AuthError, NotAReader, RateLimited, Refusal, one_line, sendable
from tms.ledger import ReadableCollection, Reader, not_a_reader
from tms.nostr import nip42
from tms.nostr.events import is_hex64
from tms.relay import messages
from tms.relay.gate import Gate
from tms.relay.live import Client
from tms.relay.messages import AuthMessage, Refused
from tms.relay.outbox import Outbox
from tms.relay.prefixes import reason
from tms.relay.reading import Reading
from tms.relay.shared import ROUTE, Relay
from tms.types import PubKey, Slug

log = logging.getLogger(__name__)

AUTH_REQUIRED: Final = (
    "auth-required: reading needs NIP-42 AUTH by a key that may read; answer this relay's "
    "AUTH challenge first"
)
REAUTHENTICATED: Final = (
    "auth-required: this connection authenticated as another key; subscribe again"
)


class Auth:
    def __init__(
        self,
        relay: Relay,
        outbox: Outbox,
        reading: Reading,
        client: Client,
        *,
        slug: Slug | None,
        url: str,
        address: str | None,
        pubkey: PubKey | None,
    ) -> None:
        """`client`: the connection, as the hub tells it of member lists; `slug`: the
        collection this relay is (None: the root, every collection the key reads); `url`: this
        relay's URL, as AUTH events must name it; `pubkey`: the key a login cookie
        authenticated."""
        self.relay = relay
        self.outbox = outbox
        self.reading = reading
        self.client = client
        self.slug = slug
        self.url = url
        self.address = address
        self.challenge = secrets.token_urlsafe(24)
        self.pubkey = pubkey
        # The AUTH event this connection's key last signed (none for a login cookie): kept with
        # a NIP-43 join or leave sent here, what ties it to this relay's collection.
        self.auth_event: dict[str, object] | None = None
        self.reader: Reader | None = None
        self.gate: Gate = client.gate
        self.gate.moved = self._moved
        self._refresh: asyncio.Task[None] | None = None
        self._stale = False  # a member list changed since the last refresh began

    async def open(self) -> None:
        """A key the login cookie brought reads from the start."""
        if self.pubkey is not None:
            self.gate.reset(self.pubkey)
            self.relay.hub.clients.add(self.client)  # first: no member list goes unseen
            self.reader = await self.gate.refresh(self.relay.access.reader)

    def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()

    async def authenticate(self, message: AuthMessage) -> None:
        raw = message.event
        event_id = raw.get("id") if isinstance(raw, dict) else None
        try:
            pubkey = nip42.check_auth(
                raw, challenge=self.challenge, relay_url=self.url, now=int(time.time())
            )
        except AuthError as exc:
            self.relay.refusals.refused(exc, ROUTE)
            said = sendable(str(exc))
            if isinstance(event_id, str) and is_hex64(event_id):
                self.outbox.send(messages.ok(event_id, False, said))
            else:
                self.outbox.send(messages.notice(said))
            return
        if self.pubkey is not None and pubkey != self.pubkey:
            for sub_id in list(self.reading.subs):  # they were opened as the other key
                self.reading.unsubscribe(sub_id)
                self.outbox.send(messages.closed(sub_id, REAUTHENTICATED))
        self.pubkey = pubkey
        self.auth_event = raw if isinstance(raw, dict) else None
        if self.gate.pubkey != pubkey:  # the same key again keeps what it reads meanwhile
            self.gate.reset(pubkey)
        self.relay.hub.clients.add(self.client)  # first: no member list goes unseen
        self.reader = await self.gate.refresh(self.relay.access.reader)
        self.outbox.send(messages.ok(str(event_id), True, ""))

    async def scope(self, sub_id: str, cost: int = 1) -> Reader | ReadableCollection:
        """What this key reads here, or `Refused` (auth-required / restricted / rate-limited);
        `cost`: what the read spends of the key's read budget (`tms.guard.rates`)."""
        if self.pubkey is None:
            self._refused(Refusal.UNAUTHENTICATED)
            raise Refused(sub_id, AUTH_REQUIRED)
        try:
            await self.relay.throttle.read(self.pubkey, cost)
        except RateLimited as exc:
            self.relay.refusals.refused(exc, ROUTE)
            raise Refused(sub_id, reason(exc)) from None
        reader = await self.gate.refresh(self.relay.access.reader)  # once per request
        if reader is None:  # authenticated as another key meanwhile
            raise Refused(sub_id, REAUTHENTICATED)
        self.reader = reader
        if self.slug is not None:
            try:
                if not self.gate.allows(self.slug):
                    raise not_a_reader(self.slug)
                return self.reader.collection(self.slug)
            except NotAReader as exc:
                self._refused(Refusal.NOT_MEMBER, self.pubkey)
                raise Refused(sub_id, f"restricted: {exc}") from None
        if not self.reader.slugs:
            self._refused(Refusal.NOT_MEMBER, self.pubkey)
            raise Refused(sub_id, f"restricted: {self._reads_nothing()}")
        return self.reader

    def _moved(self) -> None:
        """A reader read changed what the key reads before the hub did (the feed behind): the
        subscriptions follow it as they follow the hub. Without one, nothing to follow (an
        AUTH's first reader)."""
        if self.reading.subs:
            self.membership_changed()

    def membership_changed(self) -> None:
        self._stale = True
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._follow(), name="tms-relay-reader")

    async def _follow(self) -> None:
        """Until no member list changed since the last read began."""
        while self._stale:
            self._stale = False
            await self._new_reader()

    async def _new_reader(self) -> None:
        """A member list changed: read what this key may read now, and follow it."""
        try:
            reader = await self.gate.refresh(self.relay.access.reader)
        except Exception as exc:
            log.warning("a relay connection could not refresh its reader: %s", one_line(exc))
            return
        if reader is None:  # authenticated as another key meanwhile: its own reader holds
            return
        self.reader = reader
        readable = sorted(slug for slug in reader.slugs if self.gate.allows(slug))
        for sub_id, sub in list(self.reading.subs.items()):
            if self.slug is None and readable:
                await self.relay.hub.rescope(sub, readable)
            elif self.slug is None:
                self.reading.unsubscribe(sub_id)
                self.outbox.send(messages.closed(sub_id, f"restricted: {self._reads_nothing()}"))
            elif not self.gate.allows(self.slug):
                self.reading.unsubscribe(sub_id)
                self.outbox.send(messages.closed(sub_id, f"restricted: {not_a_reader(self.slug)}"))

    def _reads_nothing(self) -> str:
        return f"key {self.pubkey} may read no collection here: ask a collection's owner to add it"

    def _refused(self, kind: Refusal, pubkey: PubKey | None = None) -> None:
        self.relay.refusals.record(kind, ROUTE, pubkey, self.address)
