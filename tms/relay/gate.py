"""What one connection's key may read at this moment: the check every event passes as it is
queued to be sent, stored or live, and again as it is written (`tms.relay.outbox`).

A `Reader` (`tms.ledger.access`) says what was true when it was made; a connection lives long,
and its stored answers and live events are in flight while an owner changes a member list.
DESIGN.md decides that access is judged per event at the moment it is sent, against the member
list as committed. The gate holds the collections the key reads, and two sources move it:

- the hub (`tms.relay.live.Hub`), which sees every collection's member lists in that
  collection's commit order through the commit feed, revokes or grants a collection the moment
  it hands one over: an event the feed hands over after a removal (so committed after it) is
  refused, whatever a stale reader said;
- a `Reader` read from the database (`refresh`), which counts only when no member list reached
  the hub while it was read: one read before a change the hub already applied would bring the
  old list back (the race where a removed key kept live events on `/`).

The hub may also be the later of the two: on a loaded server the commit feed runs behind, and a
reader read meanwhile already says what the member list the feed has not handed over says. The
hub then finds nothing to move, so the gate tells its connection itself (`moved`), and the
connection's subscriptions follow (close, or change collections on `/`). `moves` counts every
change, whoever made it: a subscription registered across one is looked at again.

A stored answer is read before it is sent: each page is followed by a fresh `Reader`
(`tms.relay.reading`), so that an event in it is sent only if its collection was readable
after the page's snapshot (a key that is a reader then may read everything stored before), and
still readable by the gate when its turn comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from tms.ledger import Reader
from tms.types import PubKey, Slug

REFRESH_TRIES: Final = 8  # readers read again while member lists keep arriving, at most


class Gate:
    def __init__(self) -> None:
        self.pubkey: PubKey | None = None
        self.slugs: frozenset[Slug] = frozenset()
        # member lists the hub applied, and resets (a new key): a reader read across one is stale
        self.changes = 0
        self.moves = 0  # changes of `slugs`, by the hub, a new key or a reader read
        self.moved: Callable[[], None] | None = None  # told when a reader read changed `slugs`
        self._lock = asyncio.Lock()

    def allows(self, slug: Slug) -> bool:
        return slug in self.slugs

    def revoke(self, slug: Slug) -> None:
        """The hub handed over a member list without this key (in commit order)."""
        self.changes += 1
        self.moves += 1
        self.slugs = self.slugs - {slug}

    def grant(self, slug: Slug) -> None:
        """The hub handed over a member list naming this key."""
        self.changes += 1
        self.moves += 1
        self.slugs = self.slugs | {slug}

    def reset(self, pubkey: PubKey | None, slugs: Iterable[Slug] = ()) -> None:
        """Another key (a new AUTH): nothing of the old one's holds."""
        self.pubkey = pubkey
        self.slugs = frozenset(slugs)
        self.changes += 1
        self.moves += 1

    async def refresh(self, read: Callable[[PubKey], Awaitable[Reader]]) -> Reader | None:
        """A `Reader` of the key read now, applied unless a member list reached the hub
        meanwhile (then read again); None when there is no key, or the key changed."""
        pubkey = self.pubkey
        if pubkey is None:
            return None
        async with self._lock:  # one read at a time: a later one never loses to an earlier one
            reader: Reader | None = None
            for _ in range(REFRESH_TRIES):
                seen = self.changes
                reader = await read(pubkey)
                if self.pubkey != pubkey:
                    return None
                if self.changes == seen:
                    self._apply(frozenset(reader.slugs))
                    return reader
            # Member lists keep arriving: the hub's own view, in commit order, stands, and every
            # event still passes `allows`, whatever the reader handed back says.
            return reader

    def _apply(self, slugs: frozenset[Slug]) -> None:
        """What a reader read says, ahead of the hub (or after it, the same)."""
        if slugs == self.slugs:
            return
        self.slugs = slugs
        self.moves += 1
        if self.moved is not None:
            self.moved()
