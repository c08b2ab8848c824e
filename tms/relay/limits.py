"""The relay's limits, named once: the NIP-11 document states them, the connection enforces
them, `/docs` prints them. Sizes are bytes (UTF-8), as a memory budget needs them."""

from __future__ import annotations

from typing import Final

from tms.http.bodies import MiB

MAX_MESSAGE_BYTES: Final = 16 * MiB  # one full-size evidence event, whatever its escaping
MAX_SUBSCRIPTIONS: Final = 100  # open REQs per connection
MAX_FILTERS: Final = 10  # filters per REQ or COUNT
MAX_LIMIT: Final = 1000  # a filter's `limit`
DEFAULT_LIMIT: Final = 500  # stored events per filter when it names no `limit`
MAX_SUBID_CHARS: Final = 64
MAX_SEARCH_RESULTS: Final = 200  # NIP-50: the ledger's own search returns at most this many
MAX_READS: Final = 4  # stored answers (REQ) and COUNTs read at once per connection; more wait

# Memory. Every byte a connection makes the process hold (queued messages, events held for a
# subscription while its stored answer is read) counts against the connection's budget and the
# process's (`tms.relay.budget`); the process's is a setting (`TMS_RELAY_MEMORY_MB`).
OUTBOX_BYTES: Final = 8 * MiB  # a connection's budget: queued for it, not yet written
OUTBOX_MESSAGES: Final = 20_000  # messages queued for one connection, at most
STORED_WINDOW_BYTES: Final = 2 * MiB  # a stored answer queues this much ahead of the client
LIVE_BEHIND_SECONDS: Final = 15.0  # a live event unwritten this long: the client is behind
BIG_LOADS: Final = 8  # large stored contents read from the database at once, per process
STALL_SECONDS: Final = 30.0  # a stored answer waits this long for a client to read, at most
# The process's budget full: a connection that holds the most and whose client has read nothing
# this long gives way to one that reads and holds no more than its share (`tms.relay.budget`)
GIVE_WAY_SECONDS: Final = 2.0
NOTICE_SECONDS: Final = 2.0  # time given to a closing NOTICE to go out
MAX_IN_FLIGHT: Final = 64  # a connection's events submitted but not yet answered
MAX_NEG_SESSIONS: Final = 2  # NIP-77: open NEG sessions per connection (each holds its items)
# items in one NEG session's list: about 144 MB at its most (`Items.nbytes`, about 72 bytes an item)
MAX_NEG_RECORDS: Final = 2_000_000
# NIP-77: the collections' item lists this process keeps for the sessions to come, together at
# most (76 bytes an item: a 2,000,000-event collection fits; `tms.ledger.read.negentropy_items`)
NEG_CACHE_BYTES: Final = 256 * MiB
NEG_FRAME_BYTES: Final = 512 * 1024  # our frameSizeLimit: a NEG-MSG carries twice this in hex
MAX_NEG_MESSAGE_BYTES: Final = 1 * MiB  # a client's Negentropy message, before hex
