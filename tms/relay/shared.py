"""What every relay connection of this process shares: the services it calls, the pool its
reads run on, and the hub of live subscriptions fed by the commit feed, opened once with the app
(`tms.app`).

A relay's stored answers and searches are what anyone may ask of it, in any number: they run on
a pool of their own (`TMS_RELAY_CONNECTIONS`), so that however many are asked at once, the pages
and MCP keep the main pool, and every statement on it stops at `TMS_RELAY_STATEMENT_SECONDS`
(PostgreSQL's `statement_timeout`), whoever stopped waiting for it. Access checks, the live
hub's matching and the commit feed stay on the main pool: they are the ledger's own, bounded
work. The ledger opens these reads for the relay (`tms.ledger.relay_reads`): the relay never
opens the store itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from tms import metrics
from tms.config import (
    DEFAULT_NEG_WARM,
    DEFAULT_RELAY_CONNECTIONS,
    DEFAULT_RELAY_STATEMENT_SECONDS,
)
from tms.guard.rates import Throttle
from tms.guard.refusals import RefusalLog
from tms.http.bodies import MiB
from tms.ledger import (
    Access,
    CommitFeed,
    ItemCache,
    Ledger,
    Sessions,
    StoredEvents,
    open_relay_reads,
)
from tms.nostr.events import SecretKey
from tms.relay.budget import ProcessBudget
from tms.relay.limits import BIG_LOADS, LIVE_BEHIND_SECONDS, MAX_NEG_RECORDS, NEG_CACHE_BYTES
from tms.relay.live import Hub
from tms.rules.admission import ReadCheck
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
    neg_items: ItemCache  # NIP-77: the collections' item lists kept for the sessions to come
    loads: asyncio.Semaphore  # large stored contents read at once (`BIG_LOADS`)
    behind_seconds: float  # a live event unwritten this long: its client is behind
    read_filter: ReadCheck | None = None  # the plugins' read filters, asked before each read
    key: SecretKey | None = None  # the relay's own (NIP-11 `self`): signs NIP-43's views


@asynccontextmanager
async def open_relay(
    services: Services,
    database_url: str,
    memory_bytes: int = 128 * MiB,
    behind_seconds: float = LIVE_BEHIND_SECONDS,
    *,
    connections: int = DEFAULT_RELAY_CONNECTIONS,
    statement_seconds: float = DEFAULT_RELAY_STATEMENT_SECONDS,
    neg_warm: int = DEFAULT_NEG_WARM,
    key: SecretKey | None = None,
) -> AsyncIterator[Relay]:
    """The relay of this process: its reads' pool (`connections`, `statement_seconds`), its
    hub of subscriptions, fed by the commit feed; `memory_bytes`: what all its connections
    together may hold (`tms.relay.budget`); `neg_warm`: how many of the largest collections'
    NIP-77 lists it loads in the background from the start (`ItemCache.warm`); `key`: the
    relay's own (`TMS_RELAY_KEY`), which signs what a collection's relay says of its members
    (NIP-43, `tms.relay.members`); None: the relay says nothing of them."""
    async with open_relay_reads(
        services.ledger.pool,
        database_url,
        connections=connections,
        statement_seconds=statement_seconds,
        neg_warm=neg_warm,
        item_bytes=NEG_CACHE_BYTES,
        max_records=MAX_NEG_RECORDS,
    ) as reads:
        hub = Hub(reads.matching, key)
        memory = ProcessBudget(memory_bytes)
        metrics.RELAY_MEMORY.set_function(lambda: memory.used)  # this process's relay
        feed = CommitFeed(
            database_url,
            services.ledger.pool,
            wanted=hub.wanted,
            deliver=hub.deliver,
            room=memory.live_room,
            outage=services.outage,
        )
        feed.start()
        try:
            yield Relay(
                ledger=services.ledger,
                access=services.access,
                search=services.search.over(reads.pool),
                stored=reads.stored,
                throttle=services.throttle,
                refusals=services.refusals,
                sessions=services.sessions,
                hub=hub,
                feed=feed,
                memory=memory,
                neg_items=reads.neg_items,
                loads=asyncio.Semaphore(BIG_LOADS),
                behind_seconds=behind_seconds,
                read_filter=services.read_filter,
                key=key,
            )
        finally:
            await feed.close()
            await hub.close()
