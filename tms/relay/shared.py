"""What every relay connection of this process shares: the services it calls, and the hub of
live subscriptions fed by the commit feed, opened once with the app (`tms.web.app`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from tms.guard.rates import Throttle
from tms.guard.refusals import RefusalLog
from tms.http.bodies import MiB
from tms.ledger.access import Access
from tms.ledger.feed import CommitFeed
from tms.ledger.filters import StoredEvents
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.relay.budget import ProcessBudget
from tms.relay.limits import BIG_LOADS, LIVE_BEHIND_SECONDS
from tms.relay.live import Hub
from tms.search.search import Search
from tms.services import Services

ROUTE: Final = "relay"  # what the refusal log calls this door


@dataclass(frozen=True, slots=True)
class Relay:
    """What every connection of this process shares."""

    ledger: Ledger
    access: Access
    search: Search
    stored: StoredEvents
    throttle: Throttle
    refusals: RefusalLog
    sessions: Sessions
    hub: Hub
    feed: CommitFeed
    memory: ProcessBudget  # every connection's bytes, counted together
    loads: asyncio.Semaphore  # large stored contents read at once (`BIG_LOADS`)
    behind_seconds: float  # a live event unwritten this long: its client is behind


@asynccontextmanager
async def open_relay(
    services: Services,
    database_url: str,
    memory_bytes: int = 128 * MiB,
    behind_seconds: float = LIVE_BEHIND_SECONDS,
) -> AsyncIterator[Relay]:
    """The relay of this process: its hub of subscriptions, fed by the commit feed;
    `memory_bytes`: what all its connections together may hold (`tms.relay.budget`)."""
    pool = services.ledger.pool
    stored = StoredEvents(pool)
    hub = Hub(stored)
    feed = CommitFeed(
        database_url, pool, wanted=hub.wanted, deliver=hub.deliver, outage=services.outage
    )
    feed.start()
    try:
        yield Relay(
            ledger=services.ledger,
            access=services.access,
            search=services.search,
            stored=stored,
            throttle=services.throttle,
            refusals=services.refusals,
            sessions=services.sessions,
            hub=hub,
            feed=feed,
            memory=ProcessBudget(memory_bytes),
            loads=asyncio.Semaphore(BIG_LOADS),
            behind_seconds=behind_seconds,
        )
    finally:
        await feed.close()
