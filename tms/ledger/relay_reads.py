"""What the relay reads, opened as one service: the stored events it answers REQ and COUNT
from, on a pool of its own (`TMS_RELAY_CONNECTIONS`, each statement stopped at
`TMS_RELAY_STATEMENT_SECONDS`), the same reads on the main pool for the live hub's matching,
and the collections' NIP-77 item lists, the largest loaded in the background from the start.

The relay is a door: it asks the ledger for these and never opens the store itself. Anyone may
ask a relay for stored answers, in any number, so they never take the pages' and MCP's pool.
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
from tms.errors import one_line
from tms.ledger.read.filters import StoredEvents
from tms.ledger.read.negentropy_items import ItemCache
from tms.store.database import Pool, open_pool

log = logging.getLogger(__name__)

CLOSE_SECONDS: Final = 5.0  # reads still running when the relay closes get this long


@dataclass(frozen=True, slots=True)
class RelayReads:
    """The relay's reads, open until `open_relay_reads` closes them."""

    pool: Pool  # the relay's own pool: its stored answers and searches run here
    stored: StoredEvents  # REQ and COUNT's stored answers, on `pool`
    matching: StoredEvents  # the live hub's look-ups, on the main pool (the ledger's own work)
    neg_items: ItemCache  # NIP-77: the collections' item lists kept for the sessions to come


async def open_reads_pool(url: str, connections: int, statement_seconds: float) -> Pool:
    """The relay's reads' pool: `connections` at most, opened as needed, each statement stopped
    after `statement_seconds`."""
    return await open_pool(
        url, min_size=0, max_size=connections, statement_seconds=statement_seconds
    )


@asynccontextmanager
async def open_relay_reads(
    main: Pool,
    database_url: str,
    *,
    connections: int,
    statement_seconds: float,
    neg_warm: int,
    item_bytes: int,
    max_records: int,
) -> AsyncIterator[RelayReads]:
    """The relay's reads over `main` and a pool of their own on `database_url`; `neg_warm`: how
    many of the largest collections' NIP-77 lists to load in the background from the start
    (`ItemCache.warm`, `max_records` events at most each), `item_bytes` what the lists kept may
    hold together. Closing waits `CLOSE_SECONDS` for reads still running, then ends them."""
    reads = await open_reads_pool(database_url, connections, statement_seconds)
    watched = metrics.POOLS.watch({"relay": reads})
    neg_items = ItemCache(item_bytes)
    warming = (
        asyncio.create_task(_warm(neg_items, reads, neg_warm, max_records), name="tms-neg-warm")
        if neg_warm
        else None
    )
    try:
        yield RelayReads(
            pool=reads,
            stored=StoredEvents(reads),
            matching=StoredEvents(main),
            neg_items=neg_items,
        )
    finally:
        if warming is not None:
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
        metrics.POOLS.forget(watched)
        try:
            await asyncio.wait_for(reads.close(), CLOSE_SECONDS)
        except TimeoutError:
            reads.terminate()


async def _warm(lists: ItemCache, reads: Pool, collections: int, max_records: int) -> None:
    """The first syncs after a start find the largest collections' lists kept (seconds each
    at a million events, read once here rather than by the first client to ask). Nothing
    waits for it: the server answers meanwhile, a sync of a collection being loaded waits for
    that load, and a failure only leaves the lists to be read when first asked for."""
    started = time.perf_counter()
    try:
        loaded, events = await lists.warm(reads, collections, max_records)
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
