"""Each claim's key (sql/013: `tms.rules.quotes.claim_key`, what two claims share when their
texts differ only as quote matching forgives), stored by the publish that stores the claim
(`key_rows`, written with the rest of its write) and, for claims stored before keys existed, by
`backfill` at start-up. The submit page looks claims up by it (`tms.ledger.read.lookups`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from tms.ledger.statement import Rows
from tms.ledger.write.snapshots import OffLoop
from tms.rules.kinds import Claim
from tms.rules.publish import Parsed
from tms.rules.quotes import claim_key
from tms.store.database import Pool
from tms.types import EventId, Slug

log = logging.getLogger(__name__)

INLINE_KEY_CHARS: Final = 20_000  # claim texts hashed on the event loop up to this, in all
BACKFILL_ROWS: Final = 500  # claims keyed per round of the back-fill


def _keys(claims: Sequence[tuple[EventId, Slug, str]]) -> list[tuple[EventId, Slug, bytes]]:
    return [(claim_id, slug, claim_key(text)) for claim_id, slug, text in claims]


async def key_rows(accepted: Sequence[Parsed], run: OffLoop) -> Rows:
    """Each accepted claim's key, for the publish's write to store. Normalizing is CPU work: a
    batch holding more than `INLINE_KEY_CHARS` of claim text is keyed off the loop."""
    claims = [
        (p.event.id, p.content.collection, p.content.text)
        for p in accepted
        if type(p.content) is Claim  # not isinstance: see tms.rules.publish.Parsed
    ]
    if not claims:
        keyed = []
    elif sum(len(text) for _, _, text in claims) <= INLINE_KEY_CHARS:
        keyed = _keys(claims)
    else:
        keyed = await run(_keys, claims)
    return Rows("claim_keys", _KEY_TYPES, list(keyed), _KEYED)


_KEY_TYPES: Final = (("claim_id", "text"), ("collection", "text"), ("key", "bytea"))
_KEYED: Final = " ON CONFLICT (claim_id, collection) DO NOTHING"


_SQL_UNKEYED: Final = f"""
    SELECT c.id, c.collection, c.text FROM claims c
    WHERE NOT EXISTS (SELECT 1 FROM claim_keys k
                      WHERE k.claim_id = c.id AND k.collection = c.collection)
    ORDER BY c.seq LIMIT {BACKFILL_ROWS}"""
_SQL_INSERT_KEYS: Final = """
    INSERT INTO claim_keys (claim_id, collection, key)
    SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])
    ON CONFLICT (claim_id, collection) DO NOTHING"""


async def backfill(pool: Pool) -> int:
    """Key every stored claim that has no key yet (claims stored before sql/013), a few hundred
    at a time, off the event loop; returns how many. Once all have keys a start-up costs one
    anti-join that finds nothing."""
    written = 0
    while True:
        rows = await pool.fetch(_SQL_UNKEYED)
        if not rows:
            break
        keyed = await asyncio.to_thread(
            _keys, [(r["id"], r["collection"], r["text"]) for r in rows]
        )
        del rows
        await pool.execute(
            _SQL_INSERT_KEYS,
            [k[0] for k in keyed],
            [k[1] for k in keyed],
            [k[2] for k in keyed],
        )
        written += len(keyed)
    if written:
        log.info("keyed %d claims stored before claim keys existed", written)
    return written
