"""The locks that serialize work on a collection: a publish's (`tms.ledger.write.commits`), and
a log built outside a publish (`tms.ledger.log.tree`), which must not interleave with one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from tms.rules.publish import Parsed
from tms.store.database import Connection
from tms.types import UNSCOPED

# One key's lock, taken where the key's rows live: the statement filters on the collection, so
# on Citus it runs on the worker that holds the collection's shard (and the lock with it),
# whichever node the server talks to; on a single PostgreSQL it is the same advisory lock as
# ever. The count makes the row that carries the call whether or not the collection has one.
_SQL_LOCK: Final = """
    SELECT pg_advisory_xact_lock(hashtextextended($1, 7)), count(*)
    FROM collection_counts WHERE collection = $1"""


def lock_keys(batch: Sequence[Parsed]) -> tuple[str, ...]:
    """What a batch locks: each collection it names, and one key for all profiles and terms."""
    return tuple(sorted({p.collection or UNSCOPED for p in batch}))


async def hold_locks(conn: Connection, keys: Sequence[str]) -> None:
    """Take these lock keys (collections' slugs) until the transaction ends. A publish holds
    its batches' `lock_keys` (`tms.ledger.write.writes.locked_transaction`: through this on
    Citus, with its `BEGIN` on a single PostgreSQL), so that two batches racing to create
    one collection end with one owner and a batch sent twice at once is stored once; work on a
    collection outside a publish (building its log) takes its slug, so as not to interleave with
    one. One statement per key, in sorted order, so that two batches never wait on each other
    in a cycle."""
    for key in sorted(keys):
        await conn.fetchval(_SQL_LOCK, key)
