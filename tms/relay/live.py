"""Live subscriptions: each event the commit feed hands over (`tms.ledger.feed`) goes to every
open subscription on this process whose collections hold it and whose filters match it, once.

A subscription is registered before its stored answer is read, and holds what arrives meanwhile
until that answer is sent (`flush`): an event the stored answer already carried is then dropped,
so none is sent twice, and none committed after the stored answer's snapshot is missed (the feed
hands over only what committed, and the subscription was registered before the snapshot). Once
registered, it reads each of its collections' last `seq` (`floors`): the feed, running behind
on a loaded server, may still hand over events committed before the REQ, which are the stored
answer's to send or not (its filters and `limit` said), never live ones.

A profile or terms event belongs to no collection: it goes to the subscriptions over collections
whose people (owner, and every key a member list named) include its signer, as the stored
answer has it (`tms.ledger.filters`). A member list changes who may read: the subscriptions of a
key it drops stop at once, and every connection of a key it names or drops asks for its new
reader capability (`Client.membership_changed`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Protocol

from tms import metrics
from tms.ledger.filters import Stored, StoredEvents
from tms.nostr.events import Event
from tms.nostr.filters import Filter
from tms.relay import messages
from tms.relay.limits import OUTBOX_MESSAGES
from tms.types import KIND_MEMBERS, PubKey, Slug


class Client(Protocol):
    """What the hub needs of a connection."""

    @property
    def pubkey(self) -> PubKey | None: ...

    def send_live(self, message: str) -> None: ...

    def behind(self, why: str) -> None: ...

    def membership_changed(self) -> None: ...


class Subscription:
    __slots__ = ("buffer", "client", "filters", "floors", "slugs", "sub_id")

    def __init__(
        self, client: Client, sub_id: str, filters: Sequence[Filter], slugs: Iterable[Slug]
    ) -> None:
        self.client = client
        self.sub_id = sub_id
        self.filters = tuple(filters)  # the live ones: `search` is answered once
        self.slugs = frozenset(slugs)
        self.buffer: list[tuple[Stored, str]] | None = []  # (event, its JSON) while stored is sent
        self.floors: dict[Slug | None, int] = {}  # each collection's last seq at the REQ

    def matches(self, event: Event) -> bool:
        return any(f.matches(event) for f in self.filters)

    def new(self, stored: Stored) -> bool:
        """Committed after the subscription began (a collection it gained since: any)."""
        return stored.seq > self.floors.get(stored.collection, 0)

    def offer(self, stored: Stored, event_json: str) -> None:
        if self.buffer is None:
            if self.new(stored):
                self.client.send_live(messages.event(self.sub_id, event_json))
            return
        self.buffer.append((stored, event_json))
        if len(self.buffer) > OUTBOX_MESSAGES:
            self.client.behind(
                f"more than {OUTBOX_MESSAGES:,} new events arrived while subscription "
                f"{self.sub_id!r} was still reading stored ones"
            )

    def flush(self, sent: set[str]) -> None:
        """The stored answer is out: send what arrived meanwhile that it did not carry."""
        held, self.buffer = self.buffer or [], None
        for stored, event_json in held:
            if stored.event.id not in sent and self.new(stored):
                self.client.send_live(messages.event(self.sub_id, event_json))


class Hub:
    def __init__(self, stored: StoredEvents) -> None:
        self.stored = stored
        self.by_slug: dict[Slug, set[Subscription]] = {}
        self.people: dict[Slug, set[PubKey]] = {}
        self.owners: dict[Slug, PubKey] = {}
        self.clients: set[Client] = set()  # authenticated connections, told of member lists

    def wanted(self, key: Slug | None) -> bool:
        """For the feed: whether events of this collection (None: profiles and terms) are
        read at all here."""
        return bool(self.by_slug) if key is None else key in self.by_slug

    async def add(self, sub: Subscription) -> None:
        """A live subscription, until `remove` (each added one is removed once: counted open
        meanwhile, for the operator's /metrics)."""
        await self._watch(sub.slugs)
        for slug in sub.slugs:
            self.by_slug.setdefault(slug, set()).add(sub)
        metrics.RELAY_SUBSCRIPTIONS.inc()
        try:  # after registering: whatever commits from now on is above them
            sub.floors = await self.stored.positions(sorted(sub.slugs))
        except BaseException:
            self.remove(sub)
            raise

    def remove(self, sub: Subscription) -> None:
        for slug in sub.slugs:
            self._leave(slug, sub)
        metrics.RELAY_SUBSCRIPTIONS.dec()

    async def rescope(self, sub: Subscription, slugs: Iterable[Slug]) -> None:
        """The subscription's collections after its key's reader capability changed."""
        wanted = frozenset(slugs)
        await self._watch(wanted - sub.slugs)
        for slug in sub.slugs - wanted:
            self._leave(slug, sub)
        for slug in wanted - sub.slugs:
            self.by_slug.setdefault(slug, set()).add(sub)
        sub.slugs = wanted

    def deliver(self, batch: Sequence[Stored]) -> None:
        """The feed's hand-over: each event to each matching subscription, in order."""
        for stored in batch:
            event = stored.event
            if stored.collection is None:
                subs: set[Subscription] = set()
                for slug, people in self.people.items():
                    if event.pubkey in people:
                        subs |= self.by_slug.get(slug, set())
            else:
                subs = set(self.by_slug.get(stored.collection, ()))
            text: str | None = None
            for sub in subs:
                if sub.matches(event):
                    text = text or event.to_json()
                    sub.offer(stored, text)
            if event.kind == KIND_MEMBERS and stored.collection is not None:
                self._member_list(stored.collection, event)

    def _member_list(self, slug: Slug, event: Event) -> None:
        members = set(json.loads(event.content).get("members", ()))
        owner = self.owners.get(slug)
        if slug in self.people:  # watched: its people grow (a list never shrinks them)
            self.people[slug].update(members)
        told: set[int] = set()
        for sub in list(self.by_slug.get(slug, ())):
            if sub.client.pubkey not in members and sub.client.pubkey != owner:
                self._leave(slug, sub)  # at once: nothing more of it reaches a dropped key
                sub.slugs = sub.slugs - {slug}
            if id(sub.client) not in told:
                told.add(id(sub.client))
                sub.client.membership_changed()
        for client in list(self.clients):
            if client.pubkey in members and id(client) not in told:
                told.add(id(client))
                client.membership_changed()

    async def _watch(self, slugs: Iterable[Slug]) -> None:
        new = sorted(slug for slug in slugs if slug not in self.people)
        if not new:
            return
        people = await self.stored.people(new)
        owners = await self.stored.owners(new)
        for slug in new:
            self.people.setdefault(slug, set()).update(people.get(slug, ()))
            if slug in owners:
                self.owners[slug] = owners[slug]

    def _leave(self, slug: Slug, sub: Subscription) -> None:
        subs = self.by_slug.get(slug)
        if subs is None:
            return
        subs.discard(sub)
        if not subs:
            del self.by_slug[slug]
            self.people.pop(slug, None)
            self.owners.pop(slug, None)
