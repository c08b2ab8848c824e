"""What every relay connection of this process shares: the services it calls, the pool its
reads run on, and the hub of live subscriptions fed by the commit feed, opened once with the app
(`tms.app`).

A relay's stored answers and searches are what anyone may ask of it, in any number: they run on
a pool of their own (`TMS_RELAY_CONNECTIONS`), so that however many are asked at once, the pages
and MCP keep the main pool, and every statement on it stops at `TMS_RELAY_STATEMENT_SECONDS`
(PostgreSQL's `statement_timeout`), whoever stopped waiting for it. Access checks, the live
hub's matching and the commit feed stay on the main pool: they are the ledger's own, bounded
work.
"""

from __future__ import annotations

import asyncio
import logging
import time
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
from tms.errors import one_line
from tms.guard.rates import Throttle
from tms.guard.refusals import RefusalLog
from tms.http.bodies import MiB
from tms.ledger.access import Access
from tms.ledger.read.feed import CommitFeed
from tms.ledger.read.filters import StoredEvents
from tms.ledger.read.negentropy_items import ItemCache
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.relay.budget import ProcessBudget
from tms.relay.limits import BIG_LOADS, LIVE_BEHIND_SECONDS, MAX_NEG_RECORDS, NEG_CACHE_BYTES
from tms.relay.live import Hub
from tms.rules.admission import ReadCheck
from tms.search.search import Search
from tms.services import Services
from tms.store.database import Pool, open_pool

log = logging.getLogger(__name__)

ROUTE: Final = "relay"  # what the refusal log calls this door
CLOSE_SECONDS: Final = 5.0  # reads still running when the relay closes get this long


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


async def open_reads_pool(url: str, connections: int, statement_seconds: float) -> Pool:
    """The relay's reads' pool: `connections` at most, opened as needed, each statement stopped
    after `statement_seconds`."""
    return await open_pool(
        url, min_size=0, max_size=connections, statement_seconds=statement_seconds
    )


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
) -> AsyncIterator[Relay]:
    """The relay of this process: its reads' pool (`connections`, `statement_seconds`), its
    hub of subscriptions, fed by the commit feed; `memory_bytes`: what all its connections
    together may hold (`tms.relay.budget`); `neg_warm`: how many of the largest collections'
    NIP-77 lists it loads in the background from the start (`ItemCache.warm`)."""
    pool = services.ledger.pool
    reads = await open_reads_pool(database_url, connections, statement_seconds)
    watched = metrics.POOLS.watch({"relay": reads})
    hub = Hub(StoredEvents(pool))
    memory = ProcessBudget(memory_bytes)
    metrics.RELAY_MEMORY.set_function(lambda: memory.used)  # this process's relay
    feed = CommitFeed(
        database_url,
        pool,
        wanted=hub.wanted,
        deliver=hub.deliver,
        room=memory.live_room,
        outage=services.outage,
    )
    feed.start()
    neg_items = ItemCache(NEG_CACHE_BYTES)
    warming = (
        asyncio.create_task(_warm(neg_items, reads, neg_warm), name="tms-neg-warm")
        if neg_warm
        else None
    )
    try:
        yield Relay(
            ledger=services.ledger,
            access=services.access,
            search=services.search.over(reads),
            stored=StoredEvents(reads),
            throttle=services.throttle,
            refusals=services.refusals,
            sessions=services.sessions,
            hub=hub,
            feed=feed,
            memory=memory,
            neg_items=neg_items,
            loads=asyncio.Semaphore(BIG_LOADS),
            behind_seconds=behind_seconds,
            read_filter=services.read_filter,
        )
    finally:
        if warming is not None:
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
        await feed.close()
        metrics.POOLS.forget(watched)
        try:
            await asyncio.wait_for(reads.close(), CLOSE_SECONDS)
        except TimeoutError:
            reads.terminate()


async def _warm(lists: ItemCache, reads: Pool, collections: int) -> None:
    """The first syncs after a start find the largest collections' lists kept (seconds each
    at a million events, read once here rather than by the first client to ask). Nothing
    waits for it: the server answers meanwhile, a sync of a collection being loaded waits for
    that load, and a failure only leaves the lists to be read when first asked for."""
    started = time.perf_counter()
    try:
        loaded, events = await lists.warm(reads, collections, MAX_NEG_RECORDS)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("NIP-77: loading the largest collections' lists failed: %s", one_line(exc))
        return
    if loaded:
        log.info(
            "NIP-77: the lists of %d collections (%d events) kept in %.1f s",
            loaded,
            events,
            time.perf_counter() - started,
        )
