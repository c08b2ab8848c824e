"""Live subscriptions: each event the commit feed hands over (`tms.ledger.read.feed`) goes to every
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
answer has it (`tms.ledger.read.filters`).

A member list changes who may read: the hub sees every collection's member lists in that
collection's commit order, and at once revokes or grants the collection in the gate of every
connection of a key it drops or names (`tms.relay.gate`), before it hands over anything
committed after the list; each event passes its connection's gate as it is queued, whatever
collections its subscription was opened for. The connection then asks for its new reader
capability (`Client.membership_changed`) and closes or rescopes its subscriptions.

What waits for a stored answer is counted in bytes against the connection's budget
(`tms.relay.budget`): past it, that subscription is closed (CLOSED, saying why) and what it held
is let go; the connection's other subscriptions go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container, Iterable, Sequence
from typing import Protocol

from tms import metrics
from tms.errors import one_line
from tms.ledger import Stored, StoredEvents
from tms.nostr.events import Event, SecretKey
from tms.nostr.filters import Filter
from tms.relay import members
from tms.relay.budget import Budget, Shared
from tms.relay.gate import Gate
from tms.relay.outbox import Filed
from tms.rules.membership import Head, applies, is_membership_kind, stored_op
from tms.types import KIND_MEMBERS, PubKey, Slug

log = logging.getLogger(__name__)


class Client(Protocol):
    """What the hub needs of a connection."""

    @property
    def pubkey(self) -> PubKey | None: ...

    @property
    def gate(self) -> Gate: ...

    @property
    def budget(self) -> Budget: ...

    def send_live(self, sub_id: str, event: Shared, filed: Filed) -> None: ...

    def overflowed(self, sub_id: str, why: str) -> None: ...

    def membership_changed(self) -> None: ...


class Subscription:
    __slots__ = ("buffer", "client", "cost", "filters", "floors", "held", "slugs", "sub_id")

    def __init__(
        self, client: Client, sub_id: str, filters: Sequence[Filter], slugs: Iterable[Slug]
    ) -> None:
        self.client = client
        self.sub_id = sub_id
        self.filters = tuple(filters)  # the live ones: `search` is answered once
        self.cost = sum(f.size for f in self.filters)  # bytes its filters hold, while open
        self.slugs = frozenset(slugs)
        self.buffer: list[tuple[Stored, Shared]] | None = []  # held while stored is sent
        self.held = 0  # bytes in `buffer`, counted in the connection's budget
        self.floors: dict[Slug | None, int] = {}  # each collection's last seq at the REQ

    def matches(self, event: Event) -> bool:
        return any(f.matches(event) for f in self.filters)

    def new(self, stored: Stored) -> bool:
        """Committed after the subscription began (a collection it gained since: any)."""
        return stored.seq > self.floors.get(stored.collection, 0)

    def filed(self, stored: Stored) -> Filed:
        """Where the gate looks for it: its collection, or (a profile or terms) this
        subscription's collections."""
        return self.slugs if stored.collection is None else stored.collection

    def readable(self, stored: Stored) -> bool:
        """The key may read it now (its connection's gate), as it is queued."""
        gate = self.client.gate
        if stored.collection is None:  # a profile or terms: of the people of a readable one
            return any(gate.allows(slug) for slug in self.slugs)
        return stored.collection in self.slugs and gate.allows(stored.collection)

    def offer(self, stored: Stored, event: Shared) -> None:
        if self.buffer is None:
            if self.new(stored) and self.readable(stored):
                self.client.send_live(self.sub_id, event, self.filed(stored))
            return
        size = event.size
        budget = self.client.budget
        if budget.used + size > budget.budget:
            self.drop()
            self.client.overflowed(
                self.sub_id,
                f"error: more than {budget.budget:,} bytes of new events arrived while "
                f"subscription {self.sub_id!r} was still reading stored ones; REQ again "
                "with since to go on",
            )
            return
        self.buffer.append((stored, event))
        self.held += size
        budget.take(size)

    def flush(self, sent: Container[str]) -> None:
        """The stored answer is out: send what arrived meanwhile that it did not carry."""
        held = self.buffer or []
        self.drop()
        for stored, event in held:
            if stored.event.id not in sent and self.new(stored) and self.readable(stored):
                self.client.send_live(self.sub_id, event, self.filed(stored))

    def drop(self) -> None:
        """Let go of what the buffer holds (flushed, or the subscription ends)."""
        self.buffer = None
        if self.held:
            self.client.budget.give(self.held)
            self.held = 0


class Hub:
    def __init__(self, stored: StoredEvents, key: SecretKey | None = None) -> None:
        """`key`: the relay's own (NIP-11 `self`), which signs what it says of a collection's
        members as they change (NIP-43, `tms.relay.members`); None: it says nothing."""
        self.stored = stored
        self.views = None if key is None else members.MemberViews(stored, key)
        self.by_slug: dict[Slug, set[Subscription]] = {}
        self.people: dict[Slug, set[PubKey]] = {}
        self.clients: set[Client] = set()  # authenticated connections, told of member lists
        self.viewed: dict[Slug, int] = {}  # the last membership record whose views went out
        self._viewing: dict[Slug, asyncio.Lock] = {}  # one collection's views, one at a time
        self._tasks: set[asyncio.Task[None]] = set()
        # The last membership record each collection's fold applied, of those seen here: one
        # that does not apply after it (signed earlier, `tms.rules.membership`) moves nobody.
        self.heads: dict[Slug, Head] = {}

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
        sub.client.budget.take(sub.cost)
        metrics.RELAY_SUBSCRIPTIONS.inc()
        try:  # after registering: whatever commits from now on is above them
            sub.floors = await self.stored.positions(sorted(sub.slugs))
        except BaseException:
            self.remove(sub)
            raise

    def remove(self, sub: Subscription) -> None:
        for slug in sub.slugs:
            self._leave(slug, sub)
        sub.drop()
        sub.client.budget.give(sub.cost)
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
            shared: Shared | None = None
            for sub in subs:
                if sub.matches(event):
                    shared = shared or Shared(event.to_json())
                    sub.offer(stored, shared)
            if stored.collection is None:
                continue
            if not is_membership_kind(event.kind):
                continue
            self._changed(stored.collection, stored.seq)  # NIP-43's views, remade
            op = stored_op(event.kind, event.pubkey, event.tags, event.content, event.body)
            if op is None or op.action == "invite" or not self._applies(stored.collection, event):
                continue  # an invite changes no member
            if op.action == "replace":
                self._member_list(stored.collection, {*op.keys, event.pubkey}, None)
            else:  # a change, a join or a leave: one key
                (key,) = op.keys
                self._member_list(stored.collection, {key} if op.action == "add" else set(), key)

    def _changed(self, slug: Slug, seq: int) -> None:
        """A membership record of `slug` committed at `seq`: the views it makes go, in a task
        of their own (they are read from the database), to the subscriptions asking for them."""
        if self.views is None:
            return
        if not any(members.asks(sub.filters) for sub in self.by_slug.get(slug, ())):
            self.viewed.pop(slug, None)  # nobody asks: the next one to ask starts afresh
            return
        task = asyncio.get_running_loop().create_task(self._views(slug, seq), name="tms-views")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _views(self, slug: Slug, seq: int) -> None:
        """The views of `slug`'s records from `seq` on (and of any after the last sent), each
        offered once to each subscription over `slug` that matches it, in log order."""
        assert self.views is not None
        async with self._viewing.setdefault(slug, asyncio.Lock()):
            after = self.viewed.get(slug, seq - 1)
            if seq <= after:
                return  # sent already, by the task of a later record
            try:
                made, last = await self.views.new(slug, after)
            except Exception as exc:  # the database away: the views are the log's, still there
                log.warning("the views of %s's members were not sent: %s", slug, one_line(exc))
                return
            self.viewed[slug] = last
            for view in made:
                shared = Shared(view.event.to_json())
                stored = Stored(view.seq, slug, view.event)
                for sub in list(self.by_slug.get(slug, ())):
                    if sub.matches(view.event):
                        sub.offer(stored, shared)

    async def close(self) -> None:
        """Stop the views still being made."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _applies(self, slug: Slug, event: Event) -> bool:
        """Whether a membership record changes who belongs, after the last one seen here (the
        first one seen is taken as applied: the ledger stored it, and most records apply)."""
        if not is_membership_kind(event.kind):
            return False
        is_list = event.kind == KIND_MEMBERS
        if not applies(self.heads.get(slug), event.created_at, event.id, is_list):
            return False
        self.heads[slug] = (event.created_at, event.id, is_list)
        return True

    def _member_list(self, slug: Slug, members: set[PubKey], changed: PubKey | None) -> None:
        """A membership record, in its collection's commit order (its signer is the owner: only
        the owner changes members). A member list (`changed` None): whoever it drops reads
        nothing of the collection from here on, whoever it names reads it. A change of one
        key (`changed`): that key reads it if `members` names it, else no longer."""
        if slug in self.people:  # watched: its people grow (a list never shrinks them)
            self.people[slug].update(members)
        for sub in list(self.by_slug.get(slug, ())):
            if changed not in (None, sub.client.pubkey):
                continue
            if sub.client.pubkey not in members:
                self._leave(slug, sub)
                sub.slugs = sub.slugs - {slug}
        for client in list(self.clients):
            if changed not in (None, client.pubkey):
                continue
            gate = client.gate
            if client.pubkey in members:
                if not gate.allows(slug):
                    gate.grant(slug)
                    client.membership_changed()
            elif gate.allows(slug):
                gate.revoke(slug)  # at once: nothing more of it reaches a dropped key
                client.membership_changed()

    async def _watch(self, slugs: Iterable[Slug]) -> None:
        new = sorted(slug for slug in slugs if slug not in self.people)
        if not new:
            return
        people = await self.stored.people(new)
        for slug in new:
            self.people.setdefault(slug, set()).update(people.get(slug, ()))

    def _leave(self, slug: Slug, sub: Subscription) -> None:
        subs = self.by_slug.get(slug)
        if subs is None:
            return
        subs.discard(sub)
        if not subs:
            del self.by_slug[slug]
            self.people.pop(slug, None)
