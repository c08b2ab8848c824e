"""What a collection's relay says of its members (NIP-43), signed by the relay's own key
(NIP-11 `self`, `TMS_RELAY_KEY`): the current member list (kind 13534) and each key added
(8000) or removed (8001), made from the collection's membership records when a REQ asks for them
by kind, and, as the records commit, handed to the live subscriptions that ask for them
(`tms.relay.live.Hub`). They are never stored: the records they come from are, in the log
(`tms.rules.member_views`).

Only a collection's relay says them, to whoever may read the collection (the REQ's scope): the
root relay, over many collections, would have to say whose member list each is, which these
kinds cannot.

Made once per collection and record: the views of the `KEEP` collections asked last are kept
with the `seq` of their last record, and a REQ first asks only that `seq` (one probe of an
index); they are made again, off the event loop (each is a signature), only after a new record.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from tms.ledger import StoredEvents
from tms.nostr.events import SecretKey
from tms.nostr.filters import Filter
from tms.relay.limits import DEFAULT_LIMIT
from tms.rules.member_views import VIEW_KINDS, View, current, views
from tms.types import Slug

KEEP: Final = 64  # collections whose views a process keeps made


def asks(filters: Sequence[Filter]) -> bool:
    """Whether any filter asks for these kinds by name (a filter of no kinds asks for the
    ledger's records: the views are said only to whoever asks for them)."""
    return any(f.kinds is not None and f.kinds & VIEW_KINDS for f in filters)


class MemberViews:
    """The views of collections' members, as the relay's key signs them, kept made."""

    def __init__(self, stored: StoredEvents, key: SecretKey) -> None:
        self.stored = stored
        self.key = key
        self._made: OrderedDict[Slug, tuple[int, list[View]]] = OrderedDict()

    async def all(self, slug: Slug) -> tuple[list[View], int]:
        """Every view of `slug`'s membership, in log order, and its last record's `seq`."""
        last = await self.stored.last_membership_record(slug)
        kept = self._made.get(slug)
        if kept is not None and kept[0] == last:
            self._made.move_to_end(slug)
            return kept[1], last
        found = await self.stored.membership(slug)
        if found is None:
            return [], last
        last = max((record.seq for record in found.records), default=0)
        made = await asyncio.to_thread(views, self.key, found.owner, found.origin, found.records)
        self._made[slug] = (last, made)
        self._made.move_to_end(slug)
        while len(self._made) > KEEP:
            self._made.popitem(last=False)
        return made, last

    async def stored_answer(self, slug: Slug, filters: Sequence[Filter]) -> list[View]:
        """A REQ's answer of views: of every 8000 and 8001 and the current 13534, those that
        match one of `filters`, newest first, each filter's `limit` (or the relay's default)
        holding."""
        made = current((await self.all(slug))[0])
        answer: dict[str, View] = {}
        for wanted in filters:
            if wanted.kinds is None or not wanted.kinds & VIEW_KINDS or wanted.search is not None:
                continue
            limit = DEFAULT_LIMIT if wanted.limit is None else wanted.limit
            matching = [view for view in reversed(made) if wanted.matches(view.event)]
            for view in matching[:limit]:
                answer.setdefault(view.event.id, view)
        return list(answer.values())

    async def new(self, slug: Slug, after: int) -> tuple[list[View], int]:
        """The views of the records committed after `seq` `after`, in log order, and the last
        record's `seq` (to go on from)."""
        made, last = await self.all(slug)
        return [view for view in made if view.seq > after], max(last, after)
