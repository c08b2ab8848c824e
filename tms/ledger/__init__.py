"""The ledger's front door: what the doors (relay, pages, HTTP API, MCP, CLI, witness) may use.
Below it, `read`, `write`, `log` and the store are the ledger's own (tests/test_layers.py).

It hands on: the one path (`Ledger`, a client's `Turn`), who may read (`Access` and its
capabilities) and the reads every door asks (`Reads`, `Lookups`, `Exporter`, ...); the relay's
reads (`open_relay_reads`: its stored events, the live hub's look-ups, NIP-77's item lists, and
the commit feed that feeds its hub); each collection's transparency log and its witnesses'
cosignatures (`LogReads`, `Cosigned`); and the database the ledger lives in, as the server and
the operator's commands open, migrate and name it (`Pool`, `open_pool`, `migrate`, `citus`,
`EmbeddedPostgres`, ...)."""

from tms.ledger.access import Access, ReadableCollection, Reader, not_a_reader
from tms.ledger.log.cosigned import Cosigned, Standing
from tms.ledger.log.reads import LogReads
from tms.ledger.operated import REFRESH_SECONDS, Operated
from tms.ledger.read import watermark
from tms.ledger.read.excerpts import ShownLink
from tms.ledger.read.export import Exporter
from tms.ledger.read.feed import CommitFeed
from tms.ledger.read.filters import BIG_BYTES, PAGE, Stored, StoredEvents
from tms.ledger.read.lookups import Found, Lookups
from tms.ledger.read.neg_threads import reconciling
from tms.ledger.read.negentropy_items import (
    ITEM_BYTES,
    ItemCache,
    TooMany,
    most_items,
    negentropy_items,
)
from tms.ledger.read.reads import CLAIM_SORTS, DEFAULT_WINDOW, Reads
from tms.ledger.relay_reads import RelayReads, open_relay_reads
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.ledger.write.commits import Turn
from tms.store import citus
from tms.store.database import (
    DATABASE_NAME,
    Pool,
    application_name,
    database_url,
    embedded_url,
    migrate,
    newest_schema,
    open_pool,
    start_embedded,
    with_database,
)
from tms.store.driver import connect
from tms.store.embedded import EmbeddedPostgres, client_program, running_url
from tms.store.outage import Outage

__all__ = [
    "BIG_BYTES",
    "CLAIM_SORTS",
    "DATABASE_NAME",
    "DEFAULT_WINDOW",
    "ITEM_BYTES",
    "PAGE",
    "REFRESH_SECONDS",
    "Access",
    "CommitFeed",
    "Cosigned",
    "EmbeddedPostgres",
    "Exporter",
    "Found",
    "ItemCache",
    "Ledger",
    "LogReads",
    "Lookups",
    "Operated",
    "Outage",
    "Pool",
    "ReadableCollection",
    "Reader",
    "Reads",
    "RelayReads",
    "Sessions",
    "ShownLink",
    "Standing",
    "Stored",
    "StoredEvents",
    "TooMany",
    "Turn",
    "application_name",
    "citus",
    "client_program",
    "connect",
    "database_url",
    "embedded_url",
    "migrate",
    "most_items",
    "negentropy_items",
    "newest_schema",
    "not_a_reader",
    "open_pool",
    "open_relay_reads",
    "reconciling",
    "running_url",
    "start_embedded",
    "watermark",
    "with_database",
]
