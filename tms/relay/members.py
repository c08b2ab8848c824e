"""What a collection's relay says of its members (NIP-43), signed by the relay's own key
(NIP-11 `self`, `TMS_RELAY_KEY`): the current member list (kind 13534) and each key added
(8000) or removed (8001), made from the collection's membership records when a REQ asks for them
by kind, and, as the records commit, handed to the live subscriptions that ask for them
(`tms.relay.live.Hub`). They are never stored: the records they come from are, in the log
(`tms.rules.member_views`).

Only a collection's relay says them, to whoever may read the collection (the REQ's scope): the
root relay, over many collections, would have to say whose member list each is, which these
kinds cannot.
"""

from __future__ import annotations

from collections.abc import Sequence

from tms.ledger import StoredEvents
from tms.nostr.events import SecretKey
from tms.nostr.filters import Filter
from tms.rules.member_views import VIEW_KINDS, View, current, views
from tms.types import Slug


def asks(filters: Sequence[Filter]) -> bool:
    """Whether any filter asks for these kinds by name (a filter of no kinds asks for the
    ledger's records: the views are said only to whoever asks for them)."""
    return any(f.kinds is not None and f.kinds & VIEW_KINDS for f in filters)


async def stored(
    stored_events: StoredEvents, key: SecretKey, slug: Slug, filters: Sequence[Filter]
) -> list[View]:
    """A REQ's answer of views: every 8000 and 8001 and the current 13534 that match one of
    `filters`, newest first, each filter's `limit` holding."""
    found = await stored_events.membership(slug)
    if found is None:
        return []
    made = current(views(key, found.owner, found.origin, found.records))
    answer: dict[str, View] = {}
    for wanted in filters:
        if wanted.kinds is None or not wanted.kinds & VIEW_KINDS or wanted.search is not None:
            continue
        matching = [view for view in reversed(made) if wanted.matches(view.event)]
        for view in matching if wanted.limit is None else matching[: wanted.limit]:
            answer.setdefault(view.event.id, view)
    return list(answer.values())


async def new(
    stored_events: StoredEvents, key: SecretKey, slug: Slug, after: int
) -> tuple[list[View], int]:
    """The views of the records committed after `seq` `after`, in log order, and the last
    record's `seq` (to go on from)."""
    found = await stored_events.membership(slug)
    if found is None:
        return [], after
    last = max((record.seq for record in found.records), default=after)
    return views(key, found.owner, found.origin, found.records, after=after), max(last, after)
