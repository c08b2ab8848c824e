"""A connection's reads: REQ (a stored answer, then live events), COUNT (NIP-45) and CLOSE.

Each read runs within what the connection's key may read (`tms.relay.auth`: a `Reader`, or the
one collection this relay is), asked once per message. A REQ's live filters are registered with
the hub before the stored answer is read (`tms.relay.live`), so nothing committed meanwhile is
missed or sent twice. A filter with `search` (NIP-50) is answered once, ranked by the ledger's
own search over claims and contradictions, and is not live.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from tms.errors import Refusal
from tms.ledger.access import ReadableCollection, Reader
from tms.ledger.filters import PAGE, Stored
from tms.nostr.filters import Filter
from tms.relay import messages
from tms.relay.limits import DEFAULT_LIMIT, MAX_SEARCH_RESULTS, MAX_SUBSCRIPTIONS
from tms.relay.live import Client, Subscription
from tms.relay.messages import CountMessage, Refused, ReqMessage
from tms.relay.outbox import Outbox
from tms.relay.prefixes import failure
from tms.relay.shared import ROUTE, Relay
from tms.types import KIND_CLAIM, KIND_CONTRADICTION

SEARCHABLE: Final = frozenset({KIND_CLAIM, KIND_CONTRADICTION})
FEED_WAIT_SECONDS: Final = 10.0
FEED_NOT_READY: Final = (
    "error: live delivery is not ready (the database is not answering yet); try again shortly"
)
NOT_LIVE: Final = (
    "unsupported: search results are not live (NIP-50 ranks what is stored); REQ again "
    "without search to follow new events"
)

Scope = Reader | ReadableCollection
ScopeOf = Callable[[str], Awaitable[Scope]]  # what the key reads here, or `Refused` for the id


class Reading:
    def __init__(
        self,
        relay: Relay,
        outbox: Outbox,
        client: Client,
        *,
        address: str | None,
        idle: Callable[[bool], None] | None,
    ) -> None:
        """`client`: the connection, as live subscriptions hold it; `address`: the client's,
        for the refusal log; `idle(flag)`: told when the connection has no subscription (the
        server may then close it to make room for another)."""
        self.relay = relay
        self.outbox = outbox
        self.client = client
        self.address = address
        self._idle = idle
        self.subs: dict[str, Subscription] = {}

    async def req(self, message: ReqMessage, scope_of: ScopeOf) -> None:
        self.unsubscribe(message.sub_id)  # NIP-01: a REQ with an open id replaces it
        scope = await scope_of(message.sub_id)
        if len(self.subs) >= MAX_SUBSCRIPTIONS:
            self.relay.refusals.record(Refusal.TOO_LARGE, ROUTE, self.client.pubkey, self.address)
            raise Refused(
                message.sub_id,
                f"invalid: {len(self.subs)} subscriptions are open on this connection, this "
                f"relay's max_subscriptions is {MAX_SUBSCRIPTIONS}: CLOSE one first",
            )
        for wanted in message.filters:
            if (
                wanted.search is not None
                and wanted.kinds is not None
                and not wanted.kinds & SEARCHABLE
            ):
                raise Refused(
                    message.sub_id,
                    "invalid: search covers claims (kind 4702) and contradictions (kind 4704) only",
                )
        try:
            await asyncio.wait_for(self.relay.feed.ready.wait(), FEED_WAIT_SECONDS)
        except TimeoutError:
            raise Refused(message.sub_id, FEED_NOT_READY) from None
        live = [f for f in message.filters if f.search is None]
        slugs = [scope.slug] if isinstance(scope, ReadableCollection) else scope.slugs
        sub = Subscription(self.client, message.sub_id, live, slugs)
        if live:
            await self.relay.hub.add(sub)
            self.subs[message.sub_id] = sub
            if len(self.subs) == 1 and self._idle is not None:
                self._idle(False)
        sent: set[str] = set()
        try:
            for wanted in message.filters:
                await self._stored(message.sub_id, scope, wanted, sent)
        except Exception as exc:
            self.unsubscribe(message.sub_id)
            self.outbox.send(messages.closed(message.sub_id, failure(exc)))
            return
        self.outbox.send(messages.eose(message.sub_id))
        if live:
            sub.flush(sent)
        else:
            self.outbox.send(messages.closed(message.sub_id, NOT_LIVE))

    async def _stored(self, sub_id: str, scope: Scope, wanted: Filter, sent: set[str]) -> None:
        """One filter's stored answer, newest first (search: best first), each event once."""
        if wanted.search is not None:
            for stored in await self._search(scope, wanted):
                if stored.event.id not in sent:
                    sent.add(stored.event.id)
                    await self.outbox.send_stored(messages.event(sub_id, stored.event.to_json()))
            return
        left = DEFAULT_LIMIT if wanted.limit is None else wanted.limit
        before: int | None = None
        while left > 0 and self.outbox.ending is None:
            size = min(left, PAGE)
            page = await self.relay.stored.page(scope, wanted, before=before, size=size)
            for stored in page:
                if stored.event.id not in sent:
                    sent.add(stored.event.id)
                    await self.outbox.send_stored(messages.event(sub_id, stored.event.to_json()))
            if len(page) < size:
                return
            left -= len(page)
            before = page[-1].seq

    async def _search(self, scope: Scope, wanted: Filter) -> list[Stored]:
        assert wanted.search is not None
        kinds = (wanted.kinds or frozenset({KIND_CLAIM})) & SEARCHABLE
        limit = min(MAX_SEARCH_RESULTS, DEFAULT_LIMIT if wanted.limit is None else wanted.limit)
        if limit <= 0:
            return []
        readables = (
            [scope]
            if isinstance(scope, ReadableCollection)
            else [scope.collection(slug) for slug in scope.slugs]
        )
        search = self.relay.search
        hits: list[tuple[float, str]] = []
        for readable in readables:
            if KIND_CLAIM in kinds:
                found = await search.claims(readable, wanted.search, "vector", limit)
                for item in found["items"]:
                    hits.append((_score(item), item["id"]))
            if KIND_CONTRADICTION in kinds:
                for info in await search.contradictions(readable, wanted.search, limit):
                    hits.append((_score(info), info["id"]))
        hits.sort()
        ranked = [event_id for _, event_id in hits]
        found_events = await self.relay.stored.by_ids(scope, ranked)
        return [s for s in found_events if wanted.matches(s.event)][:limit]

    async def count(self, message: CountMessage, scope_of: ScopeOf) -> None:
        scope = await scope_of(message.sub_id)
        if any(f.search is not None for f in message.filters):
            raise Refused(message.sub_id, "invalid: COUNT does not take search (NIP-50)")
        try:
            number = await self.relay.stored.count(scope, message.filters)
        except Exception as exc:
            self.outbox.send(messages.closed(message.sub_id, failure(exc)))
            return
        self.outbox.send(messages.count(message.sub_id, number))

    def unsubscribe(self, sub_id: str) -> None:
        sub = self.subs.pop(sub_id, None)
        if sub is not None:
            self.relay.hub.remove(sub)
            if not self.subs and self._idle is not None:
                self._idle(True)

    def leave(self) -> None:
        """The connection is closing: every subscription leaves the hub."""
        for sub in self.subs.values():
            self.relay.hub.remove(sub)
        self.subs.clear()


def _score(item: object) -> float:
    """Best first: the smallest distance, or the highest rank."""
    assert isinstance(item, dict)
    if "distance" in item:
        return float(item["distance"])
    return -float(item.get("rank", 0.0))
